"""Batches of prompts for one forward pass of the self-evaluation passes (P(True), verbalised confidence): bounded
in rows and in prompt tokens, with logits kept at the last position only.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["PREFILL_TOKENS", "contiguous_head_input", "last_logits_only", "length_batches", "row_major_strides"]

PREFILL_TOKENS = 8192
"""Prompt tokens (rows × longest prompt) one batch of the self-evaluation forward passes holds at most (our choice):
the verbalised-confidence tree repeats each row's KV cache 10×, so a batch of 32 MLQA prompts with their context
(~700 tokens) needed several GiB; 8192 bounds it to ~2–2.5 GiB for SmolLM2-135M and Qwen2.5-1.5B (bf16 caches)."""


def length_batches(lengths: Sequence[int], batch_size: int, max_tokens: int = PREFILL_TOKENS) -> list[np.ndarray]:
    """Row indices in batches, longest prompts first (similar lengths share a batch: little padding), each at most
    ``batch_size`` rows and at most ``max_tokens`` padded tokens (rows × its longest length; a longer prompt alone).

    >>> [b.tolist() for b in length_batches([5, 9, 2, 9], batch_size=3, max_tokens=20)]
    [[1, 3], [0, 2]]
    """
    order = np.argsort([-int(n) for n in lengths], kind="stable")
    out: list[np.ndarray] = []
    start = 0
    while start < len(order):
        longest = max(int(lengths[order[start]]), 1)  # sorted: the first row of a batch is its longest
        rows = max(1, min(batch_size, max_tokens // longest))
        out.append(order[start : start + rows])
        start += rows
    return out


def last_logits_only(model: Any) -> dict[str, int]:
    """The forward keyword that makes a transformers causal LM compute logits at the last position only
    (``logits_to_keep=1``: a batch's B × L × |V| logits were most of a long prompt's memory), or none where the
    model's ``forward`` does not take it."""
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError, AttributeError):
        return {}
    return {"logits_to_keep": 1} if "logits_to_keep" in params else {}


def contiguous_head_input(model: Any) -> bool:
    """Give the model's output projection (``get_output_embeddings()``) an input with row-major strides, by a
    forward pre-hook installed once; True when the model has the hook now, False when it has no output projection.

    With ``logits_to_keep`` the head sees a strided view (B, 1, H) of the last hidden states. For such an input and
    a weight that does not require grad (frozen weights: a peft model, ``requires_grad_(False)``), torch's matmul
    does not fold the batch into one (B, H) × (H, |V|) product: it broadcasts the weight to (B, H, |V|) and copies
    it, B·H·|V| elements per forward (Qwen2.5-1.5B, B = 8: 1.9 G elements, 34 s on one core instead of 0.03 s; B = 1
    too, 2.5 s: the view counts as contiguous but keeps the parent's batch stride). A copy with row-major strides
    takes the folded product whatever the weight's flag, and its logits equal, bit for bit, those of the same
    weights with ``requires_grad`` on (the frozen and the trainable model agree).
    """
    get = getattr(model, "get_output_embeddings", None)
    head = get() if callable(get) else None
    if head is None:
        return False
    if not getattr(head, "_tracecal_contiguous_input", False):
        head.register_forward_pre_hook(_row_major_first_arg)
        head._tracecal_contiguous_input = True
    return True


def row_major_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """The strides of a row-major (C-order) tensor of ``shape``, size-1 dimensions included.

    >>> row_major_strides((2, 1, 4))
    (4, 4, 1)
    """
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= max(int(n), 1)
    return tuple(reversed(out))


def _row_major_first_arg(module: Any, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """The pre-hook of `contiguous_head_input`: ``args[0]`` copied into row-major strides (None, i.e. unchanged,
    when it has them)."""
    x = args[0] if args else None
    if x is None or not hasattr(x, "stride") or x.stride() == row_major_strides(x.shape):
        return None
    import torch

    return (x.clone(memory_format=torch.contiguous_format), *args[1:])
