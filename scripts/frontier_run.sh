#!/usr/bin/env bash
# Start, or resume, the sampling run of issue #39's frontier: Qwen2.5-Coder-1.5B, TriviaQA's first 1,000 questions,
# the greedy answers and K = 10 answers sampled at T = 1.0 per question (the `samples` pass), scored with the
# trace-only and sampling estimators. One thread, `nice -n 19`, detached (`nohup setsid`): it runs for hours in the
# background; a session's end kills it, so run this script again to resume (finished shards are kept, a shard
# killed half-way is computed again with the same samples: each question's are seeded by its id).
#
#   bash scripts/frontier_run.sh            # start or resume; prints the PID; log: $RUN.log
#   bash scripts/frontier_run.sh save       # copy the finished shards into docs/runs/<run name> (commit it)
#   tail -f /work/runs/frontier-qwen-lc-triviaqa.log
#   ls /work/runs/frontier-qwen-lc-triviaqa/samples/triviaqa     # 63 shards of 16 questions when done
#
# BACKEND=llamacpp (default): the model the main job runs (its Q4_K_M GGUF in llama.cpp), ≈ 1 s per sampled
# answer on one thread of this CPU; shards of 16 questions so that a session's end loses little. BACKEND=hf: the
# bf16 transformers weights of docs/runs/qwen1000, whose greedy answers and P(True)/verbalised shards seed a new run
# directory (same model, dtype, decoding and shard size), then only the samples are computed — about 74 CPU-seconds
# per question (AMD EPYC, AVX2, no bf16 units: 20 CPU-hours for 1,000). Settings by environment: RUN (run
# directory, outside every git checkout), PY (python), DTYPE (hf only), SHARD, ESTIMATORS, TRACECAL_DATA.
#
# MODEL=smollm2: SmolLM2-135M-Instruct (bf16, transformers; BACKEND is hf), seeded from docs/runs/smollm1000's
# TriviaQA greedy, P(True)/verbalised, beam and embedding (TokenSAR/MARS) shards (shards of 64, its identity), so
# only the samples are computed, and scored with every estimator (`all,sampling`):
#   MODEL=smollm2 bash scripts/frontier_run.sh      # run: /work/runs/frontier-smollm-triviaqa
# TASK and LIMIT pick another task (default triviaqa, 1000). Qwen's SVAMP run (started 2026-12-07, resumed the same
# way; LIMIT is part of the run's identity, so always name it):
#   TASK=svamp LIMIT=384 bash scripts/frontier_run.sh      # run: /work/runs/frontier-qwen-lc-svamp
# 384 questions ≈ 12 CPU-hours: SVAMP's greedy answers average 60 tokens (96 at most), 8× TriviaQA's, and llama.cpp
# decodes ≈ 8 tokens per CPU-second on one thread here, so ≈ 10 s greedy + ≈ 100 s for 10 samples per question.
# The greedy pass runs over all 384 questions before the first sample is drawn (passes run in order).
# ESTIMATORS=trace-only,sampling,extra,semantic adds P(True)/verbalised and TokenSAR/MARS (llama.cpp computes both).
# A run stopped part-way (kill its PID) keeps its finished shards; `tracecal frontier` reads the questions whose
# samples are stored (`--complete-only`, see docs/results.md).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
MODEL=${MODEL:-qwen}
TASK=${TASK:-triviaqa}  # e.g. TASK=svamp LIMIT=200: SVAMP's chain-of-thought answers are ≈ 10× TriviaQA's length
LIMIT=${LIMIT:-1000}
PY=${PY:-/work/main/.venv/bin/python}
if [[ $MODEL == smollm2 ]]; then
    BACKEND=hf
    MODEL_ID=smollm2-135m-instruct
    RUN=${RUN:-/work/runs/frontier-smollm-$TASK}
    SEED_FROM=$REPO/docs/runs/smollm1000
    SEED_PASSES=(traces extra beam semantic)
    ESTIMATORS=${ESTIMATORS:-all,sampling}
else
    BACKEND=${BACKEND:-llamacpp}
    MODEL_ID=qwen2.5-coder-1.5b
    SEED_FROM=$REPO/docs/runs/qwen1000
    SEED_PASSES=(traces extra)
fi
if [[ $BACKEND == hf ]]; then
    RUN=${RUN:-/work/runs/frontier-$MODEL-$TASK}
    DTYPE=${DTYPE:-bfloat16}
    SHARD=${SHARD:-64}
    RUNTIME=(--dtype "$DTYPE")
else
    RUN=${RUN:-/work/runs/frontier-qwen-lc-$TASK}
    DTYPE=gguf
    SHARD=${SHARD:-16}
    RUNTIME=()
fi
ESTIMATORS=${ESTIMATORS:-trace-only,sampling}
LOG=$RUN.log
SNAPSHOT=${SNAPSHOT:-$REPO/docs/runs/$(basename "$RUN")}
if [[ ${1:-} == save ]]; then
    "$PY" "$REPO/scripts/evidence_snapshot.py" save "$RUN" "$SNAPSHOT"
    exit 0
fi
mkdir -p "$(dirname "$RUN")"

. "$REPO/scripts/background_run.sh"
running "$RUN" && exit 0
if [[ ! -e $RUN && $BACKEND == hf && $DTYPE == bfloat16 && -f $SEED_FROM/config.json ]]; then
    for pass in "${SEED_PASSES[@]}"; do
        mkdir -p "$RUN/$pass"
        cp -r "$SEED_FROM/$pass/$TASK" "$RUN/$pass/"
    done
    "$PY" - "$SEED_FROM/config.json" "$RUN/config.json" "$TASK" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
doc["config"]["tasks"] = [sys.argv[3]]  # the stored identity (model, dtype, limit, shard size, ...) is kept
json.dump(doc, open(sys.argv[2], "w"), indent=1)
EOF
    echo "seeded $RUN with the ${SEED_PASSES[*]} shards of $SEED_FROM" >>"$LOG"
fi
# a machine's disk does not outlive a session: the run's finished shards are kept in the repository
# (`bash scripts/frontier_run.sh save` copies them, prompts blanked, into docs/runs/<run name>; commit that folder) and
# copied back here before a run starts on a fresh machine (only what the run directory lacks)
if [[ -f $SNAPSHOT/config.json ]]; then
    "$PY" "$REPO/scripts/evidence_snapshot.py" restore "$SNAPSHOT" "$RUN" >>"$LOG"
    echo "restored the shards of $SNAPSHOT that $RUN lacked" >>"$LOG"
fi
mkdir -p "$(dirname "$RUN")"
echo "[$(date -Is)] start: $REPO, backend $BACKEND, dtype $DTYPE" >>"$LOG"
start_detached "$RUN" --model "$MODEL_ID" --backend "$BACKEND" --tasks "$TASK" --limit "$LIMIT" "${RUNTIME[@]}" \
    --shard-size "$SHARD" --estimators "$ESTIMATORS" --num-samples 10 --sample-temperature 1.0 --sample-seed 0
