"""What every backend provides, and helpers shared between backends.

A backend turns prompts into `Trace` objects recorded during its own decoding pass. Nothing downstream
knows which backend produced a trace; what differs is written in the trace (``entropy_kind``,
``decoding``, ``model_id``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from tracecal.trace import Trace

Prompt = str | list[dict[str, str]] | dict[str, Any]
"""A prompt: plain text, a list of chat messages, or a dict with ``prompt``/``messages`` (+ ``id``)."""


@runtime_checkable
class Backend(Protocol):
    """The interface every backend implements."""

    model_id: str

    def generate(self, prompts: Sequence[Prompt], max_new_tokens: int = 32, **kwargs: Any) -> list[Trace]:
        """Decode one answer per prompt and return its trace (same order as ``prompts``)."""
        ...


class PromptTooLongError(ValueError):
    """A prompt that does not fit the model's context window together with max_new_tokens."""


def check_prompts(prompts: Sequence[Prompt]) -> list[Prompt]:
    """Validate the prompt list at the boundary with a precise message."""
    if isinstance(prompts, str | dict):
        prompts = [prompts]  # type: ignore[list-item]
    prompts = list(prompts)
    if not prompts:
        raise ValueError("generate() got an empty prompt list: pass at least one prompt")
    for i, p in enumerate(prompts):
        if not isinstance(p, str | list | dict):
            raise TypeError(f"prompt {i} has type {type(p).__name__}; expected str, list of messages or dict")
    return prompts


def topk_entropy(topk_logprobs: np.ndarray, vocab_size: int) -> np.ndarray:
    """Truncated entropy estimate from top-k log-probs (METHOD §1), nats, one value per row.

    H ≈ −Σ_{top-k} p log p − r log(r / (|V| − k)), r = 1 − Σ_{top-k} p: the tail mass r spread uniformly
    over the |V| − k remaining tokens (an upper bound on the tail's entropy contribution).
    """
    lp = np.asarray(topk_logprobs, dtype=np.float64)
    if lp.ndim == 1:
        lp = lp[None, :]
    k = lp.shape[1]
    p = np.exp(lp)
    head = -np.sum(np.where(p > 0, p * lp, 0.0), axis=1)
    r = np.clip(1.0 - p.sum(axis=1), 0.0, 1.0)
    rest = max(vocab_size - k, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        tail = np.where(r > 0, -r * (np.log(r) - math.log(rest)), 0.0)
    return head + tail


def char_offsets(prefix_texts: Sequence[str], text: str) -> tuple[np.ndarray, list[str]]:
    """Start offsets of each token in ``text`` and the token strings, from decoded prefixes.

    ``prefix_texts[i]`` is the decode of the first ``i`` tokens (``prefix_texts[0] == ""``), length T+1.
    A prefix that ends inside a multi-byte character decodes with a replacement character; its offset is
    the longest common prefix with ``text``, so offsets stay monotone and token strings tile ``text``.
    """
    T = len(prefix_texts) - 1
    starts = np.zeros(T + 1, dtype=np.int64)
    for i, pre in enumerate(prefix_texts):
        if text.startswith(pre):
            starts[i] = len(pre)
        else:
            n = 0
            for a, b in zip(pre, text, strict=False):
                if a != b:
                    break
                n += 1
            starts[i] = n
    starts[T] = len(text)
    starts = np.maximum.accumulate(starts)
    strings = [text[starts[i] : starts[i + 1]] for i in range(T)]
    return starts[:T], strings
