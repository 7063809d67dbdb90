#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite offline.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/setup_vllm.sh   # the vLLM server of the integration tests (its own venv)
. scripts/env.sh
.venv/bin/ruff check src tests benchmarks
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
