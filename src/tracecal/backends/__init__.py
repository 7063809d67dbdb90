"""Backends: each turns prompts into `Trace` objects recorded during its own decoding pass.

:class:`Backend` is what the harness calls on any model; :class:`LocalBackend` adds what needs the weights
in this process (SECL, verbalised confidence). :class:`HFModel` is both; :class:`HTTPModel` (an
OpenAI-compatible server) is a ``Backend`` whose unsupported methods raise :class:`BackendUnsupportedError`.

``HFModel`` / ``load_model`` (torch, transformers) and ``HTTPModel`` are imported on first use, so that
``tracecal.backends.base`` and the service's ``/score`` do not load torch.
"""

from typing import Any

from tracecal.backends.base import Backend, BackendUnsupportedError, LocalBackend, PromptTooLongError

_LAZY = {
    "HFModel": "tracecal.backends.hf",
    "load_model": "tracecal.backends.hf",
    "HTTPModel": "tracecal.backends.http",
    "HTTPBackendError": "tracecal.backends.http",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tracecal.backends' has no attribute {name!r}")


__all__ = [
    "Backend",
    "BackendUnsupportedError",
    "HFModel",
    "HTTPBackendError",
    "HTTPModel",
    "LocalBackend",
    "PromptTooLongError",
    "load_model",
]
