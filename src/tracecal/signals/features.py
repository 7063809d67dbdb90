"""TRACE+ feature vector φ (docs/method.md §3), vectorised over a `TraceBatch` (values validated by `as_batch`).

"confidence" means exp(−·). The 8 base features, per answer:

1. ``first3_entropy_conf``  = exp(−mean(H_1 … H_min(k,T))), k = 3
2. ``mean_entropy_conf``    = exp(−mean(H))
3. ``log_length``           = log T
4. ``entropy_slope``        = least-squares slope of H_t on t (0 when T = 1)
5. ``decayed_entropy_conf_l2`` = exp(−D_2(H));  6. same with λ = 4
7. ``decayed_surprisal_conf_l2`` = exp(−D_2(s)); 8. same with λ = 4

Ablation "+ seq. likelihood" (``seq_likelihood=True``) appends ``min_prob`` = min p_t,
``geo_mean_prob`` = exp(mean log p_t) and ``low_prob_rate`` = share of p_t < threshold (0.5, our choice).
A zero-token answer gets NaN in every feature. Features 1, 2, 4 and the three ablation features are the trace
statistics of `tracecal.signals.statistics` (the same operators, bit for bit); 5–8 are TRACE's decayed means.

One sweep (`trace_and_features`): c_TRACE and φ together, chunk by chunk over the ragged arrays (cache-sized
chunks of 2^16 tokens), each chunk's layout (token positions, kernel weights) built once and the per-answer
sums Σ_t H_t and Σ_t s_t computed once and shared (mean entropy, slope, window peak of short answers, L_ρ(s),
geometric-mean p), and D_λ(H) shared between TRACE and φ when TRACE's λ is one of φ's. The same operators in the
same order as `trace_confidence` and `trace_plus_features` apart, so the values are equal bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tracecal.errors import ValidationError
from tracecal.signals.operators import (
    TraceConfig,
    as_batch,
    batch_risk,
    decayed_mean,
    get_kernel,
    seg_mean,
    slope,
    trace_config,
)
from tracecal.signals.statistics import first_k_entropy, low_prob_rate, min_prob
from tracecal.traces.trace import Trace, TraceBatch

__all__ = ["feature_names", "trace_plus_features", "trace_and_features", "CHUNK_TOKENS"]

CHUNK_TOKENS = 1 << 16
"""Tokens per chunk of the sweep: the temporaries of a chunk stay in cache (as `tracecal.signals.operators.chunked`)."""


def feature_names(lams: Sequence[float] = (2.0, 4.0), seq_likelihood: bool = False, first_k: int = 3) -> list[str]:
    """Names of the columns returned by `trace_plus_features` with the same arguments."""
    lam_tag = [f"l{lam:g}" for lam in lams]
    names = [f"first{first_k}_entropy_conf", "mean_entropy_conf", "log_length", "entropy_slope"]
    names += [f"decayed_entropy_conf_{t}" for t in lam_tag]
    names += [f"decayed_surprisal_conf_{t}" for t in lam_tag]
    if seq_likelihood:
        names += ["min_prob", "geo_mean_prob", "low_prob_rate"]
    return names


@dataclass(frozen=True)
class _Spec:
    """The feature arguments of one sweep."""

    lams: tuple[float, ...]
    first_k: int
    kernel: str
    seq_likelihood: bool
    low_prob_threshold: float

    @property
    def width(self) -> int:
        return len(feature_names(self.lams, self.seq_likelihood, self.first_k))


def trace_plus_features(
    traces: Sequence[Trace] | TraceBatch,
    lams: Sequence[float] = (2.0, 4.0),
    first_k: int = 3,
    kernel: str = "exp",
    seq_likelihood: bool = False,
    low_prob_threshold: float = 0.5,
) -> np.ndarray:
    """φ for every answer: float64 array of shape ``(B, n_features)`` (see `feature_names`)."""
    spec = _Spec(tuple(lams), first_k, kernel, seq_likelihood, low_prob_threshold)
    return _sweep(as_batch(traces), None, spec)[1]


def trace_and_features(
    traces: Sequence[Trace] | TraceBatch,
    config: TraceConfig | None = None,
    lams: Sequence[float] = (2.0, 4.0),
    first_k: int = 3,
    kernel: str = "exp",
    seq_likelihood: bool = False,
    low_prob_threshold: float = 0.5,
) -> tuple[np.ndarray, np.ndarray]:
    """(c_TRACE, φ) of every answer in one sweep (module docstring): shapes ``(B,)`` and ``(B, n_features)``,
    equal to ``trace_confidence(traces, config)`` and ``trace_plus_features(traces, lams, …)``.

    >>> from tracecal.traces.trace import TraceBatch
    >>> b = TraceBatch.from_lists([[0.01, 0.02, 0.01, 0.05], []], [[0.1, 0.2, 0.1, 0.3], []])
    >>> c, phi = trace_and_features(b)
    >>> round(float(c[0]), 3), phi.shape, bool(np.isnan(phi[1]).all())
    (0.868, (2, 8), True)
    """
    spec = _Spec(tuple(lams), first_k, kernel, seq_likelihood, low_prob_threshold)
    conf, phi = _sweep(as_batch(traces), trace_config(config), spec)
    assert conf is not None
    return conf, phi


def _sweep(b: TraceBatch, cfg: TraceConfig | None, spec: _Spec) -> tuple[np.ndarray | None, np.ndarray]:
    """c_TRACE (with ``cfg``) and φ, chunk by chunk."""
    for lam in spec.lams:
        if lam <= 0:
            raise ValidationError(f"decay rate λ must be > 0, got {lam}")
    get_kernel(spec.kernel)
    n = len(b)
    conf = None if cfg is None else np.empty(n)
    phi = np.empty((n, spec.width))
    for i0, i1, sub in b.chunks(CHUNK_TOKENS):
        c, phi[i0:i1] = _chunk(sub, cfg, spec)
        if conf is not None:
            conf[i0:i1] = c
    return conf, phi


def _chunk(b: TraceBatch, cfg: TraceConfig | None, spec: _Spec) -> tuple[np.ndarray | None, np.ndarray]:
    seg = b.segments
    H, s = b.entropy, b.surprisal
    sum_h, sum_s = seg.reduce(np.add, H), seg.reduce(np.add, s)
    dec_h = {lam: decayed_mean(H, seg, lam, spec.kernel) for lam in spec.lams}
    cols = [
        np.exp(-first_k_entropy(b, spec.first_k)),
        np.exp(-seg_mean(H, seg, sum_h)),
        np.log(np.where(seg.lengths > 0, seg.lengths, np.nan)),
        slope(H, seg, sum_h),
    ]
    cols += [np.exp(-dec_h[lam]) for lam in spec.lams]
    cols += [np.exp(-decayed_mean(s, seg, lam, spec.kernel)) for lam in spec.lams]
    if spec.seq_likelihood:
        cols += [min_prob(b), np.exp(-seg_mean(s, seg, sum_s)), low_prob_rate(b, spec.low_prob_threshold)]
    if cfg is None:
        return None, np.column_stack(cols)
    shared = dec_h.get(cfg.lam) if cfg.kernel == spec.kernel else None
    return np.exp(-batch_risk(b, cfg, shared, sum_h, sum_s)), np.column_stack(cols)
