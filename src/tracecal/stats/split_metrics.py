"""Every docs/method.md §5 metric of one method on S evaluation splits at once, from rows already sorted by score.

The protocol scores each estimator on S (= 20) evaluation splits of one task. The ranking metrics depend on the
order of the scores only, so one sort of the task's scores serves every split: `restrict` keeps, in sorted order,
the answers of each split (an (S, m) matrix of task positions; every split has the same size m), and the metrics
below work on rows sorted by score, for all S rows at once (flattened, with a group boundary at every row start):

* tied scores form groups (equal neighbours in a sorted row); AUROC = (Σ_{y=1} rank − n₁(n₁+1)/2) / (n₁·n₀) with
  the average rank of a group, (a + 1 + a + size)/2 for a group starting at ascending position a;
* AUPRC = Σ_g (R_g − R_{g−1})·P_g over the groups in decreasing score, P_g / R_g the precision / recall of
  answering every answer scoring ≥ group g;
* the risk–coverage curve: risk(k) = E_k / k over the positions k = 1 … m in decreasing score, E_k = the errors of
  the groups before k's group + (k − its start)·(its errors / its size) (expected over the orders inside a tie);
  AURC = mean_k risk(k), risk@c = risk(⌈c·m⌉);
* Brier = mean (p − y)², ECE from the equal-width bins of `tracecal.stats.metrics.bin_index` (one ``bincount``
  for all rows), adaptive ECE from the rows ordered by p and, inside a tie of p, wrong answers first (a
  probability that is a monotone function of the score needs no sort: `by_probability`).

The arithmetic is that of `tracecal.stats.metrics` (the same formulas on the same integers), so each value equals
`tracecal.stats.metrics.compute_all` on the split: exactly for AUROC, AURC, the selective risks and AECE, to a few
units in the last place where a float sum runs in another order (AUPRC, Brier, ECE; tests/stats/test_split_metrics.py).
A row with a single class gets NaN AUROC and AUPRC (with one `SingleClassWarning`).
"""

from __future__ import annotations

import warnings

import numpy as np
from numpy.typing import NDArray

from tracecal.errors import ValidationError
from tracecal.stats.metrics import SELECTIVE_COVERAGES, SingleClassWarning, bin_index, n_covered

__all__ = ["restrict", "sort_rows", "ranking_rows", "calibration_rows", "by_probability", "split_metrics"]


def restrict(order: NDArray[np.intp], member: NDArray[np.bool_]) -> NDArray[np.intp]:
    """The entries of ``order`` (task positions, e.g. in score order) that are members of each row of ``member``
    ((S, n) booleans), in the same order: shape (S, m). Every row must have m members."""
    keep = member[:, order]
    m = int(keep[0].sum()) if len(keep) else 0
    if not np.all(keep.sum(axis=1) == m):
        raise ValidationError("restrict: the splits have different sizes")
    return np.broadcast_to(order, member.shape)[keep].reshape(len(member), m)


def sort_rows(score: NDArray[np.float64], *others: NDArray) -> tuple[NDArray, ...]:
    """``score`` and each of ``others`` ((S, m) each) with every row ordered by ascending score (stable)."""
    order = np.argsort(score, axis=1, kind="stable")
    return tuple(np.take_along_axis(x, order, axis=1) for x in (score, *others))


def _groups(x: NDArray) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
    """(starts, sizes) of the runs of equal values of each row of ``x`` (S, m), as positions in ``x.ravel()``."""
    flat = x.ravel()
    brk = np.empty(flat.size, dtype=bool)
    brk[:1] = True
    np.not_equal(flat[1:], flat[:-1], out=brk[1:])
    brk[:: x.shape[1]] = True
    starts = np.flatnonzero(brk)
    return starts, np.diff(np.append(starts, flat.size))


def ranking_rows(y: NDArray[np.int64], score: NDArray[np.float64]) -> dict[str, NDArray[np.float64]]:
    """AUROC, AUPRC, AURC and the selective risks of `SELECTIVE_COVERAGES` of each row (module docstring); ``y``
    and ``score`` (S, m) with every row sorted by ascending score."""
    S, m = y.shape
    yd, sd = y[:, ::-1].ravel(), np.ascontiguousarray(score[:, ::-1])  # decreasing score, as the curves run
    starts, sizes = _groups(sd)
    first = np.searchsorted(starts, np.arange(S) * m)  # each row's first group
    row = np.repeat(np.arange(S), np.diff(np.append(first, starts.size)))
    c0 = starts - row * m  # where the group starts in its row
    through = np.cumsum(yd)[starts + sizes - 1]  # correct answers up to the group's end (all rows)
    gpos = np.diff(through, prepend=0)
    n1 = y.sum(axis=1)
    n0 = m - n1
    tps = through - (np.cumsum(n1) - n1)[row]  # correct answers of the row scoring ≥ the group
    gerr, err_before = sizes - gpos, c0 - (tps - gpos)
    a0 = m - (c0 + sizes)  # where the group starts in ascending order
    rank_sum = np.add.reduceat(gpos * ((a0 + 1 + (a0 + sizes)) / 2.0), first)
    with np.errstate(invalid="ignore", divide="ignore"):
        auroc = (rank_sum - n1 * (n1 + 1) / 2.0) / (n1 * n0)
        recall = tps / n1[row].astype(np.float64)
        precision = tps / (c0 + sizes).astype(np.float64)
    prev = np.append(0.0, recall[:-1])
    prev[first] = 0.0
    auprc = np.add.reduceat((recall - prev) * precision, first)
    g = np.repeat(np.arange(starts.size), sizes)
    k = np.tile(np.arange(1, m + 1, dtype=np.float64), S)
    risk = ((err_before[g].astype(np.float64) + (k - c0[g]) * gerr[g].astype(np.float64) / sizes[g]) / k).reshape(S, m)
    single = (n1 == 0) | (n0 == 0)
    if single.any():
        warnings.warn(
            f"AUROC and AUPRC are undefined on {int(single.sum())} of {S} split(s) with a single class; NaN",
            SingleClassWarning,
            stacklevel=2,
        )
        auroc[single], auprc[single] = np.nan, np.nan
    out = {"auroc": auroc, "auprc": auprc, "aurc": risk.mean(axis=1)}
    for key, c in SELECTIVE_COVERAGES.items():
        out[key] = risk[:, n_covered(c, m) - 1].copy()
    return out


