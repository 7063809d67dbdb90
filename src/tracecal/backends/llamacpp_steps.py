"""The NumPy arithmetic of one llama.cpp decoding step (`tracecal.backends.llamacpp`): from that step's |V| logits
x (float64), the log-normaliser and entropy (`logits_stats`) and the top-k alternatives (`top_k`, `stack_top`).

>>> import numpy as np
>>> lse, h = logits_stats(np.zeros(4))  # uniform over 4 tokens: H = log 4
>>> round(h, 6) == round(float(np.log(4)), 6)
True
>>> top_k(np.array([0.0, 2.0, 1.0]), 0.0, 2)[0].tolist()
[1, 2]
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["draw", "logits_stats", "stack_top", "top_k"]


def logits_stats(x: np.ndarray) -> tuple[float, float]:
    """(logsumexp(x), entropy of softmax(x)) in nats for one step's logits, one pass of exp over |V|.

    Tokens at −inf (masked) have probability 0 and contribute 0 to the entropy.
    """
    m = float(np.max(x))
    e = np.exp(x - m)
    z = float(e.sum())
    lse = m + math.log(z)
    ex = float(np.dot(e, np.where(e > 0, x, 0.0)))
    return lse, lse - ex / z


def top_k(x: np.ndarray, lse: float, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` most likely ids of logits ``x`` (most likely first) and their log-probs x − lse."""
    ti = np.argpartition(-x, k)[:k]
    ti = ti[np.argsort(-x[ti], kind="stable")].astype(np.int64)
    return ti, x[ti] - lse


def stack_top(top: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Per-step (ids, log-probs) pairs of `top_k` as two (T, k) arrays; (None, None) for no steps."""
    return (np.stack([t[0] for t in top]), np.stack([t[1] for t in top])) if len(top) else (None, None)


def draw(x: np.ndarray, lse: float, rng: np.random.Generator) -> int:
    """One token id drawn from softmax(x) (log-normaliser ``lse``) by inverse CDF: one uniform draw per step."""
    cdf = np.cumsum(np.exp(x - lse))
    return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), len(x) - 1))
