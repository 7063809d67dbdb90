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

scikit-learn conventions as `tracecal.calibrators.traceplus.TracePlus` (clone-able, learned attributes end in ``_``, ``fit``
returns self; X = traces or a 2-D matrix whose column 0 is the prior's score and the others the features);
persistence through the JSON envelope of `tracecal.calibrators.base` (``save`` / ``TracePlusPrior.load``); ``inf`` is
written as the string ``"inf"`` (JSON has no infinity).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy.special import expit
from sklearn.model_selection import StratifiedKFold
from sklearn.utils import ClassifierTags
from sklearn.utils.validation import validate_data

from tracecal.calibrators.base import (
    Calibrator,
    CalibratorFileError,
    check_number,
    finite_fit_rows,
    fit_labels,
    json_array,
    json_float,
    logit,
)
from tracecal.calibrators.scalar import PlattCalibrator
from tracecal.signals.features import feature_names, trace_plus_features
from tracecal.signals.operators import KERNELS, as_batch, trace_confidence
from tracecal.stats.metrics import SingleClassWarning
from tracecal.traces.trace import Trace, TraceBatch

__all__ = ["TracePlusPrior", "DEFAULT_PENALTIES", "penalised_logistic"]

DEFAULT_PENALTIES = (0.3, 1.0, 3.0, 10.0, 30.0, 100.0, math.inf)
"""The λ grid: from weaker than TRACE+'s own L2 (λ = 1/C = 1) to ∞ (= Platt(TRACE))."""
PRIOR_NAME = "trace_conf"
SD_EPS = 1e-12
Traces = Sequence[Trace] | TraceBatch


def penalised_logistic(
    X: np.ndarray, y: np.ndarray, offset: np.ndarray, lam: float, max_iter: int = 100, tol: float = 1e-10
) -> np.ndarray:
    """argmin_θ Σ_i [log(1 + e^{η_i}) − y_i·η_i] + (λ/2)·‖θ‖², η = offset + X·θ.

    Newton's method with backtracking line search (the objective is strictly convex for λ > 0). Returns θ.
    """
    n, d = X.shape
    pen = np.full(d, float(lam))
    yf = y.astype(np.float64)

    def objective(th: np.ndarray) -> float:
        eta = offset + X @ th
        return float(np.sum(np.logaddexp(0.0, eta) - yf * eta) + 0.5 * np.sum(pen * th * th))

    theta = np.zeros(d)
    f = objective(theta)
    for _ in range(max_iter):
        p = expit(offset + X @ theta)
        g = X.T @ (p - yf) + pen * theta
        H = (X.T * (p * (1.0 - p))) @ X + np.diag(pen)
        try:
            step = np.linalg.solve(H, g)
        except np.linalg.LinAlgError:
            step = np.linalg.lstsq(H, g, rcond=None)[0]
        t, dec = 1.0, float(g @ step)
        while t > 1e-12:
            f_new = objective(theta - t * step)
            if f_new <= f - 1e-4 * t * dec:
                break
            t *= 0.5
        theta, f = theta - t * step, min(f, f_new)
        if np.max(np.abs(t * step)) < tol:
            break
    return theta


def _penalty_json(v: float) -> float | str:
    return "inf" if math.isinf(v) else float(v)


def _penalty_from_json(v: Any, what: str) -> float:
    if v == "inf":
        return math.inf
    return json_float(v, what, 0.0, open_lo=True)


class TracePlusPrior(Calibrator):
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

    def __init__(
        self,
        penalties: Sequence[float] = DEFAULT_PENALTIES,
        n_folds: int = 5,
        min_per_fold: int = 2,
        one_se: bool = True,
        monotone: bool = False,
        lams: Sequence[float] = (2.0, 4.0),
        first_k: int = 3,
        kernel: str = "exp",
        seq_likelihood: bool = False,
        low_prob_threshold: float = 0.5,
        random_state: int = 0,
    ) -> None:
        self.penalties = penalties
        self.n_folds = n_folds
        self.min_per_fold = min_per_fold
        self.one_se = one_se
        self.monotone = monotone
        self.lams = lams
        self.first_k = first_k
        self.kernel = kernel
        self.seq_likelihood = seq_likelihood
        self.low_prob_threshold = low_prob_threshold
        self.random_state = random_state

    def __sklearn_tags__(self):  # type: ignore[no-untyped-def]
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True  # a NaN row is a zero-token answer: left out of fit, NaN out
        tags.target_tags.required = True
        tags.classifier_tags = ClassifierTags(multi_class=False)
        return tags

    # ------------------------------------------------------------------ parameters
    def _check_params(self) -> None:
        if not isinstance(self.penalties, list | tuple | np.ndarray) or len(self.penalties) == 0:
            raise ValueError(
                f"penalties must be a non-empty list of L2 strengths λ > 0 (inf allowed), got {self.penalties!r}"
            )
        for i, lam in enumerate(self.penalties):
            if not (isinstance(lam, int | float | np.floating) and not isinstance(lam, bool) and lam > 0):
                raise ValueError(f"penalties[{i}] must be a number > 0 (or inf), got {lam!r}")
        check_number(self.n_folds, "n_folds", 2, integer=True)
        check_number(self.min_per_fold, "min_per_fold", 1, integer=True)
        for flag in ("one_se", "monotone"):
            if not isinstance(getattr(self, flag), bool | np.bool_):
                raise ValueError(f"{flag} must be true or false, got {getattr(self, flag)!r}")
        if not isinstance(self.lams, list | tuple | np.ndarray) or len(self.lams) == 0:
            raise ValueError(f"lams must be a non-empty list of decay rates λ > 0, got {self.lams!r}")
        for i, lam in enumerate(self.lams):
            check_number(lam, f"lams[{i}] (a decay rate λ)", 0.0, open_lo=True)
        check_number(self.first_k, "first_k", 1, integer=True)
        if not isinstance(self.kernel, str) or self.kernel not in KERNELS:
            raise ValueError(f"kernel must be one of the decay kernels {sorted(KERNELS)}, got {self.kernel!r}")
        if not isinstance(self.seq_likelihood, bool | np.bool_):
            raise ValueError(f"seq_likelihood must be true or false, got {self.seq_likelihood!r}")
        check_number(self.low_prob_threshold, "low_prob_threshold", 0.0, 1.0, open_lo=True, open_hi=True)
        check_number(self.random_state, "random_state", 0, integer=True)

    @classmethod
    def _params_from_json(cls, params: dict[str, Any]) -> dict[str, Any]:
        if isinstance(params.get("penalties"), list):
            params["penalties"] = tuple(math.inf if v == "inf" else v for v in params["penalties"])
        if isinstance(params.get("lams"), list):
            params["lams"] = tuple(params["lams"])
        return params

    def to_dict(self) -> dict[str, Any]:
        """The JSON envelope (`Calibrator.to_dict`), with an infinite λ written as ``"inf"``."""
        d = super().to_dict()
        d["params"]["penalties"] = [_penalty_json(float(v)) for v in self.penalties]
        return d

    def trace_feature_names(self) -> list[str]:
        """Column names of `matrix` with the current parameters: the prior's score, then TRACE+'s features."""
        self._check_params()
        return [
            PRIOR_NAME,
            *feature_names(tuple(float(x) for x in self.lams), bool(self.seq_likelihood), int(self.first_k)),
        ]

    def matrix(self, traces: Traces) -> np.ndarray:
        """(c_TRACE, φ) per answer, shape (B, 1 + n_features); validates the traces' values."""
        self._check_params()
        b = as_batch(traces)
        phi = trace_plus_features(
            b,
            tuple(float(x) for x in self.lams),
            int(self.first_k),
            self.kernel,
            bool(self.seq_likelihood),
            float(self.low_prob_threshold),
        )
        c = trace_confidence(b) if len(b) else np.zeros(0)
        return np.column_stack([c, phi]) if len(b) else np.zeros((0, phi.shape[1] + 1))

    def _as_matrix(self, X: Any, reset: bool) -> np.ndarray:
        is_traces = isinstance(X, TraceBatch) or (isinstance(X, list | tuple) and all(isinstance(t, Trace) for t in X))
        if not is_traces:
            kw = {"ensure_min_samples": 1 if reset else 0}
            return validate_data(self, X, reset=reset, dtype=np.float64, ensure_all_finite="allow-nan", **kw)
        M = self.matrix(X)
        if reset:
            self.n_features_in_ = M.shape[1]
        elif list(self.feature_names_) != self.trace_feature_names():
            raise ValueError(
                f"this TracePlusPrior was fitted on columns {self.feature_names_[:3]}…, not on these trace features: "
                "refit it on traces with the current parameters (or pass a matrix of the fitted columns)"
            )
        return M

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
        mean = losses.mean(axis=0)
        best = int(np.argmin(mean))
        if not self.one_se:
            return float(pens[best])
        se = losses[:, best].std(ddof=1) / math.sqrt(losses.shape[0])
        ok = np.flatnonzero(mean <= mean[best] + se)
        return float(pens[ok[np.argmax(pens[ok])]])

    def _standardise(self, M: np.ndarray) -> None:
        self.mean_, sd = M.mean(axis=0), M.std(axis=0)
        self.kept_ = sd > SD_EPS
        self.scale_ = np.where(self.kept_, sd, 1.0)

    def fit(self, X: Traces | np.ndarray, y: Any) -> TracePlusPrior:
        """Fit on the calibration answers: ``X`` traces (or a matrix: column 0 the prior's score), ``y`` ∈ {0, 1}.

        Zero-token answers (NaN rows) are left out, with a warning; single-class labels give a constant
        calibrator (base rate, `SingleClassWarning`). Returns ``self``.
        """
        self._check_params()
        M = self._as_matrix(X, reset=True)
        yy = fit_labels(y, len(M), "TracePlusPrior")
        M, yy = finite_fit_rows(M, yy, "TracePlusPrior")
        names = self.trace_feature_names()
        self.feature_names_ = names if M.shape[1] == len(names) else [f"x{i}" for i in range(M.shape[1])]
        self.n_train_, self.base_rate_ = int(len(yy)), float(yy.mean())
        self._standardise(M)
        self.constant_: float | None = None
        self.cv_loss_ = np.full(len(self.penalties), np.nan)
        if yy.min() == yy.max():
            warnings.warn(
                f"TracePlusPrior.fit: the labels have a single class ({self.n_train_} examples); "
                "predicting the constant base rate",
                SingleClassWarning,
                stacklevel=2,
            )
            self.constant_ = self.base_rate_
            self.penalty_, self.coef_, self.intercept_ = math.inf, np.zeros(int(self.kept_.sum())), 0.0
            self.prior_coef_, self.prior_intercept_ = self.coef_.copy(), 0.0
            return self
        c = M[:, 0]
        X1 = np.column_stack([np.ones(len(M)), ((M - self.mean_) / self.scale_)[:, self.kept_]])
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

    # ------------------------------------------------------------------ predict
    def decision_function(self, X: Traces | np.ndarray) -> np.ndarray:
        """The log-odds of correctness per answer (±inf for a constant 0 / 1 model); NaN for zero-token answers."""
        self._check_fitted()
        M = self._as_matrix(X, reset=False)
        if self.constant_ is not None:
            out = np.full(len(M), logit(self.constant_))
        else:
            out = self.intercept_ + ((M - self.mean_) / self.scale_)[:, self.kept_] @ self.coef_
        out[~np.all(np.isfinite(M), axis=1)] = np.nan
        return out

    def predict_proba(self, X: Traces | np.ndarray) -> np.ndarray:
        """P(correct) = σ(decision_function) ∈ [0, 1] per answer; NaN for zero-token answers."""
        d = self.decision_function(X)
        if self.constant_ is not None:
            return np.where(np.isnan(d), np.nan, self.constant_)
        return expit(d)

    # ------------------------------------------------------------------ JSON persistence (the envelope's state)
    def _get_state(self) -> dict[str, Any]:
        return {
            "feature_names": list(self.feature_names_),
            "means": self.mean_.tolist(),
            "sds": self.scale_.tolist(),
            "kept": self.kept_.tolist(),
            "weights": self.coef_.tolist(),
            "bias": self.intercept_,
            "prior_weights": self.prior_coef_.tolist(),
            "prior_bias": self.prior_intercept_,
            "penalty": _penalty_json(self.penalty_),
            "cv_loss": [None if not math.isfinite(v) else float(v) for v in self.cv_loss_],
            "constant": self.constant_,
            "n_train": self.n_train_,
            "base_rate": self.base_rate_,
        }

    def _set_state(self, state: Mapping[str, Any]) -> None:
        keys = {
            "feature_names",
            "means",
            "sds",
            "kept",
            "weights",
            "bias",
            "prior_weights",
            "prior_bias",
            "penalty",
            "cv_loss",
            "constant",
            "n_train",
            "base_rate",
        }
        missing = sorted(keys - set(state))
        if missing:
            raise CalibratorFileError(f"state is missing key(s) {missing}")
        names, expected = state["feature_names"], self.trace_feature_names()
        if not isinstance(names, list) or not names or names not in (expected, [f"x{i}" for i in range(len(names))]):
            raise CalibratorFileError(f"state.feature_names {names!r} do not match the params (expected {expected})")
        n = len(names)
        means, sds = json_array(state["means"], "state.means", n), json_array(state["sds"], "state.sds", n)
        if np.any(sds <= 0):
            raise CalibratorFileError(f"state.sds are standard deviations: each must be > 0, got {sds.min():g}")
        kept = json_array(state["kept"], "state.kept", n, dtype=bool)
        weights = json_array(state["weights"], "state.weights", int(kept.sum()))
        prior_w = json_array(state["prior_weights"], "state.prior_weights", int(kept.sum()))
        constant = state["constant"]
        self.constant_ = None if constant is None else json_float(constant, "state.constant", 0.0, 1.0)
        cv = state["cv_loss"]
        if not isinstance(cv, list) or len(cv) != len(self.penalties):
            raise CalibratorFileError(f"state.cv_loss must list one loss per penalty ({len(self.penalties)})")
        self.cv_loss_ = np.array([np.nan if v is None else json_float(v, "state.cv_loss", 0.0) for v in cv])
        self.penalty_ = _penalty_from_json(state["penalty"], "state.penalty")
        self.intercept_ = json_float(state["bias"], "state.bias")
        self.prior_intercept_ = json_float(state["prior_bias"], "state.prior_bias")
        self.base_rate_ = json_float(state["base_rate"], "state.base_rate", 0.0, 1.0)
        self.n_train_ = int(check_number(state["n_train"], "state.n_train", 1, integer=True, error=CalibratorFileError))
        self.feature_names_, self.n_features_in_, self.mean_, self.scale_ = names, n, means, sds
        self.kept_, self.coef_, self.prior_coef_ = kept, weights, prior_w
