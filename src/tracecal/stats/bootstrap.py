"""Paired bootstrap intervals over questions for the split protocol, vectorised over resamples.

The resampling unit is the question (one answer per question). `bootstrap_counts` draws ``B`` resamples of a
task's ``n`` answers as a count matrix ``W`` of shape (B, n): ``W[b, i]`` is how often answer ``i`` occurs in
resample ``b``. Resampling is stratified by correctness by default (the n₁ correct answers are resampled among
themselves, the n₀ wrong ones among themselves), so every resample keeps n₁ and n₀ and AUROC stays defined
(the default of pROC's ``roc.test``; it conditions on the observed base rate).

Metrics of a weighted sample (w ≥ 0; with w ≡ 1 they equal `tracecal.stats.metrics.auroc` / `brier` exactly):

    AUROC_w = Σ_{i: y_i=1} Σ_{j: y_j=0} w_i·w_j·(1[s_i > s_j] + ½·1[s_i = s_j]) / (Σ_{y=1} w · Σ_{y=0} w)
    Brier_w = Σ_i w_i·(p_i − y_i)² / Σ_i w_i

computed for all B rows at once from one sort of the scores (weighted ranks: the weight of wrong answers
below each score group by a cumulative sum) — O(B·n) time, no loop over resamples.

The split protocol reports the mean over S calibration / evaluation splits of a metric on each evaluation
split. `split_draws` applies **one** resample of the task's questions to every split (answer i keeps its weight
W[b, i] in every evaluation split it belongs to; the calibrators fitted on each calibration split are held
fixed) and averages over the splits: draw_b = mean_s M(ev_s; W[b, ev_s]). Resampling each split on its own and
pooling would treat the 20 heavily overlapping evaluation splits as independent samples and shrink the interval
about √20-fold; re-running the whole protocol (refitting every calibrator) on each resample would also
propagate the calibration-split noise, at B × S fits per estimator. The draws of two estimators built from the
same ``W`` are paired, so `percentile_interval` of their difference is the paired bootstrap interval.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from tracecal._validation import Interval, check_param

__all__ = [
    "bootstrap_counts",
    "weighted_auroc",
    "weighted_brier",
    "split_draws",
    "percentile_interval",
    "compare",
    "best_baseline",
    "comparisons",
    "check_boot_params",
    "N_BOOT",
    "LEVEL",
    "enough_per_class",
    "BOOT_METRICS",
    "LOWER_IS_BETTER_BOOT",
    "MIN_PER_CLASS",
]

MIN_PER_CLASS = 10
"""Fewest correct (and wrong) answers of a task for which intervals are given: a stratified resample of, say, 2
correct answers can only repeat them, so its spread says nothing about the sampling error (MLQA: 2 of 300)."""

Metric = Callable[[NDArray[np.int64], NDArray[np.float64], NDArray[Any], NDArray[np.intp]], NDArray[np.float64]]


N_BOOT = Interval(int, 0, None)
"""Bootstrap resamples: a whole number ≥ 0 (0: no interval)."""
LEVEL = Interval(float, 0, 1, closed="neither")
"""Confidence level of an interval, in (0, 1)."""


def check_boot_params(n_boot: Any, level: Any = None) -> None:
    """`ValidationError` (a ``ValueError``) unless ``n_boot`` is a whole number ≥ 0 and ``level`` (if given) lies
    in (0, 1)."""
    check_param("n_boot (bootstrap resamples)", n_boot, N_BOOT)
    if level is not None:
        check_param("level (of the bootstrap interval)", level, LEVEL)


def enough_per_class(y: ArrayLike, minimum: int = MIN_PER_CLASS) -> bool:
    """Whether both classes have at least ``minimum`` answers (the condition for reporting an interval)."""
    yy = np.asarray(y)
    n1 = int((yy == 1).sum())
    return min(n1, yy.size - n1) >= minimum


def bootstrap_counts(y: ArrayLike, n_boot: int, seed: Any = 0, stratified: bool = True) -> NDArray[np.int32]:
    """Resample counts W, shape (n_boot, n): row b says how often each answer occurs in resample b.

    ``stratified``: resample correct and wrong answers separately (each row keeps the class counts); a class
    that is absent stays absent. ``seed``: anything `numpy.random.default_rng` accepts.
    """
    yy = np.asarray(y)
    n = yy.size
    check_boot_params(n_boot)
    rng = np.random.default_rng(seed)
    groups = [np.flatnonzero(yy == c) for c in (0, 1)] if stratified else [np.arange(n)]
    flat = np.zeros(n_boot * n, dtype=np.int32)
    rows = np.arange(n_boot, dtype=np.int64)[:, None] * n
    for g in groups:
        if g.size == 0:
            continue
        pick = g[rng.integers(0, g.size, (n_boot, g.size))]  # (B, |g|) indices drawn with replacement
        flat += np.bincount((rows + pick).ravel(), minlength=n_boot * n).astype(np.int32)
    return flat.reshape(n_boot, n)


def _as_weights(w: ArrayLike, n: int, cols: NDArray[np.intp] | None) -> tuple[NDArray[Any], NDArray[np.intp]]:
    """(2-D weights, the columns of the sample's answers): integer counts stay integer (exact sums)."""
    arr = np.asarray(w)
    arr = arr[None, :] if arr.ndim == 1 else arr
    if arr.dtype.kind not in "iu":
        arr = arr.astype(np.float64, copy=False)
    idx = np.arange(n) if cols is None else np.asarray(cols, dtype=np.intp)
    width_ok = arr.ndim == 2 and (arr.shape[1] == n if cols is None else bool(n == 0 or idx.max() < arr.shape[1]))
    if not width_ok or idx.shape != (n,) or (n and idx.min() < 0):
        raise ValueError(
            f"weights must have shape (B, {n}) — one row per resample — or (B, N) with {n} column "
            f"indices, got weights {np.shape(w)}"
        )
    return arr, idx


def weighted_auroc(
    y: ArrayLike, score: ArrayLike, w: ArrayLike, cols: NDArray[np.intp] | None = None
) -> NDArray[np.float64]:
    """AUROC of each weighted resample (see the module docstring): shape (B,); NaN where a class has weight 0.

    ``w``: (B, n) weights ((n,) for one sample), or (B, N) with ``cols`` the n columns of these answers. Ties
    in ``score`` count ½ (as `tracecal.stats.metrics.auroc`). With C_b(t) the weight of wrong answers scoring below t,
    U_b = ½ Σ_{i: y_i=1} w_bi·(C_b(s_i⁻) + C_b(s_i⁺)): one cumulative sum over the wrong answers in score order
    and two gathers at each correct answer's (left, right) position, for all B rows at once. Integer counts are
    summed exactly in integers.
    """
    yy = np.asarray(y)
    s = np.asarray(score, dtype=np.float64)
    if s.shape != yy.shape or s.ndim != 1:
        raise ValueError(f"y and score must be 1-D of one length, got {yy.shape} and {s.shape}")
    W, idx = _as_weights(w, yy.size, cols)
    pos, neg = np.flatnonzero(yy == 1), np.flatnonzero(yy == 0)
    neg = neg[np.argsort(s[neg], kind="stable")]
    ns = s[neg]
    left, right = np.searchsorted(ns, s[pos], "left"), np.searchsorted(ns, s[pos], "right")
    acc = np.int64 if W.dtype.kind in "iu" else np.float64
    C = np.zeros((W.shape[0], neg.size + 1), dtype=W.dtype)
    np.cumsum(W[:, idx[neg]], axis=1, out=C[:, 1:])
    Wp = W[:, idx[pos]]
    u = (Wp * (C[:, left] + C[:, right])).sum(axis=1, dtype=acc)
    denom = 2.0 * Wp.sum(axis=1, dtype=acc) * C[:, -1]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denom > 0, u / np.where(denom > 0, denom, 1.0), np.nan)


