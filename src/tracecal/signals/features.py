"""TRACE+ feature vector φ (METHOD §3), vectorised over a `TraceBatch` (values validated by `as_batch`).

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
statistics of `tracecal.signals.statistics` (their one definition); 5–8 are TRACE's decayed means.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tracecal.signals.operators import as_batch, chunked, decayed_mean
from tracecal.signals.statistics import (
    entropy_slope,
    first_k_entropy,
    geo_mean_prob,
    low_prob_rate,
    mean_entropy,
    min_prob,
)
from tracecal.traces.trace import Trace, TraceBatch

__all__ = ["feature_names", "trace_plus_features"]


def feature_names(lams: Sequence[float] = (2.0, 4.0), seq_likelihood: bool = False, first_k: int = 3) -> list[str]:
    """Names of the columns returned by `trace_plus_features` with the same arguments."""
    lam_tag = [f"l{lam:g}" for lam in lams]
    names = [f"first{first_k}_entropy_conf", "mean_entropy_conf", "log_length", "entropy_slope"]
    names += [f"decayed_entropy_conf_{t}" for t in lam_tag]
    names += [f"decayed_surprisal_conf_{t}" for t in lam_tag]
    if seq_likelihood:
        names += ["min_prob", "geo_mean_prob", "low_prob_rate"]
    return names


def trace_plus_features(
    traces: Sequence[Trace] | TraceBatch,
    lams: Sequence[float] = (2.0, 4.0),
    first_k: int = 3,
    kernel: str = "exp",
    seq_likelihood: bool = False,
    low_prob_threshold: float = 0.5,
) -> np.ndarray:
    """φ for every answer: float64 array of shape ``(B, n_features)`` (see `feature_names`)."""
    b = as_batch(traces)
    if len(b) == 0:
        n = len(feature_names(lams, seq_likelihood, first_k))
        return np.zeros((0, n))
    return chunked(lambda bb: _features(bb, lams, first_k, kernel, seq_likelihood, low_prob_threshold), b)


def _features(
    b: TraceBatch, lams: Sequence[float], first_k: int, kernel: str, seq_likelihood: bool, low_prob_threshold: float
) -> np.ndarray:
    seg = b.segments
    H, s = b.entropy, b.surprisal
    cols = [
        np.exp(-first_k_entropy(b, first_k)),
        np.exp(-mean_entropy(b)),
        np.log(np.where(seg.lengths > 0, seg.lengths, np.nan)),
        entropy_slope(b),
    ]
    cols += [np.exp(-decayed_mean(H, seg, lam, kernel)) for lam in lams]
    cols += [np.exp(-decayed_mean(s, seg, lam, kernel)) for lam in lams]
    if seq_likelihood:
        cols += [min_prob(b), geo_mean_prob(b), low_prob_rate(b, low_prob_threshold)]
    return np.column_stack(cols)
