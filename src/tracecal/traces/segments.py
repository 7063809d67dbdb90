"""Layout of a ragged batch of answers (`Segments`) and the check of its per-token values.

Shared by `tracecal.traces.trace` and `tracecal.signals.operators`.

Answer ``i`` of a batch owns the per-token values ``x[offsets[i]:offsets[i+1]]``; ``offsets`` has shape
``(B+1,)``, starts at 0 and never decreases, so ``T_i = offsets[i+1] − offsets[i]`` (0 for an empty
answer). This module depends on NumPy only: ``trace`` and ``operators`` both import it, never the
reverse, so the package's import graph has no cycle (trace → segments, operators → segments and trace).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import cached_property

import numpy as np

from tracecal.errors import ValidationError

__all__ = ["DecayKernel", "Segments", "check_token_values", "MAX_TOKEN_NATS", "NEGATIVE_TOLERANCE"]

DecayKernel = Callable[[np.ndarray, float], np.ndarray]
"""A decay kernel maps 0-based positions (t−1, float array) and a rate λ to non-negative weights."""

NEGATIVE_TOLERANCE = 1e-4
"""Our choice: surprisal / entropy in [−1e-4, 0) nats is float round-off (clipped to 0); below is an error.

Not 1e-6: the float32 entropy H = lse − Σ_v p_v·x_v of a peaked distribution with logits near 50 comes
out as low as −1.3e-5 nats (measured, 49k-token vocabulary); a real bug (log-probabilities stored as
surprisal, unnormalised logits) gives values well below −1e-4."""

MAX_TOKEN_NATS = 1e4
"""Our choice: the largest surprisal / entropy a trace may hold, in nats (larger finite values are an error).

