#!/usr/bin/env bash
# Issue #39 item 3: the hidden pass (per answer, the residual stream's summaries at 3 layers: the mean over the
# answer's decoding states and the state before its first token) of a committed evidence run, computed
# teacher-forced over its stored answer tokens (no new generation: the answers, traces and other passes are the
# run's own), then scored with the probe estimators beside the run's other estimators.
#
#   bash scripts/hidden_run.sh smollm1000          # start or resume; run: /work/runs/hidden-smollm1000, log: $RUN.log
#   bash scripts/hidden_run.sh lc-qwen3k           # Qwen2.5-Coder-1.5B, TriviaQA 3,000 (the learning curve's pool)
#   bash scripts/hidden_run.sh qwen1000            # Qwen, the four tasks (transfer); TASKS=triviaqa,mlqa for a subset
#   bash scripts/hidden_run.sh smollm1000 save     # hidden/ and the scored results → docs/runs/hidden-smollm1000
#
# The run directory is the committed snapshot docs/runs/<name> restored (prompts are rebuilt from the task data),
# plus docs/runs/hidden-<name> where an earlier session saved part of the hidden pass: a session's end kills the run,
# this script resumes it (finished shards are kept). One thread, nice 19 in an autogroup of its own (see
# scripts/background_run.sh), detached. The estimators: the seed run's passes that are stored (trace-only, extra, beam,
# semantic) and the hidden group (hidden_probe, hidden_probe_trace_plus); nothing but the hidden pass is computed.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
NAME=${1:?usage: hidden_run.sh RUN_NAME [save]  (a folder of docs/runs, e.g. smollm1000, qwen1000, lc-qwen3k)}
PY=${PY:-$REPO/.venv/bin/python}
SEED=$REPO/docs/runs/$NAME
RUN=${RUN:-/work/runs/hidden-$NAME}
SNAPSHOT=${SNAPSHOT:-$REPO/docs/runs/hidden-$NAME}
LOG=$RUN.log
[[ -f $SEED/config.json ]] || { echo "no committed run docs/runs/$NAME (config.json)"; exit 2; }
if [[ ${2:-} == save ]]; then
    KEEP=hidden,traces/file-csqa,results.json,results.md,results.csv,hidden_transfer.json,hidden_transfer.md
    for f in "$RUN"/learning_curve*; do [[ -e $f ]] && KEEP+=",$(basename "$f")"; done
    "$PY" "$REPO/scripts/evidence_snapshot.py" save "$RUN" "$SNAPSHOT" --only "$KEEP"
    exit 0
fi
. "$REPO/scripts/background_run.sh"
running "$RUN" && exit 0
mkdir -p "$(dirname "$RUN")"
"$PY" "$REPO/scripts/evidence_snapshot.py" restore "$SEED" "$RUN" >>"$LOG"
[[ -d $SNAPSHOT ]] && "$PY" "$REPO/scripts/evidence_snapshot.py" restore "$SNAPSHOT" "$RUN" >>"$LOG"
read -r MODEL DTYPE LIMIT STORED_TASKS < <("$PY" - "$SEED/config.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
c, i = d["config"], d["identity"]
print(i["model"], i["dtype"], i["limit"], ",".join(c["tasks"]))
EOF
)
# TASKS: the seed run's by default; a task added later (the SmolLM2 run's user file, docs/results.md) is scored only
# when named here too, so name it before `save`, or that run's results.json loses it
TASKS=${TASKS:-$STORED_TASKS}
ESTIMATORS=trace-only
for pass in extra beam semantic; do
    [[ -d $SEED/$pass ]] && ESTIMATORS+=",$pass"
done
ESTIMATORS+=",hidden"
echo "[$(date -Is)] start: $REPO, $MODEL ($DTYPE), tasks $TASKS, limit $LIMIT, estimators $ESTIMATORS" >>"$LOG"
start_detached "$RUN" --model "$MODEL" --dtype "$DTYPE" --tasks "$TASKS" --limit "$LIMIT" --estimators "$ESTIMATORS"
