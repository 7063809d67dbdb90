"""Local risk operators over ragged per-token sequences, and the TRACE score (docs/method.md §2).

Every operator takes the concatenated per-token values ``u`` (shape ``(N,)``) and the segment layout
(`Segments`, built from ``offsets`` of shape ``(B+1,)``) and returns one value per answer (shape
``(B,)``). Everything is vectorised NumPy over the whole batch: no per-answer or per-token Python loops.
Positions ``t`` are 1-based in the formulas below and 0-based (``t-1``) in code. An answer with T = 0
tokens gets NaN from every operator (an empty answer has no trace; callers decide what that means).

Operators (u is surprisal s_t or entropy H_t, in nats):

* decayed mean      D_λ(u) = Σ_t w_t u_t / Σ_t w_t,  w_t = k(t−1; λ), default k = exp(−(t−1)/λ)
* window peak       M^(w)(u) = max_t mean(u_t … u_{t+w−1}); if T < w, mean(u_1 … u_T)
* length-norm. sum  L_ρ(u) = Σ_t u_t / T^ρ
* slope             least-squares slope of u_t on t (0 when T = 1)
* first-k / last-k  mean of the first / last min(k, T) values
* mean, max, min, variance (population)

TRACE:  R = α·D_λ(H) + β·M^(w)(H) + γ·L_ρ(s),  c_TRACE = exp(−R),  defaults α=β=0.4, γ=0.2, λ=2, w=4, ρ=1/4.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tracecal._validation import Constraint, Interval, Options, check_params
from tracecal.errors import ValidationError
from tracecal.traces.segments import DecayKernel, Segments
from tracecal.traces.trace import Trace, TraceBatch

__all__ = [
    "Segments",
    "DecayKernel",
    "KERNELS",
    "decayed_mean",
    "window_peak",
    "length_norm_sum",
    "seg_mean",
    "seg_max",
    "seg_var",
    "slope",
    "first_k_mean",
    "last_k_mean",
    "TraceConfig",
    "TRACE_CONSTRAINTS",
    "check_trace_params",
    "trace_risk",
    "batch_risk",
    "trace_confidence",
    "as_batch",
    "trace_config",
    "chunked",
    "get_kernel",
]


def exp_kernel(pos: np.ndarray, lam: float) -> np.ndarray:
    """w = exp(−(t−1)/λ): the default kernel (our choice; docs/method.md §2)."""
    return np.exp(-pos / lam)


def hyperbolic_kernel(pos: np.ndarray, lam: float) -> np.ndarray:
    """w = 1 / (1 + (t−1)/λ): heavier tail than exp, for ablations."""
    return 1.0 / (1.0 + pos / lam)


def uniform_kernel(pos: np.ndarray, lam: float) -> np.ndarray:
    """w = 1: turns D_λ into the plain mean (a sanity reference)."""
    return np.ones_like(pos, dtype=np.float64)


KERNELS: dict[str, DecayKernel] = {"exp": exp_kernel, "hyperbolic": hyperbolic_kernel, "uniform": uniform_kernel}


def get_kernel(kernel: str | DecayKernel) -> DecayKernel:
    """The decay kernel named ``kernel`` in `KERNELS` (a callable is returned as is); ValueError otherwise."""
    if callable(kernel):
        return kernel
    try:
        return KERNELS[kernel]
    except (KeyError, TypeError):
        raise ValidationError(f"unknown decay kernel {kernel!r}; valid kernels: {', '.join(KERNELS)}") from None


def _seg(x: Segments | np.ndarray | TraceBatch) -> Segments:
    if isinstance(x, Segments):
        return x
    if isinstance(x, TraceBatch):
        return x.segments
    return Segments(np.asarray(x))


def _nan_empty(seg: Segments, out: np.ndarray) -> np.ndarray:
    if not seg.all_nonempty:
        out = np.asarray(out, dtype=np.float64)
        out[~seg.nonempty] = np.nan
    return out


def seg_mean(u: np.ndarray, seg: Segments | np.ndarray, total: np.ndarray | None = None) -> np.ndarray:
    """mean_t u_t per answer (``total``: Σ_t u_t per answer when already computed, ``seg.reduce(np.add, u)``)."""
    seg = _seg(seg)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (seg.reduce(np.add, u) if total is None else total) / seg.lengths


def seg_max(u: np.ndarray, seg: Segments | np.ndarray) -> np.ndarray:
    """max_t u_t per answer."""
    return _seg(seg).reduce(np.maximum, u)


def seg_var(u: np.ndarray, seg: Segments | np.ndarray) -> np.ndarray:
    """Population variance Σ_t (u_t − ū)² / T per answer (two-pass, numerically stable)."""
    seg = _seg(seg)
    m = seg_mean(u, seg)
    d = u - seg.broadcast(m)
    with np.errstate(invalid="ignore", divide="ignore"):
        return seg.reduce(np.add, d * d) / seg.lengths


def decayed_mean(
    u: np.ndarray, seg: Segments | np.ndarray, lam: float = 2.0, kernel: str | DecayKernel = "exp"
) -> np.ndarray:
    """D_λ(u) = Σ_t w_t u_t / Σ_t w_t with w_t = kernel(t−1; λ) (default exp(−(t−1)/λ))."""
    if lam <= 0:
        raise ValidationError(f"decay rate λ must be > 0, got {lam}")
    seg = _seg(seg)
    k = get_kernel(kernel)
    w, wsum = seg.kernel_weights(k, lam)
    with np.errstate(invalid="ignore", divide="ignore"):
        return seg.reduce(np.add, w * u) / wsum


def window_peak(u: np.ndarray, seg: Segments | np.ndarray, w: int = 4, total: np.ndarray | None = None) -> np.ndarray:
    """M^(w)(u) = max over t of mean(u_t … u_{t+w−1}); the mean of all T values when T < w (``total`` as in
    `seg_mean`)."""
    if w < 1:
        raise ValidationError(f"window w must be ≥ 1, got {w}")
    seg = _seg(seg)
    n = seg.n_tokens
    if w == 1:
        return seg_max(u, seg)
    # window sums starting at every position (those running past an answer's end are masked below)
    if w <= 8:
        sums = np.array(u, dtype=np.float64, copy=True)
        for j in range(1, min(w, n)):
            sums[: n - j] += u[j:]
    else:
        c = np.concatenate([[0.0], np.cumsum(u)])
        idx = np.minimum(np.arange(n) + w, n)
        sums = c[idx] - c[:n]
    long = seg.lengths >= w
    # invalid starts: the last w−1 positions of each answer with T ≥ w
    ends = seg.ends[long]
    if ends.size:
        bad = (ends[:, None] - np.arange(1, w)[None, :]).ravel()
        sums[bad] = -np.inf
    peak = seg.reduce(np.maximum, sums) / w
    short = ~long & seg.nonempty
    if short.any():
        peak[short] = seg_mean(u, seg, total)[short]
    return _nan_empty(seg, peak)


def length_norm_sum(
    u: np.ndarray, seg: Segments | np.ndarray, rho: float = 0.25, total: np.ndarray | None = None
) -> np.ndarray:
    """L_ρ(u) = Σ_t u_t / T^ρ (``total`` as in `seg_mean`)."""
    seg = _seg(seg)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (seg.reduce(np.add, u) if total is None else total) / np.power(seg.lengths.astype(np.float64), rho)


def slope(u: np.ndarray, seg: Segments | np.ndarray, total: np.ndarray | None = None) -> np.ndarray:
    """Least-squares slope of u_t on t per answer: Σ(t−t̄)(u−ū) / Σ(t−t̄)²; 0 when T = 1, NaN when T = 0.

    Uses Σ(t−t̄)² = T(T²−1)/12 and Σ(t−t̄)(u−ū) = Σ t·u − t̄·Σu (positions centred per answer); ``total`` as in
    `seg_mean`.
    """
    seg = _seg(seg)
    T = seg.lengths.astype(np.float64)
    tbar = (T - 1.0) / 2.0
    stu = seg.reduce(np.add, seg.pos * u)
    su = seg.reduce(np.add, u) if total is None else total
    num = stu - tbar * su
    den = T * (T * T - 1.0) / 12.0
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)
    return _nan_empty(seg, out)


def _edge_k_mean(u: np.ndarray, seg: Segments, k: int, from_end: bool) -> np.ndarray:
    """Mean of the first / last min(k, T) values via k per-answer gathers (no pass over all tokens)."""
    if k < 1:
        raise ValidationError(f"k must be ≥ 1, got {k}")
    total = np.zeros(len(seg))
    if seg.n_tokens:
        for j in range(k):
            has = seg.lengths > j
            idx = (seg.ends - 1 - j) if from_end else (seg.starts + j)
            total += np.where(has, u[np.clip(idx, 0, seg.n_tokens - 1)], 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return _nan_empty(seg, total / np.minimum(seg.lengths, k))


def first_k_mean(u: np.ndarray, seg: Segments | np.ndarray, k: int = 3) -> np.ndarray:
    """mean(u_1 … u_min(k,T))."""
    return _edge_k_mean(u, _seg(seg), k, from_end=False)


def last_k_mean(u: np.ndarray, seg: Segments | np.ndarray, k: int = 3) -> np.ndarray:
    """mean(u_max(1,T−k+1) … u_T)."""
    return _edge_k_mean(u, _seg(seg), k, from_end=True)


# --------------------------------------------------------------------------------------------------- TRACE


_WEIGHT = Interval(float, 0, 1)
TRACE_CONSTRAINTS: dict[str, Constraint] = {
    "alpha": _WEIGHT,
    "beta": _WEIGHT,
    "gamma": _WEIGHT,
    "lam": Interval(float, 0, None, closed="neither"),
    "window": Interval(int, 1, None),
    "rho": Interval(float, None, None),
    "kernel": Options(*KERNELS),
}
"""The constraint of each TRACE setting (`tracecal._validation`), declared once: `TraceConfig` and the ``trace``
estimator check them; a decay kernel given as a function (`get_kernel`) is not checked against ``kernel``'s."""