No decoding step comes near it: H_t ≤ ln|V| (12.5 nats for a 262k-token vocabulary, < 30 for any vocabulary
under 10^13 tokens) and s_t = lse − logit is at most the spread of one step's logits (tens of nats; servers
report a masked token as log-prob −9999). Bounded values keep every operator finite: their sums, slopes and
products of values stay far below float64 overflow (a value of 1e308 would overflow them)."""


class Segments:
    """Layout of a ragged batch, with per-token index arrays computed once and cached.

    Args:
        offsets: int64, shape ``(B+1,)``, non-decreasing, ``offsets[0] == 0``.

    Attributes: ``lengths`` (T per answer, shape ``(B,)``), ``starts`` / ``ends`` (token index range of
    each answer), ``n_tokens`` (N = Σ T), ``nonempty`` (T > 0 mask), ``all_nonempty``.
    """

    def __init__(self, offsets: np.ndarray) -> None:
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self.lengths = np.diff(self.offsets)
        self.starts = self.offsets[:-1]
        self.ends = self.offsets[1:]
        self.n_tokens = int(self.offsets[-1]) if len(self.offsets) else 0
        self.nonempty = self.lengths > 0
        self.all_nonempty = bool(self.nonempty.all())
        self._ne_starts = self.starts[self.nonempty]
        self._cache: dict[object, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.lengths)

    @cached_property
    def pos(self) -> np.ndarray:
        """0-based position of each token inside its answer (t−1), int64, shape ``(N,)``."""
        return np.arange(self.n_tokens, dtype=np.int64) - np.repeat(self.starts, self.lengths)

    @cached_property
    def max_len(self) -> int:
        """max_i T_i (0 for an empty batch)."""
        return int(self.lengths.max()) if len(self.lengths) else 0

    def answer_of(self, token_index: int) -> tuple[int, int]:
        """(answer index i, 0-based position t−1 inside that answer) of flat token ``token_index``."""
        i = int(np.searchsorted(self.offsets, token_index, side="right")) - 1
        return i, int(token_index - self.offsets[i])

    def reduce(self, ufunc: np.ufunc, x: np.ndarray, empty: float = np.nan) -> np.ndarray:
        """Per-answer ``ufunc.reduce`` of per-token ``x``; answers with T = 0 get ``empty``."""
        if self.all_nonempty:
            return ufunc.reduceat(x, self.starts) if self.n_tokens else np.zeros(0)
        out = np.full(len(self.lengths), empty, dtype=np.float64)
        if self._ne_starts.size:
            out[self.nonempty] = ufunc.reduceat(x, self._ne_starts)
        return out

    def broadcast(self, per_answer: np.ndarray) -> np.ndarray:
        """Repeat one value per answer onto its tokens, shape ``(N,)``."""
        return np.repeat(per_answer, self.lengths)

    def kernel_weights(self, kernel: DecayKernel, lam: float) -> tuple[np.ndarray, np.ndarray]:
        """Per-token weights k(t−1; λ) and their per-answer sums Σ_t k(t−1; λ) (via a table over positions)."""
        key = (kernel, float(lam))
        if key not in self._cache:
            table = np.asarray(kernel(np.arange(max(self.max_len, 1), dtype=np.float64), float(lam)), np.float64)
            if np.any(table < 0) or not np.all(np.isfinite(table)):
                raise ValidationError("a decay kernel must give finite non-negative weights")
            csum = np.concatenate([[0.0], np.cumsum(table)])
            self._cache[key] = table[self.pos]
            self._cache[(key, "sum")] = csum[self.lengths]
        return self._cache[key], self._cache[(key, "sum")]


def _answer(i: int) -> str:
    return f"answer {i}"


def _check_values(
    name: str, x: np.ndarray, offsets: np.ndarray, describe: Callable[[int], str], error: type[ValueError]
) -> np.ndarray:
    lo, hi = (x.min(), x.max()) if x.size else (0.0, 0.0)
    if lo >= 0.0 and hi <= MAX_TOKEN_NATS:  # the fast path: two reductions (a NaN makes ``lo >= 0`` False)
        return x
    bad = ~((x >= -NEGATIVE_TOLERANCE) & (x <= MAX_TOKEN_NATS))
    if not bad.any():
        return np.maximum(x, 0.0)  # float round-off below 0 → 0 (a copy: the caller's array is untouched)
    k = int(np.argmax(bad))
    i, t = Segments(offsets).answer_of(k)
    value = float(x[k])
    if name == "surprisal" and value < 0:
        hint = "surprisal is s_t = −log p_t ≥ 0 (nats): were log-probabilities stored instead of −log p?"
    elif name == "entropy" and value < 0:
        hint = "entropy H_t = −Σ_v P_t(v) log P_t(v) is ≥ 0 (nats): check how it was computed"
    elif math.isfinite(value):
        hint = f"{name} must be ≤ {MAX_TOKEN_NATS:g} nats (no decoding step comes near; check how it was computed)"
    else:
        hint = f"{name} must be finite (NaN / ±inf usually mean masked or missing logits)"
    raise error(
        f"{describe(i)}: {name} of token {t} is {value!r}; {hint} "
        f"({int(bad.sum())} bad {name} value(s) in all; values ≥ −{NEGATIVE_TOLERANCE:g} are clipped to 0)"
    )


def check_token_values(
    surprisal: np.ndarray,
    entropy: np.ndarray,
    offsets: np.ndarray,
    describe: Callable[[int], str] = _answer,
    error: type[ValueError] = ValueError,
) -> tuple[np.ndarray, np.ndarray]:
    """Validate concatenated per-token surprisal s_t and entropy H_t (nats) at a boundary.

    Both must be finite, ≥ 0 and ≤ `MAX_TOKEN_NATS`. Values in [−`NEGATIVE_TOLERANCE`, 0) are float round-off and
    come back clipped to 0 (in a copy; an array with nothing to clip is returned as is). Anything else raises
    ``error`` naming the answer (``describe(i)``, e.g. its index and id), the token position and the value.
    Vectorised: two reductions per array on the clean path, no per-token Python loop.
    """
    s = _check_values("surprisal", surprisal, offsets, describe, error)
    h = _check_values("entropy", entropy, offsets, describe, error)
    return s, h
