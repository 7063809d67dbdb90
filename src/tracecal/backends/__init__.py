"""Backends: each turns prompts into `Trace` objects recorded during its own decoding pass."""

from tracecal.backends.base import Backend, PromptTooLongError
from tracecal.backends.hf import HFModel, load_model

__all__ = ["Backend", "HFModel", "PromptTooLongError", "load_model"]
