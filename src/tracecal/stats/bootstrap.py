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
below each score group by a cumulative sum) — O(B·n) time, no loop over resamples. What a sample's AUROC needs
from that sort is an `AurocPlan` (its wrong answers in score order, and the wrong answers below / at each correct
one); `sorted_auroc_plans` makes the plans of all S evaluation splits from **one** sort of the task's scores, and
`blocked_split_draws` applies the resample weights to them block by block (`BLOCK_ELEMENTS` weights at a time),
so that B = 1,000 resamples of a million answers need no (B, n) temporary beyond the counts themselves (one byte
each with ``dtype=np.uint8``). The protocol computes the same draws as matrix products over one sorted layout
(`tracecal.stats.boot_draws`, ~8× faster on 20 splits: AUROC bit for bit); the cumulative sums here are its
reference.

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
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from tracecal._validation import Interval, check_param
from tracecal.errors import ValidationError

__all__ = [
    "bootstrap_counts",
    "weighted_auroc",
    "AurocPlan",
    "auroc_plan",
    "sorted_auroc_plans",
    "planned_auroc",
    "split_mean",
    "blocked_split_draws",
    "BLOCK_ELEMENTS",
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


N_BOOT = Interval(int, 0, 100_000)
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


def bootstrap_counts(
    y: ArrayLike,
    n_boot: int,
    seed: Any = 0,
    stratified: bool = True,
    dtype: Any = np.int32,
    order: Literal["C", "F"] = "C",
) -> NDArray[Any]:
    """Resample counts W, shape (n_boot, n): row b says how often each answer occurs in resample b.

    ``stratified``: resample correct and wrong answers separately (each row keeps the class counts); a class
    that is absent stays absent. ``seed``: anything `numpy.random.default_rng` accepts. The draws are made in
    blocks of rows (the same stream as one draw of all rows: every class's (n_boot, |class|) indices, the wrong
    answers' first) and counted row by row, so the working memory is a few blocks; ``dtype`` ``uint8`` keeps W
    itself at one byte per count (a count above 255 — never seen in practice — makes it ``int32``). ``order``
    ``"F"``: W column-major (each answer's counts contiguous), as `tracecal.stats.boot_draws` reads them.
    """
    yy = np.asarray(y)
    n = yy.size
    check_boot_params(n_boot)
    rng = np.random.default_rng(seed)
    groups = [np.flatnonzero(yy == c) for c in (0, 1)] if stratified else [np.arange(n)]
    out = np.zeros((n_boot, n), dtype=dtype, order=order)
    block = max(1, BLOCK_ELEMENTS // max(n, 1))
    for g in groups:
        for b0 in range(0, n_boot if g.size else 0, block):
            b1 = min(b0 + block, n_boot)
            pick = rng.integers(0, g.size, (b1 - b0, g.size))  # positions in g, drawn with replacement
            add = np.stack([np.bincount(row, minlength=g.size) for row in pick])
            if add.max(initial=0) > np.iinfo(out.dtype).max:
                out = out.astype(np.int32, order=order)
            out[b0:b1, g] = add
    return out


BLOCK_ELEMENTS = 1 << 22
"""Resample weights handled at once (rows × answers) by `bootstrap_counts` and `blocked_split_draws`: bounds their
working memory (a few times 32 MiB)."""


def _as_weights(w: ArrayLike, n: int, cols: NDArray[np.intp] | None) -> tuple[NDArray[Any], NDArray[np.intp]]:
    """(2-D weights, the columns of the sample's answers): integer counts stay integer (exact sums)."""
    arr = np.asarray(w)
    arr = arr[None, :] if arr.ndim == 1 else arr
    if arr.dtype.kind not in "iu":
        arr = arr.astype(np.float64, copy=False)
    idx = np.arange(n) if cols is None else np.asarray(cols, dtype=np.intp)
    width_ok = arr.ndim == 2 and (arr.shape[1] == n if cols is None else bool(n == 0 or idx.max() < arr.shape[1]))
    if not width_ok or idx.shape != (n,) or (n and idx.min() < 0):
        raise ValidationError(
            f"weights must have shape (B, {n}) — one row per resample — or (B, N) with {n} column "
            f"indices, got weights {np.shape(w)}"
        )
    return arr, idx


@dataclass(frozen=True)
class AurocPlan:
    """One sample's answers in score order, as a weighted AUROC needs them: ``neg`` the columns (into the weight
    matrix) of its wrong answers by ascending score, ``pos`` those of its correct answers, and for each correct one
    ``left`` / ``right`` = how many wrong answers score below / at most as high (ties count ½ through the two)."""

    neg: NDArray[np.intp]
    pos: NDArray[np.intp]
    left: NDArray[np.intp]
    right: NDArray[np.intp]


def auroc_plan(y: ArrayLike, score: ArrayLike, cols: NDArray[np.intp] | None = None) -> AurocPlan:
    """The `AurocPlan` of answers with labels ``y`` and scores ``score`` (one sort), whose weights are the columns
    ``cols`` of the weight matrix (default 0 … n − 1)."""
    yy = np.asarray(y)
    s = np.asarray(score, dtype=np.float64)
    idx = np.arange(yy.size) if cols is None else np.asarray(cols, dtype=np.intp)
    pos, neg = np.flatnonzero(yy == 1), np.flatnonzero(yy == 0)
    neg = neg[np.argsort(s[neg], kind="stable")]
    ns = s[neg]
    left, right = np.searchsorted(ns, s[pos], "left"), np.searchsorted(ns, s[pos], "right")
    return AurocPlan(idx[neg], idx[pos], left, right)


def sorted_auroc_plans(
    y: ArrayLike, score: ArrayLike, order: NDArray[np.intp], member: NDArray[np.bool_]
) -> list[AurocPlan]:
    """The `AurocPlan` of each sample ``member[s]`` ((S, n) booleans over a task's answers) from **one** sort of the
    task's scores: ``order`` = the task positions by ascending ``score`` (stable). Equal to `auroc_plan` of each
    sample (up to the order of its correct answers), without a sort per sample."""
    yy, ss = np.asarray(y)[order], np.asarray(score, dtype=np.float64)[order]
    new = np.r_[True, ss[1:] != ss[:-1]] if ss.size else np.zeros(0, bool)
    starts = np.flatnonzero(new)
    ends = np.r_[starts[1:], ss.size] - 1  # the last sorted position of each tied group
    group = np.cumsum(new) - 1
    plans = []
    for row in member:
        keep = row[order]
        neg_at, pos_at = keep & (yy == 0), keep & (yy == 1)
        through = np.cumsum(neg_at)  # wrong answers of the sample up to each sorted position
        below = through - neg_at
        g = group[pos_at]
        plans.append(AurocPlan(order[neg_at], order[pos_at], below[starts[g]], through[ends[g]]))
    return plans


def planned_auroc(plan: AurocPlan, W: NDArray[Any]) -> NDArray[np.float64]:
    """The AUROC of each row of weights ``W`` (B, N) over the sample of ``plan``: (B,), NaN where a class has weight
    0. U_b = ½ Σ_{i: y_i=1} w_bi·(C_b(left_i) + C_b(right_i)), C_b the cumulative weight of the wrong answers in
    score order; integer weights are summed exactly in integers."""
    acc = np.int64 if W.dtype.kind in "iu" else np.float64
    small = W.dtype == np.uint8 and W.shape[1] < 1 << 22  # byte counts: int32 sums are exact, and half the traffic
    C = np.zeros((W.shape[0], plan.neg.size + 1), dtype=np.int32 if small else acc)
    np.cumsum(W[:, plan.neg], axis=1, dtype=C.dtype, out=C[:, 1:])
    Wp = W[:, plan.pos]
    both = C[:, plan.left] + C[:, plan.right]
    if small and 2 * 255 * int(C[:, -1].max(initial=0)) >= 1 << 31:  # a product could overflow int32
        both = both.astype(np.int64)
    u = (Wp * both).sum(axis=1, dtype=acc)
    denom = 2.0 * Wp.sum(axis=1, dtype=acc) * C[:, -1]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denom > 0, u / np.where(denom > 0, denom, 1.0), np.nan)


def weighted_auroc(
    y: ArrayLike, score: ArrayLike, w: ArrayLike, cols: NDArray[np.intp] | None = None
) -> NDArray[np.float64]:
    """AUROC of each weighted resample (see the module docstring): shape (B,); NaN where a class has weight 0.

    ``w``: (B, n) weights ((n,) for one sample), or (B, N) with ``cols`` the n columns of these answers. Ties
    in ``score`` count ½ (as `tracecal.stats.metrics.auroc`). With C_b(t) the weight of wrong answers scoring below t,
    U_b = ½ Σ_{i: y_i=1} w_bi·(C_b(s_i⁻) + C_b(s_i⁺)): one cumulative sum over the wrong answers in score order
    and two gathers at each correct answer's (left, right) position, for all B rows at once (`planned_auroc`).
    Integer counts are summed exactly in integers.
    """
    yy = np.asarray(y)
    s = np.asarray(score, dtype=np.float64)
    if s.shape != yy.shape or s.ndim != 1:
        raise ValidationError(f"y and score must be 1-D of one length, got {yy.shape} and {s.shape}")
    W, idx = _as_weights(w, yy.size, cols)
    return planned_auroc(auroc_plan(yy, s, idx), W)


def weighted_brier(
    y: ArrayLike, prob: ArrayLike, w: ArrayLike, cols: NDArray[np.intp] | None = None
) -> NDArray[np.float64]:
    """Brier score Σ w_i (p_i − y_i)² / Σ w_i of each weighted resample: shape (B,) (NaN for zero total weight).

    ``w`` and ``cols`` as in `weighted_auroc`."""
    yy = np.asarray(y).astype(np.float64)
    p = np.asarray(prob, dtype=np.float64)
    if p.shape != yy.shape or p.ndim != 1:
        raise ValidationError(f"y and prob must be 1-D of one length, got {yy.shape} and {p.shape}")
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
    return split_mean(np.stack([fn(yy[ev], np.asarray(v, dtype=np.float64), counts, ev) for ev, v in pairs]))


def split_mean(per: NDArray[np.float64]) -> NDArray[np.float64]:
    """The mean over splits (rows of ``per``, (S, B)) of each resample's metric, NaN splits left out: (B,)."""
    ok = np.isfinite(per)
    n_ok = ok.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n_ok > 0, np.where(ok, per, 0.0).sum(axis=0) / np.maximum(n_ok, 1), np.nan)


