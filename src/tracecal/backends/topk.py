"""Estimates of the full-vocabulary entropy H_t from the top-k log-probs a server returns (docs/method.md §1).

A server gives, per generated token, the k largest log-probs l_1 ≥ … ≥ l_k of the next-token distribution
over |V| tokens, not the other |V| − k. Write p_i = exp(l_i), the head mass S = Σ p_i, the tail mass
r = 1 − S (known exactly: the log-probs are normalised over the full vocabulary) and n = |V| − k the number of
tail tokens. Then H = head + tail, with head = −Σ p_i log p_i known and tail = −Σ_{j>k} q_j log q_j unknown,
where the q_j sum to r and each q_j ≤ p_k (the tail tokens are by definition no likelier than the k-th).
Estimators, vectorised over rows (one row = one step; ``-inf`` entries = fewer than k alternatives):

``uniform_tail`` (docs/method.md §1; an upper bound)
    r spread evenly over the n tail tokens: tail = r·log(n / r), the largest entropy mass r can have on n
    tokens.
``head_only`` (a lower bound)
    tail = 0.
``capped_tail`` (a tighter lower bound)
    every tail token has q_j ≤ p_k, so −log q_j ≥ −log p_k and tail ≥ r·(−log p_k).
``head_renorm``
    the entropy of the head renormalised to sum 1: head / S + log S (ignores the tail; neither bound).
``geometric_tail``
    the tail continues the head geometrically from p_k, q_{k+i} = p_k·ρ^i, with ρ = r / (r + p_k) so the
    (unbounded) tail holds mass r: tail = −r·log p_k − r·log ρ / (1 − ρ).
``zipf_tail``
    the tail continues the head as a power law from p_k, q_j = p_k·(j / k)^(−b) for j = k+1 … |V|, with the
    exponent b ≥ 0 solved per row so that the tail holds exactly mass r. Uses the three facts a server gives
    about the tail - its mass r, its size n and its cap p_k - and the shape (Zipf-like rank decay) that
    language-model next-token distributions show beyond their head (b = 0: every tail token at p_k).

The tail models are clipped into [capped_tail, uniform_tail], so they stay between the two bounds for any
distribution whose top-k is given (head_renorm is not: it can fall below the lower bound).
No estimator emits NumPy warnings: rows with r = 0 (or r < 0 by rounding), k = |V|, or no finite log-prob
at all are handled explicitly.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tracecal.errors import ValidationError

__all__ = [
    "DEFAULT_TOPK_ESTIMATOR",
    "TOPK_ESTIMATORS",
    "TopK",
    "topk_entropy",
    "topk_parts",
]

TOPK_ESTIMATORS = ("uniform_tail", "head_only", "capped_tail", "head_renorm", "geometric_tail", "zipf_tail")
"""Names accepted by :func:`topk_entropy` (``estimator=``)."""

DEFAULT_TOPK_ESTIMATOR = "zipf_tail"
"""The HTTP backend's default (lowest per-token error and AUROC closest to exact H: docs/topk_entropy.md)."""

_EXACT_TERMS = 64  # tail ranks summed term by term in zipf_tail; beyond them a Gauss-Legendre rule in log-rank
_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(32)
_NEWTON_STEPS = 100
_B_MAX = 4096.0


