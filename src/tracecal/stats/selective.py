"""Selective answering with a guarantee: a Learn-then-Test confidence threshold (binomial tail bound).

Answer a question iff its confidence c ≥ t. The selective risk of a threshold is R(t) = P(wrong | c ≥ t), its
coverage P(c ≥ t). From a calibration set we choose t̂ such that **P(R(t̂) ≤ α) ≥ 1 − δ** over the draw of the
calibration set (Angelopoulos, Bates, Candès, Jordan, Lei 2021, "Learn then Test"):

* candidate thresholds t_1 > t_2 > … are the distinct calibration confidences, most confident first; for t_j,
  n_j calibration answers have c ≥ t_j and k_j of them are wrong;
* null hypothesis H_j: R(t_j) > α. Given n_j, k_j is Binomial(n_j, R(t_j)), so the binomial tail
  p_j = P(Binomial(n_j, α) ≤ k_j) = ``scipy.stats.binom.cdf(k_j, n_j, α)`` is a valid p-value (the cdf falls
  as R grows);
* fixed-sequence testing: reject H_1, H_2, … while p_j ≤ δ and stop at the first p_j > δ; the sequence is fixed
  before looking at the labels, so the chance of rejecting any true null is ≤ δ with no multiplicity
  correction. t̂ is the last (lowest) rejected threshold; if none is rejected, t̂ = +∞ (answer nothing).
  Thresholds answering fewer than n_min = ⌈log δ / log(1 − α)⌉ calibration answers are left out of the
  sequence: even with no error their p-value (1 − α)^n exceeds δ, and testing them first would end the sequence
  at once.

The thresholds are calibration scores (label-free), as in Geifman & El-Yaniv's SGR; the binomial test conditions
on the number answered. The guarantee needs the calibration answers to be exchangeable with new ones *given the
score function*: true for a label-free score, false for a score fitted on the same answers (TRACE+ ranks its own
training answers too well, so their error rate at a threshold understates the population's). For a fitted score,
`tracecal.stats.splits.threshold_split` holds out a random share ``holdout`` of the calibration answers: the score
is fitted on the rest and the threshold chosen on the held-out part, where the fitted score is a fixed function
of independent answers — the guarantee then holds conditionally on the fit part, hence also unconditionally.
(Cross-fitting — out-of-fold scores from K models — would not do: the deployed model is none of the K.)

The *naive* rule `empirical_threshold` — the lowest threshold whose calibration error
rate is ≤ α — has no guarantee: its risk exceeds α about half the time when R(t) crosses α smoothly
(tests/stats/test_selective.py measures both). `guaranteed_threshold` is the one-number entry point (e.g. for a
gateway); `selective_outcome` scores a threshold on new answers (coverage, realised risk).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.stats import binom

from tracecal._validation import Interval, check_param
from tracecal.stats.metrics import check_labels, check_scores

__all__ = [
    "SelectiveThreshold",
    "ltt_threshold",
    "empirical_threshold",
    "guaranteed_threshold",
    "selective_outcome",
    "min_answered",
    "check_alpha_delta",
    "check_holdout",
    "ALPHA",
    "DELTA",
    "HOLDOUT",
]


ALPHA = Interval(float, 0, 1, closed="neither")
"""α, the error rate allowed among answered questions: in (0, 1)."""
DELTA = Interval(float, 0, 1, closed="neither")
"""δ, the allowed probability of a realised risk above α: in (0, 1)."""
HOLDOUT = Interval(float, 0, 1, closed="left")
"""The share of the calibration answers a fitted score's threshold is chosen on: in [0, 1) (0: no holdout)."""


def check_alpha_delta(alpha: Any, delta: Any) -> None:
    """`ValidationError` (a ``ValueError``) unless α (the risk bound) and δ (the failure probability) lie in (0, 1)."""
    check_param("alpha (the error rate allowed among answered questions)", alpha, ALPHA)
    check_param("delta (the allowed probability of exceeding alpha)", delta, DELTA)


def check_holdout(holdout: Any) -> None:
    """`ValidationError` (a ``ValueError``) unless ``holdout`` (the share of the calibration answers a fitted score's
    threshold is chosen on) lies in [0, 1); 0 means no holdout (the threshold on the answers the score was fitted
    on: no guarantee)."""
    check_param(
        "sel_holdout (the share of the calibration split a fitted estimator's threshold is chosen on)", holdout, HOLDOUT
    )


def min_answered(alpha: float, delta: float) -> int:
    """n_min = ⌈log δ / log(1 − α)⌉: the fewest answers whose binomial test can reject R > α (with 0 errors)."""
    check_alpha_delta(alpha, delta)
    return max(1, math.ceil(math.log(delta) / math.log1p(-alpha) - 1e-12))


