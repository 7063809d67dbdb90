"""One estimator scored on all S calibration / evaluation splits of a task at once: the protocol's inner loop.

`tracecal.evaluation.protocol` hands each estimator here with the task's splits (`SplitSet`, the S splits of
`tracecal.stats.splits.stratified_split` stacked: every split of a task has the same sizes). What is computed:

* a **label-free** score (its raw score over the whole task is given): one stable sort of the task's scores
  serves every split — the evaluation answers of each split in score order (`tracecal.stats.split_metrics.restrict`)
  for the ranking metrics, the calibration answers in decreasing score for the selective threshold (its sort is
  then linear), and the bootstrap's layout of the answers in score order (`tracecal.stats.boot_draws`);
* a **fitted** score (``needs_fit``): fitted on each calibration split as before; a TRACE+-style calibrator
  (`FittedModelEstimator` of a trace-feature calibrator) on its feature matrix computed once per task and sliced
  per split (`Fits`), the same numbers as from the traces (the features of an answer do not depend on the batch);
* probabilities (`calibrate_rows`): Platt on every split at once (`platt_rows`, below), another calibrator split by
  split, a self-calibrated score clipped to [0, 1];
* every metric of every split in one call (`tracecal.stats.split_metrics.split_metrics`).

Platt (`platt_rows`) is `tracecal.calibrators.PlattCalibrator`'s fit itself (`tracecal.calibrators.logistic`: the
score standardised on the split, logistic regression with the slope penalty w²/(2C), C = 1e6, solved by Newton's
method to its optimum), run on all S splits together; a single class gives its base rate. Until both used it,
`PlattCalibrator` fitted with scikit-learn's L-BFGS, which stops at its gradient tolerance 1e-4: the probabilities
differed by a median 2e-5, up to 1.5e-2 on nearly separable random problems (tests/evaluation/test_splitscore.py).
"""

from __future__ import annotations

import math
import warnings
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
from scipy.special import expit

from tracecal.calibrators import make_calibrator
from tracecal.calibrators.logistic import platt_rows
from tracecal.estimators import REGISTRY, FittedModelEstimator, Inputs, get_estimator
from tracecal.stats.boot_draws import sorted_split_draws, split_order_draws
from tracecal.stats.metrics import compute_all
from tracecal.stats.selective import ltt_threshold, min_answered, selective_outcome
from tracecal.stats.split_metrics import restrict, sort_rows, split_metrics
from tracecal.stats.splits import threshold_split
from tracecal.traces.trace import TraceBatch

__all__ = [
    "sanitize",
    "SplitSet",
    "platt_rows",
    "calibrate_rows",
    "Fits",
    "Scored",
    "score_label_free",
    "score_fitted",
    "selective_threshold",
    "one_split",
]


def sanitize(x: np.ndarray) -> tuple[np.ndarray, int]:
    """Map NaN/−inf to just below the least confident finite score and +inf to the most confident one; (scores,
    how many were mapped)."""
    x = np.asarray(x, dtype=np.float64).copy()
    bad = ~np.isfinite(x)
    if not bad.any():
        return x, 0
    fin = x[~bad]
    lo = fin.min() if fin.size else 0.0
    hi = fin.max() if fin.size else 0.0
    span = max(hi - lo, 1e-12)
    x[np.isnan(x) | (x == -np.inf)] = lo - 1e-6 * span
    x[x == np.inf] = hi
    return x, int(bad.sum())


@dataclass
class SplitSet:
    """A task's S splits: ``pairs`` as drawn ((cal, ev) positions, sorted), stacked into ``cal`` (S, m_cal) and
    ``ev`` (S, m_ev), and as (S, n) membership masks ``in_cal`` / ``in_ev``."""

    pairs: list[tuple[np.ndarray, np.ndarray]]
    n: int
    cal: np.ndarray = field(init=False)
    ev: np.ndarray = field(init=False)
    in_cal: np.ndarray = field(init=False)
    in_ev: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.cal = np.stack([c for c, _ in self.pairs])
        self.ev = np.stack([e for _, e in self.pairs])
        rows = np.arange(len(self.pairs))[:, None]
        self.in_cal, self.in_ev = np.zeros((2, len(self.pairs), self.n), dtype=bool)
        self.in_cal[rows, self.cal], self.in_ev[rows, self.ev] = True, True


