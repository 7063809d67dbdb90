"""TRACE+: a calibrated P(correct) from trace-only features (METHOD §3).

    c_TRACE+ = σ(b + wᵀ · z(φ)),   z = (φ − μ) / σ_φ  with μ, σ_φ from the calibration split

(features whose calibration-split sd is 0 are dropped), fitted by L2 logistic regression (C = 1.0).

`TracePlus` is a scikit-learn estimator (`tracecal.calibrators.base.Calibrator`): ``clone`` / ``get_params`` /
``set_params`` round-trip, learned state ends in ``_``, ``fit`` returns ``self``. X is either traces (a
`TraceBatch` or a list of `Trace`, whose values are validated: surprisal and entropy finite and ≥ 0) or
a precomputed 2-D float feature matrix (one row per answer; NaN rows are zero-token answers), so
sklearn's own estimator checks run on it.

The fitted state saves to the versioned JSON envelope of `tracecal.calibrators.base` (``cal.save(path)``,
``TracePlus.load(path)``) — never pickle; files of the older TracePlus layout still load. A file with a
wrong format or version, missing keys, inconsistent lengths or invalid values is refused with
`CalibratorFileError`. `load_calibrator` reads a file of any calibrator class (`CALIBRATOR_CLASSES`).
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy.special import expit
from sklearn.linear_model import LogisticRegression
from sklearn.utils import ClassifierTags
from sklearn.utils.validation import validate_data

from tracecal.calibrators.base import (
    FORMAT,
    FORMAT_VERSION,
    Calibrator,
    CalibratorFileError,
    check_number,
    finite_fit_rows,
    fit_labels,
    json_array,
    json_float,
    logit,
)
from tracecal.calibrators.scalar import SCALAR_CLASSES
from tracecal.calibrators.traceplus_cv import TracePlusCV
from tracecal.calibrators.traceplus_prior import TracePlusPrior
from tracecal.signals.features import feature_names, trace_plus_features
from tracecal.signals.operators import KERNELS
from tracecal.stats.metrics import SingleClassWarning
from tracecal.traces.trace import Trace, TraceBatch

__all__ = ["TracePlus", "CalibratorFileError", "CALIBRATOR_CLASSES", "load_calibrator", "FORMAT", "FORMAT_VERSION"]

_SD_EPS = 1e-12
Traces = Sequence[Trace] | TraceBatch


def _is_traces(X: Any) -> bool:
    """True for a `TraceBatch` or a list / tuple of `Trace` (empty included); False for array-likes."""
    if isinstance(X, TraceBatch):
        return True
    return isinstance(X, list | tuple) and all(isinstance(t, Trace) for t in X)


class TracePlus(Calibrator):
    """Logistic calibrator on the TRACE+ features.

    Args:
        C: inverse L2 strength of the logistic regression (paper: 1.0), > 0.
        lams: decay rates λ > 0 of the decayed entropy / surprisal confidences (paper: 2 and 4).
        first_k: k ≥ 1 of the first-k entropy confidence (paper: 3).
        kernel: decay kernel name (see `tracecal.signals.operators.KERNELS`).
        seq_likelihood: add min p, geometric-mean p and the low-probability rate (ablation).
        low_prob_threshold: p in (0, 1) below which a token counts as low-probability (our choice 0.5).

    Parameters are stored as given and validated by ``fit`` (``ValueError`` naming the parameter).

    Learned attributes: ``feature_names_``, ``n_features_in_``, ``mean_``, ``scale_``, ``kept_`` (bool
    mask), ``coef_``, ``intercept_``, ``n_train_``, ``base_rate_``; ``constant_`` is set instead of
    ``None`` when the labels have one class (the calibrator then predicts the base rate, with a warning).
    Fitted on a feature matrix whose width is not the trace features', ``feature_names_`` are
    ``x0, x1, …`` and the calibrator scores matrices of that width only.
    """

    def __init__(
        self,
        C: float = 1.0,
        lams: Sequence[float] = (2.0, 4.0),
        first_k: int = 3,
        kernel: str = "exp",
        seq_likelihood: bool = False,
        low_prob_threshold: float = 0.5,
    ) -> None:
        self.C = C
        self.lams = lams
        self.first_k = first_k
        self.kernel = kernel
        self.seq_likelihood = seq_likelihood
        self.low_prob_threshold = low_prob_threshold

    def __sklearn_tags__(self):  # type: ignore[no-untyped-def]
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True  # a NaN feature row is a zero-token answer: left out of fit, NaN out
        tags.target_tags.required = True
        tags.classifier_tags = ClassifierTags(multi_class=False)  # y is binary (0/1); not a sklearn classifier
        return tags

    # ------------------------------------------------------------------ parameters
    def _check_params(self) -> None:
        check_number(self.C, "C (inverse L2 strength)", 0.0, open_lo=True)
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

    @classmethod
    def _params_from_json(cls, params: dict[str, Any]) -> dict[str, Any]:
        if isinstance(params.get("lams"), list):
            params["lams"] = tuple(params["lams"])  # JSON has no tuples; keeps get_params equal after load
        return params

    def _feature_args(self) -> tuple[tuple[float, ...], int, str, bool, float]:
        self._check_params()
        lams = tuple(float(x) for x in self.lams)
        return lams, int(self.first_k), self.kernel, bool(self.seq_likelihood), float(self.low_prob_threshold)

    def trace_feature_names(self) -> list[str]:
        """Names of the columns of `features` with the current parameters."""
        lams, first_k, _, seq, _ = self._feature_args()
        return feature_names(lams, seq, first_k)

    def features(self, traces: Traces) -> np.ndarray:
        """The raw feature matrix φ, shape (B, n_features); validates the traces' values (`as_batch`)."""
        lams, first_k, kernel, seq, thr = self._feature_args()
        return trace_plus_features(traces, lams, first_k, kernel, seq, thr)

    def _matrix(self, X: Traces | np.ndarray, reset: bool) -> np.ndarray:
        """φ for traces, or a validated float matrix for an array-like (sklearn's ``validate_data``)."""
        if not _is_traces(X):
            kw = {"ensure_min_samples": 1 if reset else 0}
            return validate_data(self, X, reset=reset, dtype=np.float64, ensure_all_finite="allow-nan", **kw)
        phi = self.features(X)
        if reset:
            self.n_features_in_ = phi.shape[1]
        elif list(self.feature_names_) != self.trace_feature_names():
            if self.feature_names_[0] == "x0":
                raise ValueError(
                    f"this TracePlus was fitted on a {self.n_features_in_}-column feature matrix, not on trace "
                    "features: it cannot score traces (pass a matrix of the same columns, or refit on traces)"
                )
            raise ValueError(
                f"TracePlus parameters changed since fit: features {self.trace_feature_names()} != fitted "
                f"{self.feature_names_}; refit, or restore the parameters"
            )
        return phi

    # ------------------------------------------------------------------ fit / predict
    def fit(self, X: Traces | np.ndarray, y: Any) -> TracePlus:
        """Fit on the calibration split: ``X`` traces (or a precomputed feature matrix), ``y`` ∈ {0, 1}.

        Zero-token answers (NaN features) are left out of the fit, with a warning saying how many; labels
        with one class make a constant calibrator (base rate, `SingleClassWarning`). Returns ``self``.
        """
        self._check_params()
        phi = self._matrix(X, reset=True)
        yy = fit_labels(y, len(phi), "TracePlus")
        if len(phi) == 0:
            raise ValueError("TracePlus.fit got no answers")
        phi, yy = finite_fit_rows(phi, yy, "TracePlus")
        names = self.trace_feature_names()
        width = phi.shape[1]
        self.feature_names_ = names if width == len(names) else [f"x{i}" for i in range(width)]
        self.n_train_, self.base_rate_ = int(len(yy)), float(yy.mean())
        self.mean_, sd = phi.mean(axis=0), phi.std(axis=0)
        self.kept_ = sd > _SD_EPS
        self.scale_ = np.where(self.kept_, sd, 1.0)
        self.constant_: float | None = None
        if yy.min() == yy.max():
            warnings.warn(
                f"TracePlus.fit: the calibration labels have a single class ({self.n_train_} examples); "
                "predicting the constant base rate",
                SingleClassWarning,
                stacklevel=2,
            )
            self.constant_ = self.base_rate_
            self.mean_, self.scale_, self.kept_ = np.zeros(width), np.ones(width), np.zeros(width, dtype=bool)
        if self.constant_ is not None or not self.kept_.any():  # no usable feature: intercept-only model
            self.coef_ = np.zeros(int(self.kept_.sum()))
            self.intercept_ = logit(self.base_rate_) if 0 < self.base_rate_ < 1 else 0.0
            return self
        Z = ((phi - self.mean_) / self.scale_)[:, self.kept_]
        lr = LogisticRegression(C=float(self.C), max_iter=1000).fit(Z, yy)
        self.coef_ = lr.coef_.ravel().astype(np.float64)
        self.intercept_ = float(lr.intercept_[0])
        return self

    def decision_function(self, X: Traces | np.ndarray) -> np.ndarray:
        """b + wᵀ·z(φ), the log-odds of correctness (±inf for a constant 0 / 1 calibrator); NaN for
        zero-token answers."""
        self._check_fitted()
        phi = self._matrix(X, reset=False)
        if self.constant_ is not None:
            out = np.full(len(phi), logit(self.constant_))
        else:
            Z = ((phi - self.mean_) / self.scale_)[:, self.kept_]
            out = Z @ self.coef_ + self.intercept_
        out[~np.all(np.isfinite(phi), axis=1)] = np.nan
        return out

    def predict_proba(self, X: Traces | np.ndarray) -> np.ndarray:
        """c_TRACE+ = σ(b + wᵀ·z(φ)) ∈ [0, 1] per answer; NaN for zero-token answers.

        Traces are validated first: a negative or non-finite surprisal / entropy raises ``ValueError``
        naming the answer index (and id).
        """
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
            "constant": self.constant_,
            "n_train": self.n_train_,
            "base_rate": None if math.isnan(self.base_rate_) else self.base_rate_,
        }

    def _set_state(self, state: Mapping[str, Any]) -> None:
        missing = sorted({"feature_names", "means", "sds", "kept", "weights", "bias"} - set(state))
        if missing:
            raise CalibratorFileError(f"state is missing key(s) {missing}")
        names, expected = state["feature_names"], self.trace_feature_names()
        if not isinstance(names, list) or not names or names not in (expected, [f"x{i}" for i in range(len(names))]):
            raise CalibratorFileError(f"state.feature_names {names!r} do not match the params (expected {expected})")
        n = len(names)
        means = json_array(state["means"], "state.means", n)
        sds = json_array(state["sds"], "state.sds", n)
        if np.any(sds <= 0):
            raise CalibratorFileError(f"state.sds are standard deviations: each must be > 0, got {sds.min():g}")
        kept = json_array(state["kept"], "state.kept", n, dtype=bool)
        constant = state.get("constant")
        if constant is not None:
            constant = json_float(constant, "state.constant (a probability)", 0.0, 1.0)
        weights = json_array(state["weights"], "state.weights")
        if constant is None and weights.size != int(kept.sum()):
            raise CalibratorFileError(f"state.weights has {weights.size} entries for {int(kept.sum())} kept features")
        base_rate = state.get("base_rate")
        self.base_rate_ = math.nan if base_rate is None else json_float(base_rate, "state.base_rate", 0.0, 1.0)
        self.n_train_ = int(check_number(state.get("n_train", 0), "state.n_train", 0, integer=True))
        self.intercept_ = json_float(state["bias"], "state.bias")
        self.feature_names_, self.n_features_in_, self.mean_, self.scale_ = names, n, means, sds
        self.kept_, self.coef_, self.constant_ = kept, weights, constant


CALIBRATOR_CLASSES: dict[str, type[Calibrator]] = {
    **SCALAR_CLASSES,
    "TracePlus": TracePlus,
    "TracePlusPrior": TracePlusPrior,
    "TracePlusCV": TracePlusCV,
}
"""Every calibrator class a file may hold, by class name: the fixed registry `load_calibrator` dispatches on."""


def load_calibrator(path: str | os.PathLike[str]) -> Calibrator:
    """Read a calibrator file of any class in `CALIBRATOR_CLASSES` (TRACE+, Platt, isotonic, temperature).

    Raises `CalibratorFileError` naming the file and what to fix; ``FileNotFoundError`` for a missing file.
    """
    return Calibrator.load(path, registry=CALIBRATOR_CLASSES)
