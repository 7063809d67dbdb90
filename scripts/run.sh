#!/usr/bin/env bash
# Set up (if needed) and run the main job: an evaluation on the offline default model that prints the
# results table and writes a report. Extra arguments go to `tracecal evaluate`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if .venv/bin/tracecal evaluate --help >/dev/null 2>&1; then
  exec .venv/bin/tracecal evaluate "$@"
fi
# before the evaluation harness existed: generate + score on a task file
.venv/bin/tracecal generate --task triviaqa --limit 64 --out runs/main/traces.parquet
exec .venv/bin/tracecal score runs/main/traces.parquet