def calibrate_rows(name: str, calibrator: str, raw_cal: np.ndarray, y_cal: np.ndarray, raw: np.ndarray) -> np.ndarray:
    """Probabilities of scores ``raw`` (S, m) from the calibrator fitted on each row of ``raw_cal`` / ``y_cal``
    (S, m_cal): a self-calibrated estimator's scores clipped to [0, 1]; Platt by `platt_rows`; another calibrator
    fitted split by split (on scores it prepares from the calibration split, `ScalarCalibrator.prepare_scores`)."""
    if REGISTRY[name].self_calibrated:
        return np.clip(raw, 0.0, 1.0)
    if calibrator == "platt":
        mean, scale, a, w, constant = platt_rows(raw_cal, y_cal)
        p = np.clip(expit(a[:, None] + w[:, None] * ((raw - mean[:, None]) / scale[:, None])), 0.0, 1.0)
        fixed = ~np.isnan(constant)
        p[fixed] = constant[fixed, None]
        return p
    out = np.empty(raw.shape)
    for r in range(len(raw)):
        calib = make_calibrator(calibrator)
        cal_s, ev_s = calib.prepare_scores(raw_cal[r], raw[r])
        out[r] = calib.fit(cal_s, y_cal[r]).predict_proba(ev_s)
    return out


class _LazyStats(Mapping[str, np.ndarray]):
    """The stats of `RowsOf`: each selected when first read."""

    def __init__(self, parent: Inputs, rows: np.ndarray) -> None:
        self.parent, self.rows = parent, rows
        self.done: dict[str, np.ndarray] = {}

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self.done:
            x, parent = self.parent.stats[name], self.parent
            if len(x) == len(parent) != len(parent.batch.surprisal):  # one value (or vector) per answer
                self.done[name] = x[self.rows]
            else:  # perhaps one value per token: as Inputs.select does it
                self.done[name] = Inputs(parent.batch, None, {name: x}).select(self.rows).stats[name]
        return self.done[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.parent.stats)

    def __len__(self) -> int:
        return len(self.parent.stats)


class RowsOf(Inputs):
    """``parent.select(rows)`` (`tracecal.estimators.Inputs.select`) whose parts are selected when first read: an
    estimator fitted on the beam scores alone (beam_ratio) does not pay for selecting the traces and token stats on
    every split."""

    def __init__(self, parent: Inputs, rows: np.ndarray) -> None:
        self.parent, self.rows = parent, np.asarray(rows, dtype=np.int64)
        self.stats = _LazyStats(parent, self.rows)  # type: ignore[assignment]  # a read-only mapping

    @cached_property
    def batch(self) -> TraceBatch:  # type: ignore[override]  # computed on first use
        return self.parent.batch.select(self.rows)

    @cached_property
    def traces(self) -> list[Any] | None:  # type: ignore[override]  # computed on first use
        return None if self.parent.traces is None else [self.parent.traces[i] for i in self.rows]


class Fits:
    """Estimator ``name`` fitted on rows of a task and fitted ones scored on rows (scores sanitised per call, as the
    protocol always did). A `FittedModelEstimator` whose model is a trace-feature calibrator (it has ``matrix``) is
    fitted on rows of its feature matrix, computed once per task."""

    def __init__(self, name: str, data: Any, features: bool = True) -> None:
        self.name, self.data = name, data
        cls: Any = REGISTRY[name]
        self.matrix: np.ndarray | None = None
        plain = issubclass(cls, FittedModelEstimator) and (cls.fit, cls.score) == (
            FittedModelEstimator.fit,
            FittedModelEstimator.score,
        )
        if features and plain and hasattr(cls.model_class, "matrix"):
            self.matrix = cls.model_class(**get_estimator(name).get_params()).matrix(data.inputs.batch)

    def fit(self, rows: np.ndarray) -> Any:
        est: Any = get_estimator(self.name)
        y = self.data.y[rows]
        if self.matrix is None:
            return est.fit(RowsOf(self.data.inputs, rows), y)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # as FittedModelEstimator.fit
            est.model_ = type(est).model_class(**est.get_params()).fit(self.matrix[rows], y)
        return est

    def score(self, est: Any, rows: np.ndarray) -> np.ndarray:
        if self.matrix is None:
            return sanitize(est.score(RowsOf(self.data.inputs, rows)))[0]
        return sanitize(np.asarray(est.model_.predict_proba(self.matrix[rows])))[0]