@dataclass(frozen=True)
class TraceConfig:
    """The fixed TRACE configuration (docs/method.md §2); defaults are the paper's.

    R = alpha·D_lam(H) + beta·M^(window)(H) + gamma·L_rho(s); alpha, beta, gamma in [0, 1] with alpha + beta + gamma
    = 1; lam > 0; window ≥ 1 (`TRACE_CONSTRAINTS`).
    """

    alpha: float = 0.40
    beta: float = 0.40
    gamma: float = 0.20
    lam: float = 2.0
    window: int = 4
    rho: float = 0.25
    kernel: str = "exp"

    def __post_init__(self) -> None:
        check_trace_params(vars(self))


def check_trace_params(params: dict[str, Any]) -> None:
    """Check TRACE settings against `TRACE_CONSTRAINTS` (a kernel function passes) and, when all three weights are
    given, that alpha + beta + gamma = 1; `ValidationError` naming the setting."""
    kernel = params.get("kernel")
    check_params({k: v for k, v in params.items() if not (k == "kernel" and callable(kernel))}, TRACE_CONSTRAINTS)
    if {"alpha", "beta", "gamma"} <= set(params):
        total = params["alpha"] + params["beta"] + params["gamma"]
        if abs(total - 1.0) > 1e-9:
            raise ValidationError(f"alpha + beta + gamma must be 1, got {total:g}")


