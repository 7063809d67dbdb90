#!/usr/bin/env bash
# Start, or resume, the sampling run of issue #39's frontier: Qwen2.5-Coder-1.5B (bf16), TriviaQA's first 1,000
# questions, the greedy answers and K = 10 answers sampled at T = 1.0 per question (the `samples` pass), scored with
# the trace-only and sampling estimators. One torch thread, `nice -n 19`, detached (`nohup setsid`): it runs for
# hours in the background and survives the session; run this script again to resume (finished shards are kept,
# a shard killed half-way is computed again, with the same samples: each question's are seeded by its id).
#
#   bash scripts/frontier_run.sh            # start or resume; prints the PID; log: $RUN.log
#   tail -f /work/runs/frontier-qwen-triviaqa.log
#   ls /work/runs/frontier-qwen-triviaqa/samples/triviaqa     # 16 shards of 64 questions when done
#
# A new run directory is seeded with the greedy answers and the P(True) / verbalised shards of
# docs/runs/qwen1000 (same model, dtype, decoding and shard size: the same answers), as runs/lc-qwen3k was; then
# only the samples are computed. Measured on this machine (AMD EPYC, AVX2, no bf16 units; 2 cores shared): about
# 74 CPU-seconds per question for the 10 samples in bf16 (a 4-question smoke run). Settings by environment:
# RUN (run directory, outside every git checkout), PY (python), DTYPE (bfloat16; float32 is ≈ 2.4× faster on this
# CPU but needs a new RUN and is not seeded: its greedy answers differ), TRACECAL_DATA.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
RUN=${RUN:-/work/runs/frontier-qwen-triviaqa}
PY=${PY:-/work/main/.venv/bin/python}
DTYPE=${DTYPE:-bfloat16}
SEED_FROM=$REPO/docs/runs/qwen1000
LOG=$RUN.log
PIDFILE=$RUN.pid

if [[ -f $PIDFILE ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
    echo "already running: PID $(cat "$PIDFILE") (log: $LOG)"
    exit 0
fi
if [[ ! -e $RUN && $DTYPE == bfloat16 && -f $SEED_FROM/config.json ]]; then
    mkdir -p "$RUN/traces" "$RUN/extra"
    cp -r "$SEED_FROM/traces/triviaqa" "$RUN/traces/"
    cp -r "$SEED_FROM/extra/triviaqa" "$RUN/extra/"
    "$PY" - "$SEED_FROM/config.json" "$RUN/config.json" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
doc["config"]["tasks"] = ["triviaqa"]  # the stored identity (model, dtype, limit, shard size, ...) is kept
json.dump(doc, open(sys.argv[2], "w"), indent=1)
EOF
    echo "seeded $RUN with the greedy answers and P(True)/verbalised shards of $SEED_FROM" >>"$LOG"
fi
mkdir -p "$(dirname "$RUN")"
echo "[$(date -Is)] start: $REPO, dtype $DTYPE" >>"$LOG"
cd "$(dirname "$RUN")"
PYTHONPATH=$REPO/src HF_HUB_OFFLINE=1 TRACECAL_DATA=${TRACECAL_DATA:-/work/shared/data} \
    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false \
    nohup setsid nice -n 19 "$PY" -m tracecal.cli evaluate --model qwen2.5-coder-1.5b --tasks triviaqa \
    --limit 1000 --dtype "$DTYPE" --threads 1 --estimators trace-only,sampling --num-samples 10 \
    --sample-temperature 1.0 --sample-seed 0 --run-dir "$RUN" --no-report >>"$LOG" 2>&1 </dev/null &
echo $! >"$PIDFILE"
# setsid puts it in an autogroup of its own, which the scheduler shares fairly with every other session whatever
# the nice value inside it: nice the group too, or it takes a whole core from the foreground (measured: the main
# job's two workers got half a core each beside it)
echo 19 >"/proc/$!/autogroup" 2>/dev/null || true
echo "started: PID $! (log: $LOG, run: $RUN)"