def weighted_brier(
    y: ArrayLike, prob: ArrayLike, w: ArrayLike, cols: NDArray[np.intp] | None = None
) -> NDArray[np.float64]:
    """Brier score Σ w_i (p_i − y_i)² / Σ w_i of each weighted resample: shape (B,) (NaN for zero total weight).

    ``w`` and ``cols`` as in `weighted_auroc`."""
    yy = np.asarray(y).astype(np.float64)
    p = np.asarray(prob, dtype=np.float64)
    if p.shape != yy.shape or p.ndim != 1:
        raise ValueError(f"y and prob must be 1-D of one length, got {yy.shape} and {p.shape}")
    W, idx = _as_weights(w, yy.size, cols)
    full = np.zeros((2, W.shape[1]))  # Σ w (p − y)² and Σ w as products with the full-width weights
    full[0, idx], full[1, idx] = (p - yy) ** 2, 1.0
    num, tot = (W.astype(np.float64, copy=False) @ full.T).T
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(tot > 0, num / np.where(tot > 0, tot, 1.0), np.nan)


BOOT_METRICS: dict[str, Metric] = {"auroc": weighted_auroc, "brier": weighted_brier}
"""The metrics with bootstrap intervals: AUROC on raw scores, Brier on calibrated probabilities."""
LOWER_IS_BETTER_BOOT = frozenset({"brier"})