class TopK:
    """The quantities every estimator reads, per row (float64 arrays of shape (N,)).

    Attributes: ``head`` = −Σ p log p over the finite entries, ``mass`` = S, ``tail_mass`` = r (≥ 0),
    ``m`` = the number of finite entries, ``n`` = |V| − m (≥ 0), ``last`` = log p_m (the smallest given
    log-prob; 0 where m = 0).
    """

    def __init__(self, topk_logprobs: np.ndarray, vocab_size: int) -> None:
        lp = np.asarray(topk_logprobs, dtype=np.float64)
        if lp.ndim == 1:
            lp = lp[None, :]
        if lp.ndim != 2:
            raise ValidationError(f"top-k log-probs must have shape (N, k), got {lp.shape}")
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int | np.integer) or vocab_size < 1:
            raise ValidationError(f"vocab_size must be a positive integer, got {vocab_size!r}")
        if np.isnan(lp).any() or (lp > 1e-3).any():  # a log-prob a little above 0 is rounding: clipped to 0
            raise ValidationError(
                "top-k log-probs must be ≤ 0 (log-probabilities) and not NaN; -inf marks a missing entry"
            )
        lp = np.minimum(lp, 0.0)
        finite = np.isfinite(lp)
        if lp.shape[1] > vocab_size:
            raise ValidationError(f"{lp.shape[1]} top-k entries per row but vocab_size is only {vocab_size}")
        safe = np.where(finite, lp, 0.0)
        p = np.where(finite, np.exp(safe), 0.0)
        self.head = -np.sum(p * safe, axis=1)
        self.mass = p.sum(axis=1)
        self.tail_mass = np.clip(1.0 - self.mass, 0.0, 1.0)
        self.m = finite.sum(axis=1).astype(np.float64)
        self.n = np.maximum(float(vocab_size) - self.m, 0.0)
        self.last = np.where(self.m > 0, np.min(np.where(finite, lp, 0.0), axis=1), 0.0)
        self.vocab_size = int(vocab_size)

    def upper(self) -> np.ndarray:
        """``uniform_tail``: head + r·log(n / r) (0 tail where r = 0 or n = 0)."""
        r, n = self.tail_mass, self.n
        ok = (r > 0) & (n > 0)
        tail = np.where(ok, r * (np.log(np.where(ok, n, 1.0)) - np.log(np.where(ok, r, 1.0))), 0.0)
        return self.head + tail

    def lower(self) -> np.ndarray:
        """``capped_tail``: head + r·(−log p_m) (each tail token is no likelier than the last given one)."""
        tail = np.where((self.n > 0) & (self.m > 0), -self.tail_mass * self.last, 0.0)
        return np.minimum(self.head + tail, self.upper())


def _head_only(t: TopK) -> np.ndarray:
    return t.head


def _head_renorm(t: TopK) -> np.ndarray:
    S = t.mass
    ok = S > 0
    safe = np.where(ok, S, 1.0)
    return np.where(ok, t.head / safe + np.log(safe), np.log(float(t.vocab_size)))


def _geometric_tail(t: TopK) -> np.ndarray:
    r, pk = t.tail_mass, np.exp(t.last)
    ok = (r > 0) & (pk > 0) & (t.n > 0)
    x = np.where(ok, pk / np.where(ok, r, 1.0), 1.0)  # p_k / r = (1 − ρ) / ρ
    # −log ρ / (1 − ρ) = log1p(x)·(1 + x) / x, → 1 as x → 0
    f = np.where(x > 1e-12, np.log1p(x) * (1.0 + x) / np.maximum(x, 1e-12), 1.0)
    tail = np.where(ok, r * (f - t.last), 0.0)
    return t.head + tail


