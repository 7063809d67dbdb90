# Sourced by run.sh and test.sh: offline settings and the evaluation data folder.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# the evaluation data: $TRACECAL_DATA if set, else the nearest shared/data beside this checkout or one of its
# parent folders (tracecal itself looks only where its documentation says: --data-dir, $TRACECAL_DATA, ../shared/data)
if [ -z "${TRACECAL_DATA:-}" ]; then
  d=$(pwd)
  while [ "$d" != "/" ]; do
    if [ -d "$d/shared/data" ]; then export TRACECAL_DATA="$d/shared/data"; break; fi
    d=$(dirname "$d")
  done
fi
