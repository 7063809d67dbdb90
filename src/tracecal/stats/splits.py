"""The calibration / evaluation splits of labelled answers: one module for every split tracecal draws.

Each split returns the positions of two parts, both sorted: the part drawn (calibration, or the threshold part)
and the rest (`partition`). Three draws, each for its own reason:

* `stratified_split` (the protocol, docs/method.md §5): a share ``cal_frac`` of each class, round(cal_frac·n_c) of the
  n_c answers of class c, from ``numpy.random.default_rng(seed)``: one permutation per class (wrong answers
  first); a purely random share when a class has fewer than 2 answers.
* `stratified_draw` (learning curves): a calibration set of a given ``size`` with round(size·n₁/n) correct
  answers (at least 1, and never all of them), drawn without replacement from a caller's generator.
* `threshold_split` (selective answering): a simple random sample of round(holdout·n) answers, not stratified on
  purpose (the binomial test of `tracecal.stats.selective` treats the part as i.i.d. draws).

>>> import numpy as np
>>> y = np.array([0, 0, 0, 1, 1, 1, 1, 0])
>>> cal, ev = stratified_split(y, 0.5, seed=0)
>>> len(cal), int(y[cal].sum()), sorted([*cal, *ev]) == list(range(8))
(4, 2, True)
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from tracecal._validation import Interval
from tracecal.stats.metrics import check_labels
from tracecal.stats.selective import check_holdout

__all__ = ["MAX_SPLITS", "SPLITS", "partition", "stratified_split", "stratified_draw", "threshold_split"]

Split = tuple[NDArray[np.intp], NDArray[np.intp]]
MAX_SPLITS = 10_000
SPLITS = Interval(int, 1, MAX_SPLITS)
"""How many calibration / evaluation splits a setting may ask (``--seeds``, ``--splits``): 1 … `MAX_SPLITS`. The
protocol uses 20; a mean ± sd over more moves no printed digit, and every split holds its own row of each metric
(10⁹ splits were a MemoryError)."""


def partition(chosen: ArrayLike, n: int) -> Split:
    """(the positions ``chosen``, every other position of 0 … n − 1), both sorted."""
    mask = np.zeros(n, dtype=bool)
    mask[np.asarray(chosen, dtype=np.intp)] = True
    return np.flatnonzero(mask), np.flatnonzero(~mask)


def stratified_split(y: np.ndarray, cal_frac: float, seed: Any) -> Split:
    """Positions of a stratified calibration / evaluation split (random when a class has < 2 members)."""
    rng = np.random.default_rng(seed)
    classes = [np.flatnonzero(y == c) for c in (0, 1)]
    if min(len(c) for c in classes) < 2:
        return partition(rng.permutation(len(y))[: int(round(cal_frac * len(y)))], len(y))
    cal = [rng.permutation(c)[: int(round(cal_frac * len(c)))] for c in classes]
    return partition(np.concatenate(cal), len(y))


def stratified_draw(y: np.ndarray, size: int, rng: np.random.Generator) -> Split:
    """(calibration, evaluation) positions: ``size`` answers, round(size·n₁/n) of them correct (≥ 1, < n₁)."""
    pos, neg = np.flatnonzero(y == 1), np.flatnonzero(y == 0)
    k = int(min(max(round(size * pos.size / y.size), 1), pos.size - 1))
    cal = np.concatenate([rng.choice(pos, k, replace=False), rng.choice(neg, size - k, replace=False)])
    return partition(cal, y.size)


def threshold_split(correct: ArrayLike, holdout: float, seed: Any = 0) -> Split:
    """(fit, threshold) positions of the labelled answers: a simple random sample of round(holdout·n) of them
    (at least 1, and at most n − 1, when n ≥ 2 and holdout > 0) is the threshold part (`numpy.random.default_rng`
    (seed)). Not stratified on purpose: the binomial test treats the threshold part as i.i.d. draws, which a random
    subset of an i.i.d. sample is, and a subset with the class counts fixed is not."""
    check_holdout(holdout)
    n = check_labels(correct, "correct").size
    k = int(round(holdout * n))
    if holdout > 0 and n >= 2:
        k = min(max(k, 1), n - 1)
    thr, fit = partition(np.random.default_rng(seed).permutation(n)[:k], n)
    return fit, thr
