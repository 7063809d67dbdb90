#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite offline.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
.venv/bin/ruff check src tests benchmarks
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