def _log_rank_sums(m: np.ndarray, V: float, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """log Σ_{j=m+1}^{V} u_j^(−b) and Σ u_j^(−b)·log u_j / Σ u_j^(−b) with u_j = j / m, per row.

    The first `_EXACT_TERMS` ranks term by term, the rest by Gauss-Legendre in log j (the summand is smooth
    there), as (log of the sum, weighted mean of log u).
    """
    j = m[:, None] + np.arange(1, _EXACT_TERMS + 1)[None, :]
    valid = j <= V
    logu = np.log(j / m[:, None])
    logw = np.where(valid, -b[:, None] * logu, -np.inf)
    lo = np.log(m + _EXACT_TERMS + 0.5)
    hi = np.log(V + 0.5)
    has_rest = hi > lo
    half = np.where(has_rest, (hi - lo) / 2.0, 0.0)
    x = (lo + hi)[:, None] / 2.0 + half[:, None] * _GL_NODES[None, :]  # log j at the nodes
    logu_q = x - np.log(m)[:, None]
    log_dx = np.log(half[:, None] * _GL_WEIGHTS + 1e-300) + x  # dj = j·d(log j)
    logw_q = np.where(has_rest[:, None], -b[:, None] * logu_q + log_dx, -np.inf)
    allw = np.concatenate([logw, logw_q], axis=1)
    allu = np.concatenate([logu, logu_q], axis=1)
    top = np.max(allw, axis=1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    w = np.exp(allw - top)
    tot = w.sum(axis=1)
    safe = np.where(tot > 0, tot, 1.0)
    log_sum = np.where(tot > 0, np.log(safe) + top[:, 0], -np.inf)
    mean_logu = np.where(tot > 0, (w * allu).sum(axis=1) / safe, 0.0)
    return log_sum, mean_logu


def _zipf_tail(t: TopK) -> np.ndarray:
    r = t.tail_mass
    ok = (r > 0) & (t.m > 0) & (t.n > 0)
    if not ok.any():
        return t.head.copy()
    m, last, rr, V = t.m[ok], t.last[ok], r[ok], float(t.vocab_size)
    # g(b) = log Σ_j u_j^(−b) − log(r / p_m) is convex and decreasing in b, g'(b) = −(weighted mean of log u):
    # Newton from b = 0 (g(0) = log n − log(r / p_m) ≥ 0 when every tail token is ≤ p_m) climbs to the root
    # from the left without overshooting. g(0) < 0 (rounding) keeps b = 0: the uniform tail at its cap.
    target = np.log(rr) - last
    b = np.zeros_like(m)
    log_sum, mean_logu = _log_rank_sums(m, V, b)
    for _ in range(_NEWTON_STEPS):
        g = log_sum - target
        step = np.where(g > 0, g / np.maximum(mean_logu, 1e-300), 0.0)
        if not (step > 1e-12 * np.maximum(b, 1.0)).any():
            break
        b = np.minimum(b + step, _B_MAX)
        log_sum, mean_logu = _log_rank_sums(m, V, b)
    tail = np.zeros_like(r)
    tail[ok] = rr * (-last + b * mean_logu)  # −Σ q log q with q_j = p_m·u_j^(−b) summing to r
    return t.head + tail


_ESTIMATE: dict[str, Callable[[TopK], np.ndarray]] = {
    "uniform_tail": TopK.upper,
    "head_only": _head_only,
    "capped_tail": TopK.lower,
    "head_renorm": _head_renorm,
    "geometric_tail": _geometric_tail,
    "zipf_tail": _zipf_tail,
}


def topk_parts(topk_logprobs: np.ndarray, vocab_size: int) -> TopK:
    """The per-row quantities (head entropy, masses, counts) of a (N, k) array of top-k log-probs."""
    return TopK(topk_logprobs, vocab_size)


def topk_entropy(topk_logprobs: np.ndarray, vocab_size: int, estimator: str = "uniform_tail") -> np.ndarray:
    """Estimated H_t (nats) of each row of top-k log-probs (shape (N, k) or (k,); ``-inf`` = missing entry).

    ``estimator``: one of `TOPK_ESTIMATORS` (module docstring). The default is docs/method.md §1's uniform tail (the
    upper bound); the HTTP backend uses `DEFAULT_TOPK_ESTIMATOR`. The two tail models are clipped into
    [``capped_tail``, ``uniform_tail``] (their numerical sums may overshoot by rounding); the rest are returned as is.
    """
    if estimator not in _ESTIMATE:
        raise ValidationError(
            f"unknown top-k entropy estimator {estimator!r}; choose one of {', '.join(TOPK_ESTIMATORS)}"
        )
    t = TopK(topk_logprobs, vocab_size)
    est = _ESTIMATE[estimator](t)
    if estimator in ("geometric_tail", "zipf_tail"):
        return np.clip(est, t.lower(), t.upper())
    return est
