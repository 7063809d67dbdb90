"""The single trace statistics (docs/method.md §4, baselines 1–14): one confidence per answer from s_t and H_t alone.

The one definition of each statistic: `tracecal.estimators` registers each as a label-free estimator of the same
name, `tracecal.calibrators.traceplus_cv.TracePlusCV` selects among them (with TRACE) on labelled answers, and
`tracecal.signals.features` builds TRACE+'s features from the building blocks below (`mean_entropy`,
`first_k_entropy`, `entropy_slope`, `min_prob`, `geo_mean_prob`, `low_prob_rate`). The statistics of the table are
"higher = more confident"; p_t = exp(−s_t) (probability of the chosen token), H_t in nats; operators from
`tracecal.signals.operators`, vectorised over the whole batch (ragged arrays with offsets). A zero-token answer gets
NaN.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tracecal.signals.operators import (
    chunked,
    first_k_mean,
    last_k_mean,
    seg_max,
    seg_mean,
    seg_var,
    slope,
    window_peak,
)
from tracecal.traces.trace import TraceBatch

__all__ = [
    "TraceStatistic",
    "TRACE_STATISTICS",
    "trace_statistic",
    "mean_entropy",
    "first_k_entropy",
    "entropy_slope",
    "min_prob",
    "geo_mean_prob",
    "prob_rate",
    "low_prob_rate",
]


@dataclass(frozen=True)
class TraceStatistic:
    """A named per-answer statistic: ``fn`` maps a `TraceBatch` to one value per answer (higher = more confident)."""

    name: str
    family: str
    description: str
    fn: Callable[[TraceBatch], np.ndarray]


# ------------------------------------------------------------------ building blocks (one value per answer)


def mean_entropy(b: TraceBatch) -> np.ndarray:
    """mean_t H_t (nats)."""
    return seg_mean(b.entropy, b.segments)


def first_k_entropy(b: TraceBatch, k: int = 3) -> np.ndarray:
    """mean(H_1 … H_min(k,T)) (nats)."""
    return first_k_mean(b.entropy, b.segments, k)


def entropy_slope(b: TraceBatch) -> np.ndarray:
    """Least-squares slope of H_t on t (nats per token; 0 when T = 1)."""
    return slope(b.entropy, b.segments)


def min_prob(b: TraceBatch) -> np.ndarray:
    """min_t p_t = exp(−max_t s_t)."""
    return np.exp(-seg_max(b.surprisal, b.segments))


def geo_mean_prob(b: TraceBatch) -> np.ndarray:
    """exp(mean_t log p_t) = exp(−mean_t s_t): the length-normalised sequence probability."""
    return np.exp(-seg_mean(b.surprisal, b.segments))


def prob_rate(b: TraceBatch, threshold: float, above: bool) -> np.ndarray:
    """Share of tokens with p_t > ``threshold`` (``above``) or p_t < ``threshold``, as s_t ≶ −log(threshold)."""
    s_thr = -np.log(threshold)
    hits = b.surprisal < s_thr if above else b.surprisal > s_thr
    return seg_mean(hits.astype(np.float64), b.segments)


def low_prob_rate(b: TraceBatch, threshold: float = 0.5) -> np.ndarray:
    """Share of tokens with p_t < ``threshold`` (TRACE+'s ``low_prob_rate``; 0.5 our choice)."""
    return prob_rate(b, threshold, above=False)


# ------------------------------------------------------------------ the 14 single trace statistics


def _first_prob(b: TraceBatch) -> np.ndarray:
    seg = b.segments
    out = np.full(len(seg), np.nan)
    ne = seg.nonempty
    out[ne] = np.exp(-b.surprisal[seg.starts[ne]])
    return out


def _seq_likelihood(b: TraceBatch) -> np.ndarray:
    seg = b.segments
    total = np.add.reduceat(b.surprisal, seg.starts) if seg.all_nonempty else seg.reduce(np.add, b.surprisal)
    return np.exp(-total)


_TABLE = (
    # likelihood (1–6)
    ("first_token_prob", "likelihood", "p_1, probability of the first answer token", _first_prob),
    ("mean_prob", "likelihood", "mean_t p_t", lambda b: seg_mean(np.exp(-b.surprisal), b.segments)),
    ("norm_seq_prob", "likelihood", "exp(mean_t log p_t), length-normalised sequence probability", geo_mean_prob),
    ("seq_likelihood", "likelihood", "exp(Σ_t log p_t) (= G-NLL under greedy decoding)", _seq_likelihood),
    ("min_prob", "likelihood", "min_t p_t", min_prob),
    (
        "high_prob_rate",
        "likelihood",
        "share of tokens with p_t > 0.9 (our choice of threshold)",
        lambda b: prob_rate(b, 0.9, above=True),
    ),
    # entropy (7–10)
    ("neg_mean_entropy", "entropy", "−mean_t H_t", lambda b: -mean_entropy(b)),
    ("neg_max_entropy", "entropy", "−max_t H_t", lambda b: -seg_max(b.entropy, b.segments)),
    ("neg_first3_entropy", "entropy", "−mean of the first 3 H_t", lambda b: -first_k_entropy(b, 3)),
    ("neg_last3_entropy", "entropy", "−mean of the last 3 H_t", lambda b: -last_k_mean(b.entropy, b.segments, 3)),
    # trajectory (11–14)
    (
        "neg_window_entropy",
        "trajectory",
        "−M^(4)(H), windowed peak entropy",
        lambda b: -window_peak(b.entropy, b.segments, 4),
    ),
    ("neg_entropy_var", "trajectory", "−Var_t(H_t)", lambda b: -seg_var(b.entropy, b.segments)),
    ("neg_entropy_slope", "trajectory", "−slope of H_t on t", lambda b: -entropy_slope(b)),
    ("prob_slope", "trajectory", "+slope of p_t on t", lambda b: slope(np.exp(-b.surprisal), b.segments)),
)

TRACE_STATISTICS: dict[str, TraceStatistic] = {row[0]: TraceStatistic(*row) for row in _TABLE}
"""The 14 single trace statistics by name, in the paper's order."""


def trace_statistic(name: str, b: TraceBatch) -> np.ndarray:
    """Statistic ``name`` per answer of an already validated batch, shape (B,); NaN for zero-token answers."""
    out = np.asarray(chunked(TRACE_STATISTICS[name].fn, b), dtype=np.float64).copy()
    out[b.lengths == 0] = np.nan
    return out
