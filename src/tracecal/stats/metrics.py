"""Evaluation metrics for confidence scores and calibrated probabilities (docs/method.md §5).

Conventions: ``y`` holds correctness labels z ∈ {0, 1} (1 = the answer is correct); ``score`` is any
real-valued confidence (higher = more confident; only its order matters); ``prob`` is a probability of
being correct, in [0, 1]. All functions are vectorised NumPy (no per-sample Python loops) and validate
their input (see `check_labels`, `check_scores`):

* mismatched lengths, empty arrays, non-1-D arrays, labels outside {0, 1} → ``ValueError``;
* NaN / ±inf in a score or probability → ``ValueError`` saying how many (callers handle NaN first);
* probabilities outside [0, 1] → ``ValueError``.

Ranking metrics (AUROC, AUPRC) are undefined when ``y`` has a single class: they return NaN and emit a
`SingleClassWarning` (never a crash or a fake 0.5). Brier, ECE, AURC and selective risk stay defined.

Ties in ``score`` are never broken by input order: AUROC uses average ranks, AUPRC evaluates precision
and recall only at distinct thresholds (as scikit-learn does), and the risk–coverage curve, AURC and
selective risk report the *expected* value over a uniformly random order within each tied group.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from tracecal._validation import Interval, check_param
from tracecal.errors import ValidationError

__all__ = [
    "SingleClassWarning",
    "ReliabilityBins",
    "check_labels",
    "check_scores",
    "brier",
    "ece",
    "adaptive_ece",
    "reliability_bins",
    "auroc",
    "auprc",
    "aurc",
    "risk_coverage_curve",
    "selective_risk",
    "compute_all",
    "SELECTIVE_COVERAGES",
    "N_BINS",
    "bin_index",
    "n_covered",
]

SELECTIVE_COVERAGES: dict[str, float] = {"risk@10": 0.1, "risk@50": 0.5, "risk@90": 0.9}
"""Coverages reported by `compute_all` (docs/method.md §5: selective risk at 10/50/90% coverage)."""


class SingleClassWarning(UserWarning):
    """``y`` contains a single class, so a ranking metric (AUROC, AUPRC) is undefined (returned as NaN)."""


# --------------------------------------------------------------------------------------------------
# input validation


def check_labels(y: ArrayLike, name: str = "y") -> NDArray[np.int64]:
    """Validate correctness labels: a non-empty 1-D array of 0/1 (bool, int or float 0.0/1.0).

    Returns the labels as an ``int64`` array. Raises `ValidationError` (a ``ValueError``) with a precise message
    otherwise.
    """
    arr = np.asarray(y)
    if arr.ndim != 1:
        raise ValidationError(f"{name} must be a 1-D array of 0/1 labels, got shape {arr.shape}")
    if arr.size == 0:
        raise ValidationError(f"{name} is empty: need at least one label")
    if arr.dtype == bool:
        return arr.astype(np.int64)
    if arr.dtype.kind not in "iuf":
        raise ValidationError(f"{name} must hold numeric 0/1 labels, got dtype {arr.dtype}")
    bad = ~((arr == 0) | (arr == 1))  # NaN compares False → flagged as invalid
    if bad.any():
        examples = np.unique(arr[bad])[:5].tolist()
        raise ValidationError(
            f"{name} must contain only labels 0 and 1; found {int(bad.sum())} invalid value(s) "
            f"out of {arr.size}, e.g. {examples}"
        )
    return arr.astype(np.int64)


def check_scores(
    score: ArrayLike, n: int | None = None, name: str = "score", prob: bool = False
) -> NDArray[np.float64]:
    """Validate a 1-D array of finite scores (and, with ``prob=True``, that they lie in [0, 1]).

    ``n``, if given, is the required length (the length of the labels). Returns a ``float64`` copy-free
    view where possible. Raises `ValidationError` (a ``ValueError``) on wrong shape/length, emptiness, non-finite
    values (the message says how many) or, for probabilities, values outside [0, 1].
    """
    try:
        arr = np.asarray(score, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"{name} must be numeric: {exc}") from exc
    if arr.ndim != 1:
        raise ValidationError(f"{name} must be a 1-D array, got shape {arr.shape}")
    if n is not None and arr.size != n:
        raise ValidationError(f"labels and {name} have different lengths ({n} vs {arr.size})")
    if arr.size == 0:
        raise ValidationError(f"{name} is empty: need at least one value")
    nonfinite = ~np.isfinite(arr)
    if nonfinite.any():
        n_nan = int(np.isnan(arr).sum())
        raise ValidationError(
            f"{name} contains {int(nonfinite.sum())} non-finite value(s) out of {arr.size} "
            f"({n_nan} NaN, {int(nonfinite.sum()) - n_nan} ±inf); callers must drop or impute them first"
        )
    if prob:
        out = (arr < 0.0) | (arr > 1.0)
        if out.any():
            raise ValidationError(
                f"{name} must be probabilities in [0, 1]; {int(out.sum())} value(s) out of {arr.size} "
                f"lie outside (min={arr.min():.6g}, max={arr.max():.6g})"
            )
    return arr


def _pair(
    y: ArrayLike, score: ArrayLike, name: str = "score", prob: bool = False
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    # Check shapes and lengths before label values so that the first error is the most basic one.
    y_arr = np.asarray(y)
    s_arr = np.asarray(score)
    if y_arr.ndim == 1 and s_arr.ndim == 1 and y_arr.size != s_arr.size:
        raise ValidationError(f"y and {name} have different lengths ({y_arr.size} vs {s_arr.size})")
    labels = check_labels(y_arr)
    return labels, check_scores(s_arr, labels.size, name=name, prob=prob)


N_BINS = Interval(int, 1, None)
"""Bins of a reliability diagram / ECE: a whole number ≥ 1."""


def _check_n_bins(n_bins: int) -> int:
    return int(check_param("n_bins", n_bins, N_BINS))


def _single_class(y: NDArray[np.int64], metric: str) -> bool:
    n_pos = int(y.sum())
    if 0 < n_pos < y.size:
        return False
    warnings.warn(
        f"{metric} is undefined when y has a single class (all {y.size} label(s) are {int(y[0])}); returning NaN",
        SingleClassWarning,
        stacklevel=3,
    )
    return True


def _desc_groups(score: NDArray[np.float64]) -> tuple[NDArray[np.intp], NDArray[np.intp], NDArray[np.intp]]:
    """Stable descending sort and its tied groups: (order, group starts, group sizes)."""
    order = np.argsort(-score, kind="stable")
    s = score[order]
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    sizes = np.diff(np.r_[starts, s.size])
    return order, starts, sizes


# --------------------------------------------------------------------------------------------------
# calibration metrics (on probabilities)


def brier(y: ArrayLike, p: ArrayLike) -> float:
    """Brier score: mean_i (p_i − y_i)²  (lower is better; equals sklearn's ``brier_score_loss``)."""
    yy, pp = _pair(y, p, name="p", prob=True)
    return float(np.mean((pp - yy) ** 2))


def bin_index(p: NDArray[np.float64], n_bins: int) -> NDArray[np.intp]:
    """Equal-width bin of each p: index = min(floor(p·n_bins), n_bins − 1).

    Bin b is [b/n_bins, (b+1)/n_bins), the last one closed at 1. The edges are the floats b/n_bins, and a
    one-step correction makes a p exactly equal to an edge land in the bin that starts there even when
    the product p·n_bins rounds below an integer (e.g. (1/49)·49 = 0.9999999999999999 in float64).
    """
    idx = np.clip(np.floor(p * n_bins).astype(np.intp), 0, n_bins - 1)
    edges = np.arange(n_bins + 1) / n_bins
    idx = idx - ((p < edges[idx]) & (idx > 0))
    idx = idx + ((p >= edges[idx + 1]) & (idx < n_bins - 1))
    return idx


@dataclass(frozen=True)
class ReliabilityBins:
    """Per-bin summary for a reliability diagram (equal-width bins over [0, 1]).

    Arrays have one entry per bin; ``confidence`` and ``accuracy`` are NaN for empty bins.
    """

    lower: NDArray[np.float64]  # bin lower edges b / n_bins
    upper: NDArray[np.float64]  # bin upper edges (b + 1) / n_bins
    count: NDArray[np.int64]  # samples per bin
    confidence: NDArray[np.float64]  # mean p in the bin
    accuracy: NDArray[np.float64]  # mean y in the bin

    @property
    def n(self) -> int:
        """Total number of samples."""
        return int(self.count.sum())

    def ece(self) -> float:
        """Σ_b (n_b / n) · |acc_b − conf_b| over non-empty bins."""
        nz = self.count > 0
        w = self.count[nz] / self.n
        return float(np.sum(w * np.abs(self.accuracy[nz] - self.confidence[nz])))


def reliability_bins(y: ArrayLike, p: ArrayLike, n_bins: int = 10) -> ReliabilityBins:
    """Reliability-diagram bins: count, mean confidence and accuracy in each of ``n_bins`` equal-width bins.

    Bin of p: b = min(floor(p·n_bins), n_bins − 1), i.e. [b/n_bins, (b+1)/n_bins) with the last bin
    closed at 1 (a p exactly on an inner edge goes to the bin starting there).
    """
    n_bins = _check_n_bins(n_bins)
    yy, pp = _pair(y, p, name="p", prob=True)
    idx = bin_index(pp, n_bins)
    count = np.bincount(idx, minlength=n_bins).astype(np.int64)
    sum_p = np.bincount(idx, weights=pp, minlength=n_bins)
    sum_y = np.bincount(idx, weights=yy.astype(np.float64), minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        conf = np.where(count > 0, sum_p / count, np.nan)
        acc = np.where(count > 0, sum_y / count, np.nan)
    edges = np.arange(n_bins + 1) / n_bins
    return ReliabilityBins(edges[:-1], edges[1:], count, conf, acc)


def ece(y: ArrayLike, p: ArrayLike, n_bins: int = 10) -> float:
    """Expected calibration error with ``n_bins`` equal-width bins (docs/method.md §5).

    ECE = Σ_b (n_b / n) · |acc_b − conf_b|, acc_b = mean of y in bin b, conf_b = mean of p in bin b,
    bin b = min(floor(p·n_bins), n_bins − 1) (last bin closed at 1); empty bins contribute 0.
    """
    return reliability_bins(y, p, n_bins).ece()


def adaptive_ece(y: ArrayLike, p: ArrayLike, n_bins: int = 10) -> float:
    """Adaptive (equal-mass) ECE: Σ_g (n_g / n) · |acc_g − conf_g| over equal-count groups.

    Samples are sorted by p and split into ``n_bins`` consecutive groups of near-equal size exactly as
    ``np.array_split`` does (the first n mod n_bins groups get one extra sample); empty groups (when
    n < n_bins) are skipped. Our choice for ties in p: they are ordered by label (0 before 1), so the
    result does not depend on the input order.
    """
    n_bins = _check_n_bins(n_bins)
    yy, pp = _pair(y, p, name="p", prob=True)
    n = yy.size
    order = np.lexsort((yy, pp))  # primary key p, then y
    ps, ys = pp[order], yy[order].astype(np.float64)
    base, extra = divmod(n, n_bins)
    sizes = np.full(n_bins, base, dtype=np.intp)
    sizes[:extra] += 1
    sizes = sizes[sizes > 0]
    starts = np.r_[0, np.cumsum(sizes)[:-1]]
    conf = np.add.reduceat(ps, starts) / sizes
    acc = np.add.reduceat(ys, starts) / sizes
    return float(np.sum(sizes / n * np.abs(acc - conf)))


# --------------------------------------------------------------------------------------------------
# ranking metrics (on raw scores)


def auroc(y: ArrayLike, score: ArrayLike) -> float:
    """Area under the ROC curve via the Mann–Whitney U statistic with average ranks for ties.

    AUROC = (Σ_{i: y_i=1} rank_i − n₁(n₁+1)/2) / (n₁·n₀), ranks 1..n of ``score`` (ties get the mean of
    their ranks) — the probability that a random correct answer outscores a random wrong one, ties
    counting ½. Equals ``sklearn.metrics.roc_auc_score``. Single-class y → NaN + `SingleClassWarning`.
    """
    yy, ss = _pair(y, score)
    if _single_class(yy, "AUROC"):
        return math.nan
    order = np.argsort(ss, kind="stable")
    s = ss[order]
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    ends = np.r_[starts[1:], s.size]  # exclusive; 1-based ranks of a group are starts+1 .. ends
    ranks = np.empty(s.size, dtype=np.float64)
    ranks[order] = np.repeat((starts + 1 + ends) / 2.0, ends - starts)
    n_pos = int(yy.sum())
    n_neg = yy.size - n_pos
    u = ranks[yy == 1].sum() - n_pos * (n_pos + 1) / 2.0
    return float(u / (n_pos * n_neg))


def auprc(y: ArrayLike, score: ArrayLike) -> float:
    """Area under the precision–recall curve as step-wise average precision (positive class = correct).

    AP = Σ_k (R_k − R_{k−1}) · P_k over the distinct score thresholds in decreasing order, where P_k and
    R_k are precision and recall when every sample with score ≥ threshold k is predicted positive
    (R_0 = 0). Tied scores enter together, as in ``sklearn.metrics.average_precision_score``, which this
    equals. Single-class y → NaN + `SingleClassWarning` (sklearn would return 1.0 or warn with 0/NaN).
    """
    yy, ss = _pair(y, score)
    if _single_class(yy, "AUPRC"):
        return math.nan
    order, starts, sizes = _desc_groups(ss)
    tps = np.cumsum(np.add.reduceat(yy[order], starts)).astype(np.float64)
    predicted = (starts + sizes).astype(np.float64)  # samples at or above each threshold
    precision = tps / predicted
    recall = tps / tps[-1]
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def risk_coverage_curve(y: ArrayLike, score: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Risk–coverage curve: for k = 1..n, coverage k/n and the error rate among the k most confident.

    Samples are ordered by ``score`` descending; risk(k) = E_k / k with E_k the number of wrong answers
    (y = 0) among the top k. Ties: when the k-th position falls inside a group of tied scores, E_k is
    its expectation over a uniformly random order within the group, i.e. the errors before the group
    plus (k − start) · (group errors / group size). The curve therefore does not depend on input order
    and is exact at the group boundaries (the distinct thresholds). Returns ``(coverage, risk)``.
    """
    yy, ss = _pair(y, score)
    n = yy.size
    order, starts, sizes = _desc_groups(ss)
    err_sorted = 1.0 - yy[order]
    group_err = np.add.reduceat(err_sorted, starts)
    err_before = np.cumsum(group_err) - group_err
    g = np.repeat(np.arange(starts.size), sizes)  # group of each sorted position
    k = np.arange(1, n + 1, dtype=np.float64)
    expected_err = err_before[g] + (k - starts[g]) * group_err[g] / sizes[g]
    return k / n, expected_err / k


def aurc(y: ArrayLike, score: ArrayLike) -> float:
    """Area under the risk–coverage curve: AURC = (1/n) Σ_{k=1..n} risk(k) (lower is better).

    risk(k) is the error rate among the k most confident samples (see `risk_coverage_curve`). With tied
    scores this is the expected AURC over a uniformly random order inside each tied group (exact: the
    expected error count among the top k is linear within a group), so it is order-independent.
    """
    _, risk = risk_coverage_curve(y, score)
    return float(np.mean(risk))


def n_covered(coverage: float, n: int) -> int:
    """k = ⌈coverage·n⌉ (at least 1, at most n): how many of n answers a coverage answers (relative tolerance 1e-12
    on the product, so that 0.1·30 gives 3); ``ValueError`` unless coverage ∈ (0, 1]."""
    if not (isinstance(coverage, int | float | np.floating | np.integer) and 0.0 < coverage <= 1.0):
        raise ValidationError(f"coverage must be a number in (0, 1], got {coverage!r}")
    # ceil with a relative tolerance so that float products like 0.1 * 30 (= 3.0000000000000004) give 3.
    k = math.ceil(float(coverage) * n * (1.0 - 1e-12))
    return min(max(k, 1), n)


def selective_risk(y: ArrayLike, score: ArrayLike, coverage: float) -> float:
    """Selective risk at a coverage: error rate among the top k = ceil(coverage·n) most confident samples.

    k is at least 1. Ties at the cut-off are handled as in `risk_coverage_curve` (expected error count
    under a random order within the tied group), so selective_risk(y, s, c) = risk(k).
    """
    yy, ss = _pair(y, score)
    k = n_covered(coverage, yy.size)
    _, risk = risk_coverage_curve(yy, ss)
    return float(risk[k - 1])


# --------------------------------------------------------------------------------------------------
# all at once


def compute_all(y: ArrayLike, score: ArrayLike, prob: ArrayLike, n_bins: int = 10) -> dict[str, float]:
    """Every docs/method.md §5 metric for one method on one split.

    ``score`` (raw confidence) feeds the ranking metrics: "auroc", "auprc", "aurc", "risk@10",
    "risk@50", "risk@90"; ``prob`` (calibrated P(correct)) feeds "brier", "ece", "aece" (``n_bins``
    bins each). Also "base_rate" = mean(y), "n" and "n_correct" = Σ y (returned as ints).
    AUROC/AUPRC are NaN (with a `SingleClassWarning`) when y has a single class.
    """
    yy, ss = _pair(y, score, name="score")
    _, pp = _pair(yy, prob, name="prob", prob=True)
    coverage, risk = risk_coverage_curve(yy, ss)
    out: dict[str, float] = {
        "brier": brier(yy, pp),
        "ece": ece(yy, pp, n_bins),
        "aece": adaptive_ece(yy, pp, n_bins),
        "auroc": auroc(yy, ss),
        "auprc": auprc(yy, ss),
        "aurc": float(np.mean(risk)),
    }
    for key, c in SELECTIVE_COVERAGES.items():
        out[key] = float(risk[n_covered(c, yy.size) - 1])
    out["base_rate"] = float(yy.mean())
    out["n"] = int(yy.size)
    out["n_correct"] = int(yy.sum())
    return out
