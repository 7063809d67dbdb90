#!/usr/bin/env bash
# Set up (if needed) and run the main job: an evaluation on the offline default model that prints the
# results table and writes RUN/report.html. The run directory is resumable: kill it and run the same command.
#
#   bash scripts/run.sh            the first run: TriviaQA, SVAMP, TruthfulQA and MLQA, 200 questions each, the
#                                  17 trace-only estimators + P(True) and verbalised, 20 splits → runs/main
#                                  (12 minutes measured on a 2-core machine, see docs/results.md)
#   bash scripts/run.sh --full     the paper protocol: 1,000 questions per task, all 24 estimators (beam,
#                                  TokenSAR, MARS too) → runs/full (55 min measured on 2 idle cores)
# Other arguments are passed to `tracecal evaluate` (e.g. --tasks triviaqa --limit 100 --run-dir runs/try).
# On a machine with ≥ 2 cores it runs TRACECAL_WORKERS (default 2) single-threaded workers on the same run
# directory (they split the shards); on CPUs with bf16 matrix units (AMX / AVX-512-BF16) the weights are
# loaded in bf16 (2–3× faster here; pass --dtype float32 to override).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh   # only what the main job needs (torch, the package, the default model)
. scripts/env.sh
PRESET=(--run-dir runs/main --limit 200 --estimators trace-only,extra)
if [ "${1:-}" = "--full" ]; then
  shift
  PRESET=(--run-dir runs/full --limit 1000 --estimators all)
fi
DTYPE=()
if grep -qw -e amx_bf16 -e avx512_bf16 /proc/cpuinfo 2>/dev/null; then DTYPE=(--dtype bfloat16); fi
CORES=$(nproc 2>/dev/null || echo 1)
WORKERS=${TRACECAL_WORKERS:-$(( CORES >= 2 ? 2 : 1 ))}
ARGS=("${PRESET[@]}" "${DTYPE[@]}")
# the sentence embedder is installed (setup.sh --full) only when an estimator of this run reads the semantic pass
# (TokenSAR, MARS: --full, or --estimators naming them); the last --estimators wins, as in `tracecal evaluate`
.venv/bin/python - "${ARGS[@]}" "$@" <<'PY' && bash scripts/setup.sh --full
import sys
from tracecal.estimators import REGISTRY, passes_of, resolve_estimators
args = sys.argv[1:]
spec = []
for i, a in enumerate(args):
    if a == "--estimators" and i + 1 < len(args):
        spec.append(args[i + 1])
    elif a.startswith("--estimators="):
        spec.append(a.split("=", 1)[1])
try:
    names = resolve_estimators(spec[-1]) if spec else []
except (ValueError, KeyError, LookupError):  # evaluate reports a bad name
    names = []
sys.exit(0 if any("semantic" in passes_of(REGISTRY[n]) for n in names) else 1)
PY
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