def blocked_split_draws(
    plans: Sequence[AurocPlan], evals: NDArray[np.intp], sq_err: NDArray[np.float64], counts: NDArray[Any]
) -> dict[str, NDArray[np.float64]]:
    """`split_draws` of AUROC and Brier together, from plans made once: {"auroc": (B,), "brier": (B,)}.

    ``plans[s]``: split s's `AurocPlan` (`sorted_auroc_plans`: one sort of a label-free score for every split);
    ``evals`` (S, m): each split's answers, ``sq_err`` (S, m): their (p − y)²; ``counts``: `bootstrap_counts` (any
    integer dtype). The resample rows are taken in blocks of `BLOCK_ELEMENTS` weights, so the working memory stays
    bounded whatever B; the Brier numerators and weight totals of all splits are one matrix product per block.
    """
    S, (B, n) = len(plans), counts.shape
    full = np.zeros((2 * S, n))
    rows = np.arange(S)[:, None]
    full[rows, evals], full[S + rows, evals] = sq_err, 1.0
    auc, bri = np.empty((S, B)), np.empty((S, B))
    step = max(1, BLOCK_ELEMENTS // max(n, 1))
    for b0 in range(0, B, step):
        W = counts[b0 : b0 + step]
        for s, plan in enumerate(plans):
            auc[s, b0 : b0 + len(W)] = planned_auroc(plan, W)
        num, tot = np.split((W.astype(np.float64) @ full.T).T, 2)
        with np.errstate(invalid="ignore", divide="ignore"):
            bri[:, b0 : b0 + len(W)] = np.where(tot > 0, num / np.where(tot > 0, tot, 1.0), np.nan)
    return {"auroc": split_mean(auc), "brier": split_mean(bri)}


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
