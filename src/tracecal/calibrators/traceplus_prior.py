"""TRACE+ with a prior (``trace_plus_prior``): a TRACE+ that holds with few labels.

The paper's TRACE+ fits 8 free logistic weights (L2 toward 0, C = 1) on the calibration split: with 10–35
correct answers per split it overfits and its ranking falls below the fixed TRACE score it is built from. This
model shrinks toward Platt-scaled TRACE instead of toward "no signal":

    logit P(correct) = b_P + w_P·x₀ + d₀ + dᵀ·x,        x = (x₀, z(φ)),

* x₀ = (c_TRACE − μ₀) / σ₀, the standardised TRACE confidence c_TRACE = exp(−R) (`tracecal.signals.operators`);
  z(φ) the standardised TRACE+ features φ (`tracecal.signals.features`; features of sd 0 on the fit set dropped);
* (b_P, w_P): Platt scaling of c_TRACE (`tracecal.calibrators.scalar.PlattCalibrator`, exactly the protocol's
  Platt(TRACE)), fitted first on the same answers — the prior mean of the weights;
* (d₀, d): deviations from it, by penalised maximum likelihood (the MAP estimate under a Gaussian prior
  (d₀, d) ~ N(0, λ⁻¹·I)):  min Σ_i [log(1 + e^{η_i}) − y_i·η_i] + (λ/2)·(d₀² + ‖d‖²)  (Newton's method). The
  penalty is on the *sum* of the log-losses, so the prior weighs less as labels accumulate; the intercept is
  penalised too, so that λ → ∞ tends to Platt(TRACE) itself (features are centred: d₀ stays small anyway).

λ is chosen from ``penalties`` by stratified K-fold cross-validation on the fit set (Platt refitted inside each
fold; held-out mean log-loss) with the one-standard-error rule: the largest λ whose CV loss is within one
standard error of the best — ties go to the simpler model. λ = ∞ (in the default grid) means d = 0: the model
*is* Platt(TRACE), prediction for prediction. With fewer than ``min_per_fold × n_folds`` answers of either
class there is no cross-validation to trust and the largest λ of the grid is used (∞ by default): with few
labels the model falls back to Platt(TRACE).

With few labels Platt can learn a *negative* slope from noise, reversing TRACE's ranking (on tasks where TRACE is
near chance this drags the AUROC below TRACE's own; docs/statistics.md). ``monotone=True`` (registered as
``trace_plus_prior_mono``) keeps the prior's weight on c_TRACE ≥ 0: a negative Platt slope gives the base rate.

scikit-learn conventions as `tracecal.calibrators.traceplus.TracePlus`, on the same base
(`tracecal.calibrators.features_base`): clone-able, learned attributes end in ``_``, ``fit`` returns self; X = traces
or a 2-D matrix whose column 0 is the prior's score and the others the features. Persistence through the JSON
envelope of `tracecal.calibrators.base` (``save`` / ``TracePlusPrior.load``); ``inf`` is written as the string
``"inf"`` (JSON has no infinity). The Newton solver is `tracecal.calibrators.logistic.penalised_logistic`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
from sklearn.model_selection import StratifiedKFold

from tracecal._validation import SEED, Constraint, Flag, Interval
from tracecal.calibrators.base import CalibratorFileError, json_array, json_float
from tracecal.calibrators.features_base import (
    FEATURE_CONSTRAINTS,
    PARAMS,
    PENALTIES,
    LinearTraceCalibrator,
    Traces,
    logit,
    penalty_json,
)
from tracecal.calibrators.logistic import DEFAULT_PENALTIES, one_se_index, penalised_logistic
from tracecal.calibrators.scalar import PlattCalibrator
from tracecal.signals.features import trace_and_features
from tracecal.signals.operators import as_batch
from tracecal.stats.metrics import SingleClassWarning

__all__ = ["TracePlusPrior", "DEFAULT_PENALTIES", "PRIOR_NAME"]

PRIOR_NAME = "trace_conf"
"""Name of column 0 of `TracePlusPrior.matrix`: the prior's score c_TRACE."""


def _penalty_from_json(v: Any, what: str) -> float:
    if v == "inf":
        return math.inf
    return json_float(v, what, 0.0, math.inf, open_lo=True)  # any λ > 0 given in penalties


