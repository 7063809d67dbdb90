"""Load options of the local backends: stop tokens, dtypes, the converted checkpoint of a GGUF file; and the
named offline models re-exported from `tracecal.backends.catalogue` (SmolLM2-135M-Instruct, the default;
Gemma-3-270M; Qwen2.5-Coder-1.5B-Instruct).

A name in :data:`NAMED_MODELS` resolves to its GGUF path with :func:`named_gguf_path`; ``--model NAME`` and
``load_model(NAME)`` go through it, and the name (not the path) is recorded as the traces' ``model_id``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from tracecal._inputs import UserFileNotFoundError
from tracecal.backends import runtime
from tracecal.backends.catalogue import (
    CACHE_VARIABLE,
    DEFAULT_GGUF_DIST,
    DEFAULT_GGUF_FILE,
    DEFAULT_MODEL,
    GEMMA_MODEL,
    NAMED_MODELS,
    QWEN_MODEL,
    ModelAssemblyError,
    cache_dir_ready,
    default_gguf_path,
    file_sha256,
    gemma_gguf_path,
    model_cache_dir,
    named_gguf_path,
    named_models_hint,
    reusable_checkpoint,
)
from tracecal.errors import ValidationError

__all__ = [
    "DEFAULT_GGUF_DIST",
    "DEFAULT_GGUF_FILE",
    "DEFAULT_MODEL",
    "END_OF_TURN_TOKENS",
    "GEMMA_MODEL",
    "NAMED_MODELS",
    "QWEN_MODEL",
    "default_gguf_path",
    "gemma_gguf_path",
    "gguf_checkpoint",
    "gguf_tokenizer",
    "model_cache_dir",
    "named_gguf_path",
    "named_models_hint",
    "tokenizer_stop_ids",
    "torch_dtype",
]

END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|endoftext|>", "<|end|>", "</s>")


def tokenizer_stop_ids(tokenizer: Any, model_eos: Iterable[int] = ()) -> list[int]:
    """The stop set of a local backend, sorted: the model's own EOS ids (``model_eos``), the tokenizer's EOS and
    every `END_OF_TURN_TOKENS` entry of its vocabulary (the HF and llama.cpp backends stop on the same ids)."""
    ids = {int(i) for i in model_eos}
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    vocab = tokenizer.get_vocab()
    ids.update(int(vocab[t]) for t in END_OF_TURN_TOKENS if t in vocab)
    return sorted(ids)


def gguf_checkpoint(gguf: str | os.PathLike[str], out: str | os.PathLike[str] | None = None) -> Path:
    """A Hugging Face checkpoint folder (fp32 ``model.safetensors``, config, tokenizer) of a GGUF file, converted
    once and then reused: ``model_cache_dir()/hf/<stem>-<first 16 hex of the file's SHA-256>`` unless ``out``.

    transformers re-parses the GGUF (metadata, the whole vocabulary) and dequantises every tensor at each load:
    28 s for the default model on this machine, against ~2 s from the folder. The weights are the same numbers
    (the GGUF dequantised to fp32, as ``from_pretrained(..., gguf_file=...)`` gives them; a load in another dtype
    casts them as it would), the tokenizer the same ids (tested). The folder is written into a temporary sibling
    and renamed into place, so concurrent workers never see half of it. It is also what vLLM serves
    (`tracecal.backends.vllm.export_safetensors`).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(gguf)
    if not path.is_file():
        raise UserFileNotFoundError(f"GGUF file not found: {path}")
    target = Path(out) if out is not None else model_cache_dir() / "hf" / f"{path.stem}-{file_sha256(path)[:16]}"
    cached = out is None  # the cache's own folder is checked whole (a damaged one is converted again)
    if reusable_checkpoint(target) if cached else (target / "model.safetensors").is_file():
        return target
    cache_dir_ready(target.parent) if cached else target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
    try:
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        # save_pretrained refuses a model that still names its GGUF quantisation
        model.hf_quantizer = None  # type: ignore[assignment]  # torch types Module.__setattr__ values as Tensor | Module
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        _save_checkpoint(model, tokenizer, tmp, target)
        _rename_into_place(tmp, target, "model.safetensors")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _rename_into_place(tmp: Path, target: Path, marker: str) -> None:
    """Rename the finished folder ``tmp`` to ``target``; when another process got there first (``target`` already
    holds ``marker``), keep theirs."""
    try:
        tmp.rename(target)
    except OSError:
        if not (target / marker).is_file():
            raise


def gguf_tokenizer(gguf: str | os.PathLike[str]) -> Path:
    """A folder holding the transformers tokenizer of a GGUF file (its vocabulary and chat template), for a backend
    that runs the GGUF itself (llama.cpp) and needs no converted weights: the converted checkpoint's folder when
    `gguf_checkpoint` made one, else ``model_cache_dir()/tokenizers/<stem>-<first 16 hex of the SHA-256>``, parsed
    from the GGUF once (seconds, where converting a 1.5 B model's weights takes minutes) and renamed into place."""
    from transformers import AutoTokenizer

    path = Path(gguf)
    if not path.is_file():
        raise UserFileNotFoundError(f"GGUF file not found: {path}")
    name = f"{path.stem}-{file_sha256(path)[:16]}"
    if reusable_checkpoint(full := model_cache_dir() / "hf" / name):
        return full
    target = model_cache_dir() / "tokenizers" / name
    if (target / "tokenizer_config.json").is_file():
        return target
    cache_dir_ready(target.parent)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{name}."))
    try:
        AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name).save_pretrained(tmp)
        _rename_into_place(tmp, target, "tokenizer_config.json")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _save_checkpoint(model: Any, tokenizer: Any, tmp: Path, target: Path) -> None:
    """Save the converted checkpoint into ``tmp``; a full disk or an unwritable folder (an ``OSError``, or
    safetensors' own error) is a `ModelAssemblyError` naming the variable that moves the cache."""
    from safetensors import SafetensorError

    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    except (OSError, SafetensorError) as e:
        reason = getattr(e, "strerror", None) or str(e)
        raise ModelAssemblyError(
            f"cannot write the converted checkpoint {target}: {reason}; free some space, or set {CACHE_VARIABLE} "
            "to a writable folder with free space (the model cache), then run again"
        ) from e


_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def torch_dtype(dtype: str | torch.dtype, device: str) -> torch.dtype:
    """The torch dtype for a ``dtype`` option on ``device`` (``auto``: `tracecal.backends.runtime.resolve_dtype`,
    bf16 on a GPU or on a CPU with bf16 matrix units, else fp32); ValueError if unknown."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        return _DTYPES[runtime.resolve_dtype("auto", cuda=device.startswith("cuda"))]
    aliases = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16", "float": "float32"}
    name = aliases.get(str(dtype).lower(), str(dtype).lower())
    if name not in _DTYPES:
        raise ValidationError(f"unknown dtype {dtype!r}: use auto, {', '.join(_DTYPES)}")
    return _DTYPES[name]