def split_draws(
    metric: str | Metric,
    y: ArrayLike,
    evals: Sequence[NDArray[np.intp]],
    values: Sequence[ArrayLike],
    counts: NDArray[Any],
) -> NDArray[np.float64]:
    """Bootstrap draws of the mean over splits of a metric on the evaluation splits: shape (B,).

    ``evals[s]``: indices (into the task) of split s's evaluation answers; ``values[s]``: the scores (or
    probabilities) of those answers, in the same order; ``counts``: `bootstrap_counts` of the whole task. Splits
    whose metric is undefined in a resample (NaN) are left out of that resample's mean.
    """
    fn = BOOT_METRICS[metric] if isinstance(metric, str) else metric
    yy = np.asarray(y)
    pairs = zip(evals, values, strict=True)
    per = np.stack([fn(yy[ev], np.asarray(v, dtype=np.float64), counts, ev) for ev, v in pairs])
    ok = np.isfinite(per)
    n_ok = ok.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n_ok > 0, np.where(ok, per, 0.0).sum(axis=0) / np.maximum(n_ok, 1), np.nan)


def percentile_interval(draws: ArrayLike, level: float = 0.95) -> tuple[float, float]:
    """The percentile interval [q_{(1−level)/2}, q_{(1+level)/2}] of the finite draws ((NaN, NaN) if none)."""
    d = np.asarray(draws, dtype=np.float64)
    d = d[np.isfinite(d)]
    if d.size == 0:
        return math.nan, math.nan
    lo, hi = np.quantile(d, [(1.0 - level) / 2.0, (1.0 + level) / 2.0])
    return float(lo), float(hi)


def compare(
    draws_a: ArrayLike, draws_b: ArrayLike, diff: float, level: float, lower_is_better: bool = False
) -> dict[str, Any]:
    """A − B: the point difference ``diff`` (of the reported means), its paired percentile interval from the
    draws (built from one ``W``), and a verdict: ``better`` / ``worse`` when the interval excludes 0 (with the
    metric's direction), ``n.s.`` otherwise, ``n/a`` when undefined."""
    lo, hi = percentile_interval(np.asarray(draws_a, dtype=np.float64) - np.asarray(draws_b, dtype=np.float64), level)
    if not (math.isfinite(lo) and math.isfinite(diff)):
        verdict = "n/a"
    elif lo > 0 or hi < 0:
        verdict = "better" if (lo > 0) != lower_is_better else "worse"
    else:
        verdict = "n.s."
    return {"diff": float(diff), "lo": lo, "hi": hi, "verdict": verdict}


def best_baseline(means: Mapping[str, float], families: Mapping[str, str], exclude_family: str = "TRACE") -> str | None:
    """The estimator of highest finite mean (AUROC) whose family is not ``exclude_family``; the first on ties."""
    best, name = -math.inf, None
    for est, v in means.items():
        if families.get(est) != exclude_family and math.isfinite(v) and v > best:
            best, name = v, est
    return name


def comparisons(
    draws: Mapping[str, Mapping[str, NDArray[np.float64]]],
    means: Mapping[str, Mapping[str, float]],
    families: Mapping[str, str],
    level: float,
) -> dict[str, Any]:
    """Every estimator against the best baseline (`best_baseline` by mean AUROC), per metric of `BOOT_METRICS`.

    ``draws[est][metric]``: (B,) draws (all from one ``W``); ``means[est][metric]``: the reported mean. Returns
    ``{"baseline", "level", "n_boot", "estimators": {est: {metric: compare(...)}}}`` (the baseline itself is left
    out); ``baseline`` is None when no estimator qualifies.
    """
    base = best_baseline({e: m.get("auroc", math.nan) for e, m in means.items() if e in draws}, families)
    n_boot = int(next((len(v) for d in draws.values() for v in d.values()), 0))
    out: dict[str, Any] = {"baseline": base, "level": float(level), "n_boot": n_boot, "estimators": {}}
    if base is None:
        return out
    for est, d in draws.items():
        if est == base:
            continue
        out["estimators"][est] = {
            m: compare(d[m], draws[base][m], means[est][m] - means[base][m], level, m in LOWER_IS_BETTER_BOOT)
            for m in BOOT_METRICS
            if m in d and m in draws[base]
        }
    return out
