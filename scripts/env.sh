# Sourced by run.sh and test.sh: offline settings and the evaluation data folder.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# the evaluation data: $TRACECAL_DATA if set, else the nearest shared/data beside this checkout or one of its
# parent folders, else (a clone made elsewhere, e.g. in a temporary folder) beside the local repository it was
# cloned from. tracecal itself looks only where its documentation says: --data-dir, $TRACECAL_DATA, ../shared/data.
if [ -z "${TRACECAL_DATA:-}" ]; then
  origin=$(git config --get remote.origin.url 2>/dev/null || true)
  for start in "$(pwd)" "$origin"; do
    [ -n "$start" ] && [ -d "$start" ] || continue
    d=$(cd "$start" && pwd)
    while [ "$d" != "/" ]; do
      if [ -d "$d/shared/data" ]; then export TRACECAL_DATA="$d/shared/data"; break 2; fi
      d=$(dirname "$d")
    done
  done
fi
# the python of the vLLM venv (scripts/setup_vllm.sh) for tracecal.backends.vllm, unless already set
if [ -z "${TRACECAL_VLLM_PYTHON:-}" ] && [ -x "$(dirname "${BASH_SOURCE[0]}")/../.venv-vllm/bin/python" ]; then
  TRACECAL_VLLM_PYTHON="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.venv-vllm/bin/python"
  export TRACECAL_VLLM_PYTHON
fi