def trace_config(config: Any) -> TraceConfig:
    """``config`` if it is a `TraceConfig`, the default one for None; else `ValidationError` naming ``config``:
    the one check of every function that takes a TRACE configuration."""
    if config is None:
        return TraceConfig()
    if not isinstance(config, TraceConfig):
        raise ValidationError(f"config must be a TraceConfig (or None for the defaults), got {type(config).__name__}")
    return config


def as_batch(traces: Sequence[Trace] | TraceBatch) -> TraceBatch:
    """Accept a list of `Trace` or a `TraceBatch`, with values validated (`TraceBatch.from_traces`): a
    negative or non-finite surprisal / entropy raises ``ValueError`` naming the answer index (and id)."""
    return TraceBatch.from_traces(traces)


def chunked(fn: Callable[[TraceBatch], np.ndarray], b: TraceBatch, max_tokens: int = 1 << 16) -> np.ndarray:
    """Apply a per-answer function chunk by chunk (cache-sized temporaries) and concatenate."""
    if int(b.offsets[-1]) <= max_tokens:
        return fn(b)
    parts = [fn(sub) for _, _, sub in b.chunks(max_tokens)]
    return np.concatenate(parts) if parts else fn(b)


def trace_risk(traces: Sequence[Trace] | TraceBatch, config: TraceConfig | None = None) -> np.ndarray:
    """TRACE risk R = α·D_λ(H) + β·M^(w)(H) + γ·L_ρ(s) per answer, nats (NaN for a zero-token answer).

    Surprisal and entropy are validated first (`as_batch`): a negative or non-finite value raises
    ``ValueError`` naming the answer, so R ≥ 0 and c_TRACE = exp(−R) ∈ (0, 1].
    """
    cfg = trace_config(config)
    return chunked(lambda b: batch_risk(b, cfg), as_batch(traces))


