"""Opening a GGUF in llama.cpp for `tracecal.backends.llamacpp.LlamaCppModel`: the import of llama-cpp-python
(`import_llama_cpp`, a clear error when it is missing), llama.cpp's extra buffer types (`llama_model_params`) and
the checks and loading of `open_gguf`.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tracecal._inputs import UserFileNotFoundError
from tracecal._validation import closest
from tracecal.backends.arguments import check_positive_int
from tracecal.backends.defaults import DEFAULT_MODEL, NAMED_MODELS, gguf_tokenizer, named_gguf_path
from tracecal.backends.runtime import resolve_threads
from tracecal.errors import TracecalError, ValidationError

__all__ = ["LLAMA_LOG", "LlamaCppMissingError", "import_llama_cpp", "llama_model_params", "open_gguf"]

LLAMA_LOG = logging.getLogger("tracecal.llamacpp")
"""llama.cpp's own log lines, at their own levels (`route_llama_log`). Shown from ERROR up by default; lower it to
see more (``logging.getLogger("tracecal.llamacpp").setLevel(logging.INFO)`` and a handler)."""
LLAMA_LOG.setLevel(logging.ERROR)

# ggml's log levels (ggml.h: NONE 0, DEBUG 1, INFO 2, WARN 3, ERROR 4, CONT 5 = the previous line's). llama-cpp-python
# 0.3.16 maps them by an older enum (WARN read as ERROR), so a benign warning such as "n_ctx_per_seq (4096) <
# n_ctx_train (32768)" was printed at every load even with verbose=False.
_GGML_LEVELS = {0: logging.CRITICAL, 1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}
_ROUTE: list[Any] = []  # the installed C callback, kept alive as long as llama.cpp may call it


def route_llama_log(llama_cpp: Any) -> None:
    """Send llama.cpp's log to `LLAMA_LOG` at the levels ggml gives (once per process)."""
    if _ROUTE:
        return
    last = [logging.DEBUG]

    @llama_cpp.llama_log_callback
    def callback(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
        last[0] = last[0] if level == 5 else _GGML_LEVELS.get(level, logging.INFO)
        if LLAMA_LOG.isEnabledFor(last[0]):
            LLAMA_LOG.log(last[0], text.decode("utf-8", "replace").rstrip("\n"))

    llama_cpp.llama_log_set(callback, ctypes.c_void_p(0))
    _ROUTE.append(callback)


class LlamaCppMissingError(TracecalError, ImportError):
    """llama-cpp-python is not installed (the extra ``tracecal[llamacpp]``)."""


@contextlib.contextmanager
def llama_model_params(extra_buffers: bool) -> Iterator[None]:
    """While ``Llama(...)`` is built: llama.cpp's ``use_extra_bufts`` (repacked / AMX weight layouts) set.

    llama-cpp-python 0.3.16 has no argument for it, so its default-params function is wrapped for the block
    (process-wide: do not build other ``Llama`` objects in other threads meanwhile).
    """
    lib = import_llama_cpp().llama_cpp
    orig = lib.llama_model_default_params

    def params() -> Any:
        out = orig()
        out.use_extra_bufts = extra_buffers
        return out

    lib.llama_model_default_params = params
    try:
        yield
    finally:
        lib.llama_model_default_params = orig


def import_llama_cpp() -> Any:
    try:
        import llama_cpp
    except ImportError as e:
        raise LlamaCppMissingError(
            "the llama.cpp backend needs llama-cpp-python: pip install 'tracecal[llamacpp]' "
            "(it compiles llama.cpp, a few minutes)"
        ) from e
    route_llama_log(llama_cpp)
    return llama_cpp


def open_gguf(
    path: str | os.PathLike[str] | None,
    n_ctx: int,
    n_threads: int | None,
    tokenizer: Any,
    dtype: str | None,
    device: str | None,
    extra_buffers: bool,
) -> tuple[Any, Any, str]:
    """(the ``llama_cpp.Llama``, its transformers tokenizer, the model id) of `LlamaCppModel.load`'s arguments."""
    for key, value in (("dtype", dtype), ("device", device)):
        if value not in ("auto", None):
            raise ValidationError(f"{key}={value!r} does not apply to llama.cpp (the GGUF decides): use auto")
    model_id = DEFAULT_MODEL if path is None else str(path)
    p = named_gguf_path(model_id) if model_id in NAMED_MODELS else Path(model_id)  # a named model: defaults.py
    if p.suffix != ".gguf":
        close = closest(model_id, NAMED_MODELS)
        hint = f"; did you mean {close!r}?" if close else ""
        raise ValidationError(
            f"the llama.cpp backend runs a .gguf file or a named model ({', '.join(NAMED_MODELS)}); "
            f"{str(p)!r} is neither{hint}"
        )
    if not p.exists():
        raise UserFileNotFoundError(f"GGUF file not found: {p}")
    llama_cpp = import_llama_cpp()
    if tokenizer is None or isinstance(tokenizer, str | os.PathLike):
        from transformers import AutoTokenizer

        tokenizer = (
            AutoTokenizer.from_pretrained(str(gguf_tokenizer(p)))  # the GGUF's, parsed once (defaults.py)
            if tokenizer is None
            else AutoTokenizer.from_pretrained(str(tokenizer))
        )
    n_threads = check_positive_int(resolve_threads("auto") if n_threads is None else n_threads, "n_threads")
    with llama_model_params(extra_buffers):
        llm = llama_cpp.Llama(
            model_path=str(p),
            n_ctx=check_positive_int(n_ctx, "n_ctx"),
            n_threads=n_threads,
            n_threads_batch=n_threads,
            logits_all=False,
            verbose=False,
        )
    return llm, tokenizer, model_id
