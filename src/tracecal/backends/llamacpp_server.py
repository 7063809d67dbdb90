"""llama-cpp-python's OpenAI-compatible server for the HTTP backend, started on 127.0.0.1 for a ``with`` block.

`serve_gguf` runs ``python -m llama_cpp.server`` on a GGUF (the offline default when none is given) with the
log-probs a trace needs (``--logits_all true``); `run_server` is that server's entry point with llama.cpp's
extra buffer types set as the in-process backend sets them (`tracecal.backends.llamacpp.LlamaCppModel.load`).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from tracecal.backends.defaults import default_gguf_path
from tracecal.backends.llamacpp_load import llama_model_params
from tracecal.backends.servers import free_port, served_process

__all__ = ["run_server", "serve_gguf"]


def run_server(argv: Sequence[str], extra_buffers: bool = False) -> None:
    """``python -m llama_cpp.server ARGV`` with llama.cpp's extra buffer types on or off (see `LlamaCppModel.load`)."""
    from llama_cpp.server.__main__ import main

    sys.argv = ["llama_cpp.server", *argv]
    with llama_model_params(extra_buffers):
        main()


@contextlib.contextmanager
def serve_gguf(
    path: str | os.PathLike[str] | None = None,
    alias: str = "smollm2",
    n_threads: int = 1,
    n_ctx: int = 2048,
    port: int | None = None,
    timeout: float = 180.0,
    log: Any = subprocess.DEVNULL,
    extra_buffers: bool = False,
) -> Iterator[str]:
    """Run llama-cpp-python's OpenAI-compatible server on 127.0.0.1 for the ``with`` block; yields its ``/v1`` URL.

    ``python -m llama_cpp.server`` with ``--logits_all true`` (needed for log-probs); ``extra_buffers=False``
    runs it through :func:`run_server` so that it uses the kernels of the in-process backend's default. Ready
    when ``GET /v1/models`` lists ``alias`` (polled until ``timeout`` s); terminated when the block ends.
    """
    gguf = default_gguf_path() if path is None else Path(path)
    port = free_port() if port is None else port
    opts = f"--host 127.0.0.1 --port {port} --n_threads {n_threads} --logits_all true --n_ctx {n_ctx}".split()
    code = f"import sys, {__name__} as m; m.run_server(sys.argv[1:])"
    launch = ["-m", "llama_cpp.server"] if extra_buffers else ["-c", code]
    cmd = [sys.executable, *launch, "--model", str(gguf), "--model_alias", alias, *opts]
    with served_process(cmd, port, alias, what="llama.cpp server", timeout=timeout, log=log) as url:
        yield url
