#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite offline. `setup.sh --test` adds what only the tests use (the test
# tools, the embedder, Gemma-3-270M, llama-cpp-python with its server, Chromium) to what the main job installs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
bash scripts/setup_vllm.sh   # the vLLM server of the integration tests (its own venv)
. scripts/env.sh
.venv/bin/ruff check src tests benchmarks scripts
.venv/bin/ruff format --check src tests benchmarks scripts
.venv/bin/mypy   # settings in pyproject.toml [tool.mypy]: src/tracecal and src/tracecal_papers, zero errors
# two workers (one torch thread each, tests/conftest.py); the integration tests (servers, clusters) run one after
# another on one of them (--dist loadgroup). TRACECAL_TEST_WORKERS=0: a single process.
.venv/bin/python -m pytest -q -p no:cacheprovider -n "${TRACECAL_TEST_WORKERS:-2}" --dist loadgroup "$@"