@dataclass(frozen=True)
class SelectiveThreshold:
    """A chosen threshold: answer iff confidence ≥ ``threshold`` (+inf: answer nothing).

    ``n_answered`` / ``n_errors``: calibration answers at or above it and the wrong ones among them;
    ``p_value``: the binomial p-value of the last rejected hypothesis (NaN for the naive rule or when nothing is
    answered); ``method``: ``ltt`` or ``empirical``.
    """

    threshold: float
    n_answered: int
    n_errors: int
    p_value: float
    alpha: float
    delta: float
    method: str
    n_cal: int

    @property
    def coverage(self) -> float:
        """Share of the calibration answers at or above the threshold."""
        return self.n_answered / self.n_cal if self.n_cal else 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"coverage": self.coverage}


def _candidates(
    confidence: ArrayLike, correct: ArrayLike
) -> tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.int64]]:
    """Distinct confidences, most confident first, with the answers (n) and errors (k) at or above each."""
    y = check_labels(correct, "correct")
    c = check_scores(confidence, y.size, name="confidence")
    order = np.argsort(-c, kind="stable")
    cs, err = c[order], 1 - y[order]
    ends = np.flatnonzero(np.r_[cs[1:] != cs[:-1], True])  # last position of each group of equal scores
    return cs[ends], ends + 1, np.cumsum(err)[ends]


def ltt_threshold(
    confidence: ArrayLike, correct: ArrayLike, alpha: float = 0.1, delta: float = 0.1
) -> SelectiveThreshold:
    """The Learn-then-Test threshold (module docstring): P(R(t̂) ≤ α) ≥ 1 − δ.

    ``confidence``: finite calibration scores (higher = more confident); ``correct``: their 0/1 labels.
    """
    n_min = min_answered(alpha, delta)
    t, n, k = _candidates(confidence, correct)
    keep = n >= n_min
    t, n, k = t[keep], n[keep], k[keep]
    p = binom.cdf(k, n, alpha)
    fail = np.flatnonzero(p > delta)
    m = int(fail[0]) if fail.size else t.size  # hypotheses rejected before the first failure
    n_cal = int(np.asarray(correct).size)
    if m == 0:
        return SelectiveThreshold(math.inf, 0, 0, math.nan, float(alpha), float(delta), "ltt", n_cal)
    j = m - 1
    return SelectiveThreshold(float(t[j]), int(n[j]), int(k[j]), float(p[j]), float(alpha), float(delta), "ltt", n_cal)


def empirical_threshold(confidence: ArrayLike, correct: ArrayLike, alpha: float = 0.1) -> SelectiveThreshold:
    """The naive rule, no guarantee: the lowest threshold whose calibration error rate k/n is ≤ α."""
    check_alpha_delta(alpha, 0.5)
    t, n, k = _candidates(confidence, correct)
    ok = np.flatnonzero(k <= alpha * n)
    n_cal = int(np.asarray(correct).size)
    if ok.size == 0:
        return SelectiveThreshold(math.inf, 0, 0, math.nan, float(alpha), math.nan, "empirical", n_cal)
    j = int(ok[-1])
    return SelectiveThreshold(float(t[j]), int(n[j]), int(k[j]), math.nan, float(alpha), math.nan, "empirical", n_cal)


def guaranteed_threshold(confidence: ArrayLike, correct: ArrayLike, alpha: float = 0.1, delta: float = 0.1) -> float:
    """The confidence threshold to deploy: answer iff confidence ≥ it (``inf``: abstain always), chosen on the
    labelled ``confidence`` / ``correct`` so that the error rate among answered questions is ≤ ``alpha`` with
    probability ≥ 1 − ``delta`` (`ltt_threshold`). Use the same confidence (estimator and calibrator) at run time."""
    return ltt_threshold(confidence, correct, alpha, delta).threshold


def selective_outcome(
    confidence: ArrayLike, correct: ArrayLike, threshold: float, alpha: float | None = None
) -> dict[str, float]:
    """Coverage and realised risk of answering iff confidence ≥ ``threshold`` on (new) labelled answers.

    Returns ``sel_coverage`` (share answered), ``sel_risk`` (error rate among answered; NaN when none is
    answered) and, with ``alpha``, ``sel_violation`` (1.0 when the realised risk exceeds α; 0.0 when nothing is
    answered: abstaining makes no error).
    """
    y = check_labels(correct, "correct")
    c = check_scores(confidence, y.size, name="confidence")
    ans = c >= threshold
    n_ans = int(ans.sum())
    risk = float((1 - y[ans]).mean()) if n_ans else math.nan
    out = {"sel_coverage": n_ans / y.size, "sel_risk": risk}
    if alpha is not None:
        out["sel_violation"] = float(n_ans > 0 and risk > alpha)
    return out