@dataclass
class Scored:
    """One estimator on every split: ``metrics`` (name → S values), seed 0's raw scores and probabilities on its
    evaluation split (in its order), and ``boot``: the bootstrap draws of the split-mean AUROC and Brier
    ({"auroc", "brier"}: (B,) each) from the task's resample counts (`tracecal.stats.boot_draws`)."""

    metrics: dict[str, list[float]]
    raw0: np.ndarray
    prob0: np.ndarray
    boot: Callable[[np.ndarray], dict[str, np.ndarray]]


def _finish(m: dict[str, np.ndarray], y: np.ndarray, sp: SplitSet, sel: list[dict[str, float]]) -> dict[str, list]:
    out = {k: v.tolist() for k, v in m.items()}
    out["n_correct_cal"] = y[sp.cal].sum(axis=1).tolist()
    out["n_cal"] = [sp.cal.shape[1]] * len(sp.pairs)
    for k in sel[0]:
        out[k] = [s[k] for s in sel]
    return out


def ltt_descending(conf: np.ndarray, y: np.ndarray, alpha: float, delta: float) -> float:
    """``ltt_threshold(conf, y, alpha, delta).threshold`` for calibration scores ``conf`` in decreasing order, from
    growing prefixes: the fixed sequence tests the most confident thresholds first and stops at its first failure,
    so a prefix that ends at a tie boundary and holds a failure gives the same threshold (its thresholds, answer and
    error counts are the full set's first ones); only when every threshold of the prefix is rejected does it grow
    (×4). The binomial tails beyond the first failure are never computed."""
    n, k = conf.size, max(512, 4 * min_answered(alpha, delta))
    while k < n:
        cut = k + int(np.argmax(conf[k:] != conf[k - 1])) if conf[-1] != conf[k - 1] else n  # the tie's end
        if cut >= n:
            break
        t = ltt_threshold(conf[:cut], y[:cut], alpha, delta).threshold
        if t != conf[cut - 1]:  # the sequence stopped inside the prefix
            return t
        k *= 4
    return ltt_threshold(conf, y, alpha, delta).threshold


def score_label_free(name: str, raw: np.ndarray, y: np.ndarray, sp: SplitSet, cfg: Any) -> Scored:
    """A label-free estimator with raw scores ``raw`` over the task (module docstring): one sort for all splits."""
    order = np.argsort(raw, kind="stable")
    idx = restrict(order, sp.in_ev)  # each split's evaluation answers by ascending score
    ys, rs = y[idx], raw[idx]
    prob = calibrate_rows(name, cfg.calibrator, raw[sp.cal], y[sp.cal], rs)
    cal_desc = restrict(order, sp.in_cal)[:, ::-1]  # decreasing: the threshold's sort is then linear
    sel = []
    for r in range(len(sp.pairs)):
        t = ltt_descending(raw[cal_desc[r]], y[cal_desc[r]], cfg.sel_alpha, cfg.sel_delta)
        sel.append(selective_outcome(rs[r], ys[r], t, cfg.sel_alpha))
    m = _finish(split_metrics(ys, rs, prob, cfg.n_bins), y, sp, sel)
    raw0, prob0 = np.empty(sp.ev.shape[1]), np.empty(sp.ev.shape[1])
    at = np.searchsorted(sp.ev[0], idx[0])
    raw0[at], prob0[at] = rs[0], prob[0]
    sq_err = (prob - ys) ** 2
    return Scored(m, raw0, prob0, lambda W: sorted_split_draws(y, raw, order, sp.in_ev, idx, sq_err, W))


