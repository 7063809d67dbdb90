#!/usr/bin/env bash
# Set up (if needed) and run the main job: an evaluation on the offline default model that prints the
# results table and writes RUN/report.html. Arguments are passed to `tracecal evaluate`; the run directory
# is resumable (kill it and run the same command again).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec .venv/bin/tracecal evaluate --run-dir runs/main --report "$@"
