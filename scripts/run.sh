#!/usr/bin/env bash
# Set up (if needed) and run the main job: which confidence to trust for Qwen2.5-Coder-1.5B-Instruct on TriviaQA
# (its Q4_K_M GGUF run by llama.cpp in this process: 3-4× faster than the dequantised weights in torch on a CPU).
# It prints the results tables and ends with the verdict (which confidence to use, how calibrated it is, what a
# threshold buys, the commands to serve it), and writes runs/main/report.html. The run directory is resumable:
# kill it and run the same command.
#
#   bash scripts/run.sh            TriviaQA, the first 400 questions (≈ 70 correct answers: every task of the job
#                                  has at least 50, so the verdict means something), the 20 trace-only estimators,
#                                  20 splits → runs/main (docs/benchmarks.md has the time measured from a fresh
#                                  clone); add `--estimators trace-only,extra` for P(True) and verbalised confidence
#                                  (two more prompts per answer: ≈ 4× the evaluation time)
#   bash scripts/run.sh --full     the paper protocol: TriviaQA, SVAMP, TruthfulQA and MLQA, 1,000 questions each,
#                                  all 24 estimators (beam, TokenSAR, MARS too) → runs/full (many hours on 2 cores)
# Other arguments are passed to `tracecal evaluate` (the last value of an option wins), e.g.
#   bash scripts/run.sh --model smollm2-135m-instruct --run-dir runs/smol
# On a machine with ≥ 2 cores it runs TRACECAL_WORKERS (default 2) single-threaded workers on the same run
# directory (they split the shards). The weights' dtype is `auto`: bf16 on CPUs with bf16 matrix units
# (AMX / AVX-512-BF16) and on GPUs, else fp32 (--dtype float32 overrides).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh   # everything the main job and the README's commands need (torch, the package, the models)
. scripts/env.sh
PRESET=(--run-dir runs/main --backend llamacpp --model qwen2.5-coder-1.5b --tasks triviaqa --limit 400
  --estimators trace-only)
if [ "${1:-}" = "--full" ]; then
  shift
  PRESET=(--run-dir runs/full --model qwen2.5-coder-1.5b --limit 1000 --estimators all)  # HF: beams need it
fi
CORES=$(nproc 2>/dev/null || echo 1)
WORKERS=${TRACECAL_WORKERS:-$(( CORES >= 2 ? 2 : 1 ))}
ARGS=("${PRESET[@]}")
if [ "$WORKERS" -le 1 ]; then
  exec .venv/bin/tracecal evaluate "${ARGS[@]}" --report "$@"
fi
mkdir -p runs
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
for i in $(seq 2 "$WORKERS"); do
  # helpers compute shards only (--no-score); the foreground worker waits for them, scores and reports
  .venv/bin/tracecal evaluate "${ARGS[@]}" --threads 1 --no-score --no-report "$@" > "runs/worker$i.log" 2>&1 &
  pids+=($!)
done
.venv/bin/tracecal evaluate "${ARGS[@]}" --threads 1 --report "$@"