def score_fitted(name: str, data: Any, sp: SplitSet, cfg: Any, fits: Fits) -> Scored:
    """A fitted estimator (``needs_fit``): fitted on each calibration split, scored on it and on its evaluation
    split, the selective threshold from a refit on part of the split (`selective_threshold`)."""
    y = data.y
    raw_cal, raw_ev, sel = np.empty(sp.cal.shape), np.empty(sp.ev.shape), []
    for r, (cal, ev) in enumerate(sp.pairs):
        est = fits.fit(cal)
        raw_cal[r], raw_ev[r] = fits.score(est, cal), fits.score(est, ev)
        t, sel_est = selective_threshold(name, data, cal, cfg, raw_cal[r], est, fits)
        sel_ev = raw_ev[r] if sel_est is est else fits.score(sel_est, ev)
        sel.append(selective_outcome(sel_ev, y[ev], t, cfg.sel_alpha))
    prob = calibrate_rows(name, cfg.calibrator, raw_cal, y[sp.cal], raw_ev)
    rs, ys, ps = sort_rows(raw_ev, y[sp.ev], prob)
    m = _finish(split_metrics(ys, rs, ps, cfg.n_bins), y, sp, sel)
    sq_err = (prob - y[sp.ev]) ** 2
    return Scored(m, raw_ev[0], prob[0], lambda W: split_order_draws(y, sp.ev, raw_ev, sq_err, W))


def selective_threshold(
    name: str, data: Any, cal: np.ndarray, cfg: Any, raw_cal: np.ndarray, fitted: Any = None, fits: Fits | None = None
) -> tuple[float, Any]:
    """The Learn-then-Test threshold t of estimator ``name``'s raw score (`tracecal.stats.selective`) on
    calibration split ``cal``, and the fitted estimator whose score it applies to (None: the label-free score
    ``raw_cal``).

    A label-free score: t on the whole calibration split. A fitted one (``needs_fit``): with ``cfg.sel_holdout`` =
    h > 0, refitted on a random 1 − h of the split and t chosen on the other h (`threshold_split`), so that the
    guarantee is strict; with h = 0, t on the split ``fitted`` was fitted on (no guarantee: the old behaviour).
    ``fits``: how to fit and score (default: through the estimator's own ``fit`` / ``score``).
    """
    if cfg.sel_holdout > 0 and len(cal) < 2 and REGISTRY[name].needs_fit:  # no answer to hold out (a tiny run):
        return math.inf, fitted  # nothing certified, as Learn-then-Test says of so few answers
    y = data.y
    if not REGISTRY[name].needs_fit:
        return ltt_threshold(raw_cal, y[cal], cfg.sel_alpha, cfg.sel_delta).threshold, None
    fits = fits or Fits(name, data, features=False)
    if cfg.sel_holdout == 0:
        est = fitted if fitted is not None else fits.fit(cal)
        raw, thr = fits.score(est, cal), np.arange(len(cal))
    else:
        fit, thr = threshold_split(y[cal], cfg.sel_holdout, seed=(cfg.seed, zlib.crc32(cal.tobytes())))
        est = fits.fit(cal[fit])
        raw = fits.score(est, cal[thr])
    return ltt_threshold(raw, y[cal[thr]], cfg.sel_alpha, cfg.sel_delta).threshold, est


def one_split(
    name: str, data: Any, raw_all: np.ndarray | None, cal: np.ndarray, ev: np.ndarray, cfg: Any
) -> tuple[dict[str, float], np.ndarray, np.ndarray]:
    """Metrics of one estimator on one split, the protocol's numbers for that split (`tracecal.evaluation.protocol`
    scores all splits at once, above); returns (metrics, raw eval scores, eval probabilities)."""
    y, est, fits = data.y, None, Fits(name, data, features=False)
    if raw_all is None:  # an estimator that fits something on the calibration split
        est = fits.fit(cal)
        raw_cal, raw_ev = fits.score(est, cal), fits.score(est, ev)
    else:
        raw_cal, raw_ev = raw_all[cal], raw_all[ev]
    prob = calibrate_rows(name, cfg.calibrator, raw_cal[None], y[cal][None], raw_ev[None])[0]
    m = compute_all(y[ev], raw_ev, prob, n_bins=cfg.n_bins)
    m["n_correct_cal"] = int(y[cal].sum())
    m["n_cal"] = len(cal)
    t, sel_est = selective_threshold(name, data, cal, cfg, raw_cal, est, fits)  # answer iff raw score ≥ t
    sel_ev = raw_ev if sel_est is est else fits.score(sel_est, ev)
    m.update(selective_outcome(sel_ev, y[ev], t, cfg.sel_alpha))
    return m, raw_ev, prob