def batch_risk(
    b: TraceBatch,
    cfg: TraceConfig,
    decayed: np.ndarray | None = None,
    total_entropy: np.ndarray | None = None,
    total_surprisal: np.ndarray | None = None,
) -> np.ndarray:
    """R of every answer of one (validated) batch, in one piece: `trace_risk` without the chunking. ``decayed``:
    D_λ(H) with the config's λ and kernel, ``total_entropy`` / ``total_surprisal``: Σ_t H_t and Σ_t s_t per answer,
    when already computed (`tracecal.signals.features.trace_and_features` shares them with TRACE+'s features)."""
    seg = b.segments
    r = np.zeros(len(seg))
    if cfg.alpha:
        r += cfg.alpha * (decayed_mean(b.entropy, seg, cfg.lam, cfg.kernel) if decayed is None else decayed)
    if cfg.beta:
        r += cfg.beta * window_peak(b.entropy, seg, cfg.window, total_entropy)
    if cfg.gamma:
        r += cfg.gamma * length_norm_sum(b.surprisal, seg, cfg.rho, total_surprisal)
    return _nan_empty(seg, r)


def trace_confidence(traces: Sequence[Trace] | TraceBatch, config: TraceConfig | None = None) -> np.ndarray:
    """c_TRACE = exp(−R) ∈ (0, 1]; ranks answers (it is not a probability). NaN for T = 0.

    Raises ``ValueError`` naming the answer index (and id) when a surprisal or entropy is negative or not
    finite (float round-off down to −`tracecal.traces.segments.NEGATIVE_TOLERANCE` is clipped to 0).

    Two answers of 4 tokens (surprisal s_t and entropy H_t in nats), a confident one and a hesitant one, and an
    empty answer:

    >>> from tracecal.signals.operators import trace_confidence
    >>> from tracecal.traces.trace import TraceBatch
    >>> sure = ([0.01, 0.02, 0.01, 0.05], [0.1, 0.2, 0.1, 0.3])
    >>> unsure = ([0.9, 1.6, 0.7, 2.0], [1.5, 2.2, 1.8, 2.5])
    >>> b = TraceBatch.from_lists([sure[0], unsure[0], []], [sure[1], unsure[1], []])
    >>> c = trace_confidence(b)
    >>> [round(float(v), 3) for v in c[:2]], bool(c[0] > c[1]), bool(c[2] != c[2])
    ([0.868, 0.103], True, True)
    """
    return np.exp(-trace_risk(traces, config))