@PARAMS
class TracePlusPrior(LinearTraceCalibrator):
    """Logistic deviations from Platt(TRACE) on the TRACE+ features (see the module docstring).

    Args:
        penalties: the λ grid (each > 0; ``math.inf`` = Platt(TRACE)); one value = no cross-validation.
        n_folds: K of the stratified K-fold cross-validation choosing λ (≥ 2).
        min_per_fold: cross-validate only when each class has ≥ ``min_per_fold`` answers per fold (≥ 1); else
            the largest λ of the grid.
        one_se: choose the largest λ within one standard error of the best CV loss (else the best).
        monotone: a prior whose weight on c_TRACE is ≥ 0 (TRACE is a confidence): when Platt's slope comes out
            negative the prior is the base rate instead (an option; the default is Platt(TRACE) as it is).
        lams, first_k, kernel, seq_likelihood, low_prob_threshold: the TRACE+ features (as `TracePlus`).
        random_state: seed of the folds.

    Learned: ``feature_names_``, ``n_features_in_``, ``mean_``, ``scale_``, ``kept_``, ``coef_`` (total weights of
    the kept standardised columns), ``intercept_``, ``prior_coef_`` / ``prior_intercept_`` (Platt(TRACE) in the
    same coordinates), ``penalty_`` (the chosen λ), ``cv_loss_`` (mean held-out log-loss per λ; NaN without
    cross-validation), ``n_train_``, ``base_rate_``, ``constant_`` (the base rate for single-class labels).
    """

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "penalties": PENALTIES,
        "n_folds": Interval(int, 2, None),
        "min_per_fold": Interval(int, 1, None),
        "one_se": Flag(),
        "monotone": Flag(),
        **FEATURE_CONSTRAINTS,
        "random_state": SEED,
    }
    _MODEL_KEYS: ClassVar[tuple[str, ...]] = ("weights", "bias", "prior_weights", "prior_bias", "penalty", "cv_loss")
    _TUPLE_PARAMS: ClassVar[tuple[str, ...]] = ("penalties", "lams")

    penalties: Sequence[float] = DEFAULT_PENALTIES
    n_folds: int = 5
    min_per_fold: int = 2
    one_se: bool = True
    monotone: bool = False
    random_state: int = 0

    def trace_feature_names(self) -> list[str]:
        """Column names of `matrix` with the current parameters: the prior's score, then TRACE+'s features."""
        return [PRIOR_NAME, *self.plus_feature_names()]

    def matrix(self, traces: Traces) -> np.ndarray:
        """(c_TRACE, φ) per answer, shape (B, 1 + n_features); validates the traces' values."""
        lams, first_k, kernel, seq, thr = self._feature_args()
        c, phi = trace_and_features(as_batch(traces), None, lams, first_k, kernel, seq, thr)  # one sweep
        return np.column_stack([c, phi])

    # ------------------------------------------------------------------ fit
    def _prior(self, c: np.ndarray, y: np.ndarray) -> tuple[float, float]:
        """Platt(c_TRACE) fitted on these answers as (intercept, weight of x₀) in the model's coordinates.

        Platt's η = a + w·(c − μ_P)/σ_P with c = μ₀ + σ₀·x₀ is (a + w·(μ₀ − μ_P)/σ_P) + (w·σ₀/σ_P)·x₀.
        """
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SingleClassWarning)
            platt = PlattCalibrator().fit(c, y)
        if platt.constant_ is not None:
            return logit(platt.constant_), 0.0
        if self.monotone and platt.coef_ < 0:  # a sign learnt from noise would reverse TRACE's ranking
            return logit(platt.base_rate_), 0.0
        a = platt.intercept_ + platt.coef_ * (float(self.mean_[0]) - platt.mean_) / platt.scale_
        return float(a), float(platt.coef_ * float(self.scale_[0]) / platt.scale_)

    def _prior_vector(self, c: np.ndarray, y: np.ndarray, width: int) -> np.ndarray:
        """Platt(c_TRACE) on these rows as (intercept, weights of the kept columns): (a, b, 0, …, 0)."""
        a, b = self._prior(c, y)
        prior = np.zeros(width)
        prior[0] = a
        if self.kept_[0]:
            prior[1] = b  # x₀ is the first kept column
        return prior

    def _deviate(self, X1: np.ndarray, y: np.ndarray, prior: np.ndarray, lam: float) -> np.ndarray:
        """The prior plus the penalised deviation fitted on these rows (the prior itself for λ = ∞)."""
        if math.isinf(lam):
            return prior
        return prior + penalised_logistic(X1, y, X1 @ prior, lam)

    def _cv_losses(self, X1: np.ndarray, c: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Held-out mean log-loss, shape (n_folds, len(penalties)), Platt refitted inside each fold."""
        k = int(self.n_folds)
        folds = StratifiedKFold(n_splits=k, shuffle=True, random_state=int(self.random_state))
        losses = np.zeros((k, len(self.penalties)))
        for f, (tr, te) in enumerate(folds.split(X1, y)):
            prior = self._prior_vector(c[tr], y[tr], X1.shape[1])
            for j, lam in enumerate(self.penalties):
                eta = X1[te] @ self._deviate(X1[tr], y[tr], prior, float(lam))
                losses[f, j] = float(np.mean(np.logaddexp(0.0, eta) - y[te] * eta))
        return losses

    def _choose(self, losses: np.ndarray) -> float:
        """The λ of least mean CV loss, or (``one_se``) the largest λ within one standard error of it."""
        pens = np.asarray([float(v) for v in self.penalties])
        return float(pens[one_se_index(losses, pens, bool(self.one_se))])

    def fit(self, X: Traces | np.ndarray, y: Any) -> TracePlusPrior:
        """Fit on the calibration answers: ``X`` traces (or a matrix: column 0 the prior's score), ``y`` ∈ {0, 1}.

        Zero-token answers (NaN rows) are left out, with a warning; single-class labels give a constant
        calibrator (base rate, `SingleClassWarning`). Returns ``self``.
        """
        M, yy = self._fit_setup(X, y)
        self.cv_loss_ = np.full(len(self.penalties), np.nan)
        if self._single_class(yy):
            self.penalty_, self.coef_, self.intercept_ = math.inf, np.zeros(int(self.kept_.sum())), 0.0
            self.prior_coef_, self.prior_intercept_ = self.coef_.copy(), 0.0
            return self
        c = M[:, 0]
        X1 = np.column_stack([np.ones(len(M)), self._standardised(M)])
        n_min = int(min(yy.sum(), len(yy) - yy.sum()))
        self.penalty_ = max(float(v) for v in self.penalties)  # one λ, or too few labels to cross-validate
        if len(self.penalties) > 1 and n_min >= int(self.min_per_fold) * int(self.n_folds):
            losses = self._cv_losses(X1, c, yy)
            self.cv_loss_ = losses.mean(axis=0)
            self.penalty_ = self._choose(losses)
        prior = self._prior_vector(c, yy, X1.shape[1])
        theta = self._deviate(X1, yy, prior, self.penalty_)
        self.prior_intercept_, self.prior_coef_ = float(prior[0]), prior[1:]
        self.intercept_, self.coef_ = float(theta[0]), theta[1:]
        return self

    # ------------------------------------------------------------------ JSON persistence (the envelope's state)
    def _model_state(self) -> dict[str, Any]:
        return {
            "weights": self.coef_.tolist(),
            "bias": self.intercept_,
            "prior_weights": self.prior_coef_.tolist(),
            "prior_bias": self.prior_intercept_,
            "penalty": penalty_json(self.penalty_),
            "cv_loss": [None if not math.isfinite(v) else float(v) for v in self.cv_loss_],
        }

    def _set_model_state(self, state: Mapping[str, Any]) -> None:
        n_kept = int(self.kept_.sum())
        self.coef_ = json_array(state["weights"], "state.weights", n_kept)
        self.prior_coef_ = json_array(state["prior_weights"], "state.prior_weights", n_kept)
        cv = state["cv_loss"]
        if not isinstance(cv, list) or len(cv) != len(self.penalties):
            raise CalibratorFileError(f"state.cv_loss must list one loss per penalty ({len(self.penalties)})")
        self.cv_loss_ = np.array([np.nan if v is None else json_float(v, "state.cv_loss", 0.0) for v in cv])
        self.penalty_ = _penalty_from_json(state["penalty"], "state.penalty")
        self.intercept_ = json_float(state["bias"], "state.bias")
        self.prior_intercept_ = json_float(state["prior_bias"], "state.prior_bias")
