"""Batches of prompts for one forward pass of the self-evaluation passes (P(True), verbalised confidence): bounded
in rows and in prompt tokens, with logits kept at the last position only.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["PREFILL_TOKENS", "last_logits_only", "length_batches"]

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
