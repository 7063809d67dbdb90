#!/usr/bin/env bash
# Add one pass to a committed evidence run (issue #39): the hidden pass (residual-stream summaries, teacher-forced over
# the stored answer tokens), the embedding pass of TokenSAR and MARS (`semantic`) or the 5-beam pass (`beam`) — no new
# greedy generation: the answers, traces and other passes are the run's own — then score the run's stored passes'
# estimators and the new pass's group.
#
#   bash scripts/pass_run.sh hidden smollm1000      # start or resume; run: /work/runs/hidden-smollm1000, log: $RUN.log
#   bash scripts/pass_run.sh semantic qwen1000      # Qwen's TokenSAR / MARS pass, the four tasks
#   TASKS=triviaqa,svamp bash scripts/pass_run.sh beam qwen1000   # a subset of the run's tasks
#   bash scripts/pass_run.sh semantic qwen1000 save # the pass, results and timings → docs/runs/semantic-qwen1000
#   bash scripts/pass_run.sh semantic qwen1000 merge  # once complete: the whole run → docs/runs/qwen1000 (it gains
#                                                     # the pass; its results, scores and ablations are the new ones)
#
# The run directory /work/runs/PASS-NAME is the committed snapshot docs/runs/NAME restored (prompts are rebuilt from
# the task data), plus docs/runs/PASS-NAME where an earlier session saved part of this pass: a session's end kills the
# run, this script resumes it (finished shards are kept; commit the saved folder). One thread, nice 19 in an
# autogroup of its own (scripts/background_run.sh), detached. Once the pass is complete, `tracecal ablate RUN` there,
# then `merge` puts the run with its new ablations back into docs/runs/NAME.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
USAGE="usage: pass_run.sh PASS RUN_NAME [save|merge]  (PASS: hidden, semantic or beam; RUN_NAME: a folder of docs/runs)"
PASS=${1:?$USAGE}
NAME=${2:?$USAGE}
[[ $PASS =~ ^(hidden|semantic|beam)$ ]] || { echo "unknown pass '$PASS'; $USAGE"; exit 2; }
PY=${PY:-$REPO/.venv/bin/python}
SEED=${SEED:-$REPO/docs/runs/$NAME}  # the committed run (a test points it elsewhere)
RUN=${RUN:-/work/runs/$PASS-$NAME}
SNAPSHOT=${SNAPSHOT:-$REPO/docs/runs/$PASS-$NAME}
LOG=$RUN.log
[[ -f $SEED/config.json ]] || { echo "no committed run docs/runs/$NAME (config.json)"; exit 2; }
if [[ ${3:-} == save ]]; then
    KEEP=$PASS,traces/file-csqa,results.json,results.md,results.csv,timings.json,hidden_transfer.json,hidden_transfer.md
    for f in "$RUN"/learning_curve*; do  # this run's own learning curve (the probes'), not a copy of the seed's
        [[ -e $f ]] && ! cmp -s "$f" "$SEED/$(basename "$f")" && KEEP+=",$(basename "$f")"
    done
    "$PY" "$REPO/scripts/evidence_snapshot.py" save "$RUN" "$SNAPSHOT" --only "$KEEP"
    exit 0
fi
. "$REPO/scripts/background_run.sh"
if [[ ${3:-} == merge ]]; then
    running "$RUN" && { echo "the $PASS pass of $NAME is still running: merge it when it is complete"; exit 1; }
    PYTHONPATH=$REPO/src "$PY" - "$RUN" "$PASS" <<'PYEOF' || exit 1
import sys
from tracecal.evaluation.runstore import TRACES, RunStore
store, name = RunStore(sys.argv[1]), sys.argv[2]
tasks = store.config()["config"]["tasks"]
short = [t for t in tasks if store.shard_count(name, t) < store.shard_count(TRACES, t)]
if short or not (store.path / "results.json").exists():
    sys.exit(f"not merged: the {name} pass of {', '.join(short) or 'the run'} is incomplete or unscored")
PYEOF
    "$PY" "$REPO/scripts/evidence_snapshot.py" save "$RUN" "$SEED"
    exit 0
fi
running "$RUN" && exit 0
mkdir -p "$(dirname "$RUN")"
"$PY" "$REPO/scripts/evidence_snapshot.py" restore "$SEED" "$RUN" >>"$LOG"
[[ -d $SNAPSHOT ]] && "$PY" "$REPO/scripts/evidence_snapshot.py" restore "$SNAPSHOT" "$RUN" >>"$LOG"
read -r MODEL DTYPE LIMIT STORED_TASKS < <("$PY" - "$SEED/config.json" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
c, i = d["config"], d["identity"]
print(i["model"], i["dtype"], i["limit"], ",".join(c["tasks"]))
PYEOF
)
# TASKS: the seed run's by default; a task added later (the SmolLM2 run's user file, docs/results.md) is scored only
# when named here too, so name it before `save`, or that run's results.json loses it
TASKS=${TASKS:-$STORED_TASKS}
ESTIMATORS=trace-only
for pass in extra beam semantic; do
    [[ -d $SEED/$pass && $pass != "$PASS" ]] && ESTIMATORS+=",$pass"
done
ESTIMATORS+=",$PASS"
echo "[$(date -Is)] start: $REPO, pass $PASS, $MODEL ($DTYPE), tasks $TASKS, limit $LIMIT, estimators $ESTIMATORS" >>"$LOG"
start_detached "$RUN" --model "$MODEL" --dtype "$DTYPE" --tasks "$TASKS" --limit "$LIMIT" --estimators "$ESTIMATORS"