def by_probability(y: NDArray[np.int64], p: NDArray[np.float64]) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """``y`` and ``p`` (S, m) with every row in ascending p and, inside a tie of p, wrong answers first — the order
    `tracecal.stats.metrics.adaptive_ece` uses. A row already non-decreasing (a probability that is a monotone
    function of the score, rows sorted by score) or non-increasing (reversed) needs no sort; other rows are sorted."""
    p, y = p.copy(), y.copy()
    d = np.diff(p, axis=1)
    down = ~np.all(d >= 0, axis=1) & np.all(d <= 0, axis=1)
    p[down], y[down] = p[down, ::-1], y[down, ::-1]
    for r in np.flatnonzero(~np.all(np.diff(p, axis=1) >= 0, axis=1)):
        o = np.lexsort((y[r], p[r]))
        p[r], y[r] = p[r, o], y[r, o]
    starts, sizes = _groups(p)  # runs of equal p: their wrong answers first
    if starts.size == p.size:  # no tie
        return y, p
    wrong = sizes - np.diff(np.cumsum(y.ravel())[starts + sizes - 1], prepend=0)
    at = np.arange(p.size) - np.repeat(starts, sizes)
    return (at >= np.repeat(wrong, sizes)).astype(np.int64).reshape(p.shape), p


def calibration_rows(y: NDArray[np.int64], p: NDArray[np.float64], n_bins: int = 10) -> dict[str, NDArray[np.float64]]:
    """Brier, ECE and adaptive ECE (``n_bins`` bins) of each row of ``y`` and ``p`` (S, m), any order within a row
    (`by_probability` orders them for the adaptive ECE)."""
    S, m = y.shape
    yf = y.astype(np.float64)
    key = (np.arange(S)[:, None] * n_bins + bin_index(p, n_bins)).ravel()
    count = np.bincount(key, minlength=S * n_bins).reshape(S, n_bins)
    sum_p = np.bincount(key, weights=p.ravel(), minlength=S * n_bins).reshape(S, n_bins)
    sum_y = np.bincount(key, weights=yf.ravel(), minlength=S * n_bins).reshape(S, n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        gap = np.abs(sum_y / count - sum_p / count)
    ece = np.where(count > 0, count / m * gap, 0.0).sum(axis=1)
    ys, ps = by_probability(y, p)
    base, extra = divmod(m, n_bins)
    sizes = np.full(n_bins, base, dtype=np.intp)
    sizes[:extra] += 1
    sizes = sizes[sizes > 0]
    at = (np.arange(S)[:, None] * m + (np.cumsum(sizes) - sizes)).ravel()
    conf = np.add.reduceat(ps.ravel(), at).reshape(S, -1) / sizes
    acc = np.add.reduceat(ys.ravel().astype(np.float64), at).reshape(S, -1) / sizes
    aece = (sizes / m * np.abs(acc - conf)).sum(axis=1)
    return {"brier": ((p - y) ** 2).mean(axis=1), "ece": ece, "aece": aece}


def split_metrics(
    y: NDArray[np.int64], score: NDArray[np.float64], prob: NDArray[np.float64], n_bins: int = 10
) -> dict[str, NDArray[np.float64]]:
    """Every metric of `tracecal.stats.metrics.compute_all` for each row: ``y``, ``score`` (raw confidence) and
    ``prob`` (calibrated P(correct)) of shape (S, m), every row sorted by ascending score; each value an (S,)
    array (``n`` and ``n_correct`` too)."""
    y = np.asarray(y, dtype=np.int64)
    if y.ndim != 2 or score.shape != y.shape or prob.shape != y.shape or y.shape[1] == 0:
        raise ValidationError(
            f"y, score and prob must be (S, m) with m ≥ 1, got {y.shape}, {score.shape}, {prob.shape}"
        )
    if not (np.isfinite(score).all() and np.isfinite(prob).all() and ((y == 0) | (y == 1)).all()):
        raise ValidationError("split_metrics needs labels in {0, 1} and finite scores and probabilities")
    if prob.min() < 0 or prob.max() > 1:
        raise ValidationError(f"prob must lie in [0, 1], got {prob.min():g} … {prob.max():g}")
    out = calibration_rows(y, prob, n_bins) | ranking_rows(y, score)
    n1 = y.sum(axis=1)
    out |= {"base_rate": n1 / y.shape[1], "n": np.full(len(y), y.shape[1]), "n_correct": n1}
    return out
