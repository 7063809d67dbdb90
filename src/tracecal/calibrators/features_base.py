"""The shared base of the calibrators on trace features (`TracePlus`, `TracePlusPrior`, `TracePlusCV`).

Each maps an answer to a row of features M (from traces: the class's `matrix`; or a precomputed 2-D float
matrix, one row per answer, NaN rows for zero-token answers) and standardises the columns on the fit rows:

    z_j = (M_j − mean_j) / scale_j,   scale_j = sd_j,   a column kept (``kept_``) iff sd_j > `SD_EPS`

(a dropped column gets scale 1 and no weight). A saved state is loaded only with means and weights of magnitude
≤ `MAX_ABS_STATE`, scales in (0, `MAX_ABS_STATE`] (> `SD_EPS` for a kept column) and, for a constant
calibrator, no non-zero weight; z is clipped to ±`Z_CLIP`, so the log-odds of any finite feature matrix is a
finite number (never an overflow). `TraceFeatureCalibrator` owns what the three share: the
traces-or-matrix dispatch (`TraceFeatureCalibrator._as_matrix`), the fit set-up (labels, zero-token rows,
column names, standardisation), the single-class warning, the sklearn tags, JSON's list → tuple parameters
(∞ as ``"inf"``) and the standardisation part of the saved state. `LinearTraceCalibrator` adds the logistic
model on the kept standardised columns, P(correct) = σ(b + wᵀ·z), and TRACE+'s feature parameters.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeGuard

import numpy as np
from scipy.special import expit
from sklearn.utils import ClassifierTags, Tags
from sklearn.utils.validation import validate_data

from tracecal._validation import Constraint, Flag, Interval, ListOf, Options
from tracecal.calibrators.base import Z_CLIP, Calibrator, CalibratorFileError, check_number, json_array, json_float
from tracecal.errors import ValidationError
from tracecal.signals.features import feature_names, trace_plus_features
from tracecal.signals.operators import KERNELS
from tracecal.stats.metrics import SingleClassWarning
from tracecal.traces.provenance import traces_provenance
from tracecal.traces.trace import Trace, TraceBatch

__all__ = [
    "SD_EPS",
    "Z_CLIP",
    "Traces",
    "FEATURE_CONSTRAINTS",
    "PENALTIES",
    "TraceFeatureCalibrator",
    "LinearTraceCalibrator",
    "FeatureParams",
    "PARAMS",
    "is_traces",
    "fit_labels",
    "finite_fit_rows",
    "logit",
    "penalty_json",
]

SD_EPS = 1e-12
"""A column whose sd on the fit rows is ≤ SD_EPS is constant there: dropped (not kept, scale 1)."""
Traces = Sequence[Trace] | TraceBatch
STANDARDISATION_KEYS = ("feature_names", "means", "sds", "kept")
"""The first keys of every saved state: the column names and the standardisation."""
TAIL_KEYS = ("constant", "n_train", "base_rate")
"""The last keys of every saved state."""

FEATURE_CONSTRAINTS: dict[str, Constraint] = {
    "lams": ListOf(Interval(float, 0, None, closed="neither"), "decay rates λ > 0"),
    "first_k": Interval(int, 1, None),
    "kernel": Options(*KERNELS),
    "seq_likelihood": Flag(),
    "low_prob_threshold": Interval(float, 0, 1, closed="neither"),
}
"""The constraints of TRACE+'s feature parameters (`tracecal.signals.features.trace_plus_features`)."""
PENALTIES = ListOf(Interval(float, 0, None, closed="neither"), "L2 strengths λ > 0 (inf allowed)", allow_inf=True)
"""The constraint of a λ grid (``penalties``): each λ > 0, ∞ allowed."""


def is_traces(X: Any) -> TypeGuard[Traces]:
    """True for a `TraceBatch` or a list / tuple of `Trace` (empty included); False for array-likes."""
    if isinstance(X, TraceBatch):
        return True
    return isinstance(X, list | tuple) and all(isinstance(t, Trace) for t in X)


def fit_labels(y: Any, n: int, who: str) -> np.ndarray:
    """``y`` checked as n labels in {0, 1} (int64); ValueError naming ``who`` (the calibrator class) otherwise."""
    if y is None:
        raise ValidationError(f"{who} requires y to be passed, but the target y is None")
    y = np.asarray(y)
    if y.shape != (n,):
        raise ValidationError(f"labels y must have shape ({n},) — one per answer — got {y.shape}")
    if not np.all(np.isin(y, (0, 1))):
        raise ValidationError("labels y must be 0 (incorrect) or 1 (correct)")
    return y.astype(np.int64)


def finite_fit_rows(M: np.ndarray, y: np.ndarray, who: str, stacklevel: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """The rows of a feature matrix (and their labels) with finite features: zero-token answers (NaN rows) are
    left out with a warning; ValueError when none is left."""
    ok = np.all(np.isfinite(M), axis=1)
    if not ok.all():
        warnings.warn(
            f"{who}.fit: {int((~ok).sum())} of {len(M)} answers have non-finite features "
            "(zero-token answers) and were left out of the fit",
            stacklevel=stacklevel,
        )
        M, y = M[ok], y[ok]
    if len(y) == 0:
        raise ValidationError(f"{who}.fit: every answer has zero tokens (NaN features): nothing to fit on")
    return M, y


def logit(p: float) -> float:
    """log(p / (1 − p)); ±∞ at 1 and 0."""
    return math.log(p / (1.0 - p)) if 0.0 < p < 1.0 else math.copysign(math.inf, p - 0.5)


def penalty_json(v: float) -> float | str:
    """A λ as JSON: ``"inf"`` for ∞ (JSON has no infinity), else the float."""
    return "inf" if math.isinf(v) else float(v)


class TraceFeatureCalibrator(Calibrator):
    """Base of the calibrators on trace features (module docstring).

    Subclasses declare ``_parameter_constraints``, ``_MODEL_KEYS`` (the model's state keys a file must hold),
    ``_TUPLE_PARAMS`` (list parameters that JSON turns into lists) and implement `trace_feature_names`,
    `matrix`, ``fit``, ``predict_proba`` and the model part of the state (``_model_state`` /
    ``_set_model_state``). Fitted by `_fit_setup`: ``feature_names_``, ``n_features_in_``, ``mean_``,
    ``scale_``, ``kept_``, ``n_train_``, ``base_rate_``, ``constant_`` (None until a subclass sets it).
    """

    reads: ClassVar[str] = "traces"
    _MODEL_KEYS: ClassVar[tuple[str, ...]] = ()
    """The state keys of the model part (``_model_state``), between the standardisation and the tail."""
    _TUPLE_PARAMS: ClassVar[tuple[str, ...]] = ()
    _LEGACY_TAIL: ClassVar[bool] = False
    """True where old files may lack ``constant`` / ``n_train`` / ``base_rate`` (TracePlus): n_train 0, NaN rate."""

    def __sklearn_tags__(self) -> Tags:
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True  # a NaN row is a zero-token answer: left out of fit, NaN out
        tags.target_tags.required = True
        tags.classifier_tags = ClassifierTags(multi_class=False)  # y is binary (0/1); not a sklearn classifier
        return tags

    @classmethod
    def _params_from_json(cls, params: dict[str, Any]) -> dict[str, Any]:
        for key in cls._TUPLE_PARAMS:  # JSON has no tuples; keeps get_params equal after load
            if isinstance(params.get(key), list):
                params[key] = tuple(math.inf if key == "penalties" and v == "inf" else v for v in params[key])
        return params

    def to_dict(self) -> dict[str, Any]:
        """The JSON envelope (`Calibrator.to_dict`), with an infinite λ of ``penalties`` written as ``"inf"``."""
        d = super().to_dict()
        if "penalties" in d["params"]:
            d["params"]["penalties"] = [penalty_json(float(v)) for v in d["params"]["penalties"]]
        return d

    # ------------------------------------------------------------------ features
    def trace_feature_names(self) -> list[str]:
        """Column names of `matrix` with the current parameters."""
        raise NotImplementedError

    def matrix(self, traces: Traces) -> np.ndarray:
        """The feature matrix of traces, one row per answer (columns `trace_feature_names`)."""
        raise NotImplementedError

    def _mismatch_message(self) -> str:
        """Why traces cannot be scored when the fitted columns are not the current trace features."""
        return (
            f"this {type(self).__name__} was fitted on columns {self.feature_names_[:3]}…, not on these trace "
            "features: refit it on traces with the current parameters (or pass a matrix of the fitted columns)"
        )

    def _as_matrix(self, X: Traces | np.ndarray, reset: bool) -> np.ndarray:
        """`matrix` of traces, or a validated float matrix for an array-like (sklearn's ``validate_data``)."""
        if is_traces(X):
            M = self.matrix(X)
            if reset:
                self.n_features_in_ = M.shape[1]
            elif list(self.feature_names_) != self.trace_feature_names():
                raise ValidationError(self._mismatch_message())
            return M
        kw = {"ensure_min_samples": 1 if reset else 0}
        return validate_data(self, X, reset=reset, dtype=np.float64, ensure_all_finite="allow-nan", **kw)

    # ------------------------------------------------------------------ fit
    def _fit_setup(self, X: Traces | np.ndarray, y: Any) -> tuple[np.ndarray, np.ndarray]:
        """(finite rows of the fit matrix, their labels), with the column names, ``n_train_``, ``base_rate_``
        and the standardisation set; ``constant_`` is None."""
        self._check_params()
        who = type(self).__name__
        M = self._as_matrix(X, reset=True)
        if isinstance(X, list | tuple):  # `Trace` objects record whose answers they are: the file carries it
            self.provenance = traces_provenance(X, None)
        yy = fit_labels(y, len(M), who)
        if len(M) == 0:
            raise ValidationError(f"{who}.fit got no answers")
        M, yy = finite_fit_rows(M, yy, who, stacklevel=4)
        names = self.trace_feature_names()
        self.feature_names_ = names if M.shape[1] == len(names) else [f"x{i}" for i in range(M.shape[1])]
        self.n_train_, self.base_rate_ = int(len(yy)), float(yy.mean())
        self.mean_, sd = M.mean(axis=0), M.std(axis=0)
        self.kept_ = sd > SD_EPS
        self.scale_ = np.where(self.kept_, sd, 1.0)
        self.constant_: float | None = None
        return M, yy

    def standardise(self, M: np.ndarray) -> np.ndarray:
        """z = (M − mean_) / scale_ of every column, shape (B, n_features), clipped to ±`Z_CLIP` (NaN stays NaN):
        a finite number for any finite M, without an overflow warning."""
        with np.errstate(over="ignore"):  # beyond float64 → ±inf, clipped next
            return np.clip((M - self.mean_) / self.scale_, -Z_CLIP, Z_CLIP)

    def _single_class(self, y: np.ndarray) -> bool:
        """True (with a `SingleClassWarning`, and ``constant_`` = the base rate) when ``y`` has one class."""
        if y.min() != y.max():
            return False
        warnings.warn(
            f"{type(self).__name__}.fit: the calibration labels have a single class ({self.n_train_} examples); "
            "predicting the constant base rate",
            SingleClassWarning,
            stacklevel=3,
        )
        self.constant_ = self.base_rate_
        return True

    # ------------------------------------------------------------------ JSON persistence (the envelope's state)
    def _model_state(self) -> dict[str, Any]:
        raise NotImplementedError

    def _set_model_state(self, state: Mapping[str, Any]) -> None:
        raise NotImplementedError

    def _get_state(self) -> dict[str, Any]:
        return {
            "feature_names": list(self.feature_names_),
            "means": self.mean_.tolist(),
            "sds": self.scale_.tolist(),
            "kept": self.kept_.tolist(),
            **self._model_state(),
            "constant": self.constant_,
            "n_train": self.n_train_,
            "base_rate": None if math.isnan(self.base_rate_) else self.base_rate_,
        }

    def _set_state(self, state: Mapping[str, Any]) -> None:
        required = (*STANDARDISATION_KEYS, *self._MODEL_KEYS, *(() if self._LEGACY_TAIL else TAIL_KEYS))
        missing = sorted(set(required) - set(state))
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
        if np.any(kept & (sds <= SD_EPS)):
            j = int(np.argmax(kept & (sds <= SD_EPS)))
            raise CalibratorFileError(
                f"state.sds[{j}] = {float(sds[j])!r}: a kept column has sd > {SD_EPS:g} (fit drops it)"
            )
        self.feature_names_, self.n_features_in_, self.mean_, self.scale_, self.kept_ = names, n, means, sds, kept
        constant = state.get("constant")
        self.constant_ = None if constant is None else json_float(constant, "state.constant (a probability)", 0, 1)
        base_rate, legacy = state.get("base_rate"), self._LEGACY_TAIL
        nan_rate = base_rate is None and legacy
        self.base_rate_ = math.nan if nan_rate else json_float(base_rate, "state.base_rate", 0.0, 1.0)
        n_train = check_number(state.get("n_train", 0), "state.n_train", 0 if legacy else 1, integer=True)
        self.n_train_ = int(n_train)
        self._set_model_state(state)
        if self.constant_ is not None:  # a constant calibrator ignores its weights: non-zero ones are a forgery
            for name in ("coef_", "components_"):
                w = getattr(self, name, None)
                if w is not None and np.any(w != 0):
                    raise CalibratorFileError(f"state.constant is set, so the weights ({name}) must all be 0")


PARAMS = dataclass(eq=False, repr=False, kw_only=True)
"""The decorator that writes a calibrator's ``__init__`` from its annotated parameters: keyword-only, each stored
as given (sklearn's rule: validation happens in ``fit``), no ``__eq__`` and sklearn's ``__repr__``."""


@PARAMS
class FeatureParams:
    """TRACE+'s feature parameters (`tracecal.signals.features`), one definition for the calibrators built on them.

    Args:
        lams: decay rates λ > 0 of the decayed entropy / surprisal confidences (paper: 2 and 4).
        first_k: k ≥ 1 of the first-k entropy confidence (paper: 3).
        kernel: decay kernel name (see `tracecal.signals.operators.KERNELS`).
        seq_likelihood: add min p, geometric-mean p and the low-probability rate (ablation).
        low_prob_threshold: p in (0, 1) below which a token counts as low-probability (our choice 0.5).
    """

    lams: Sequence[float] = (2.0, 4.0)
    first_k: int = 3
    kernel: str = "exp"
    seq_likelihood: bool = False
    low_prob_threshold: float = 0.5


class LinearTraceCalibrator(TraceFeatureCalibrator, FeatureParams):
    """A logistic model on the kept standardised columns, P(correct) = σ(b + wᵀ·z): ``coef_`` (w), ``intercept_``
    (b); with TRACE+'s feature parameters (`FeatureParams`)."""

    coef_: np.ndarray
    intercept_: float

    def _feature_args(self) -> tuple[tuple[float, ...], int, str, bool, float]:
        self._check_params()
        lams = tuple(float(x) for x in self.lams)
        return lams, int(self.first_k), self.kernel, bool(self.seq_likelihood), float(self.low_prob_threshold)

    def plus_feature_names(self) -> list[str]:
        """Names of TRACE+'s feature columns φ with the current parameters."""
        lams, first_k, _, seq, _ = self._feature_args()
        return feature_names(lams, seq, first_k)

    def plus_features(self, traces: Traces) -> np.ndarray:
        """TRACE+'s raw feature matrix φ, shape (B, n_features); validates the traces' values (`as_batch`)."""
        lams, first_k, kernel, seq, thr = self._feature_args()
        return trace_plus_features(traces, lams, first_k, kernel, seq, thr)

    def _standardised(self, M: np.ndarray) -> np.ndarray:
        """z of the kept columns, shape (B, kept) (`standardise`)."""
        return self.standardise(M)[:, self.kept_]

    def decision_function(self, X: Traces | np.ndarray) -> np.ndarray:
        """b + wᵀ·z, the log-odds of correctness (±inf for a constant 0 / 1 calibrator); NaN for zero-token
        answers."""
        self._check_fitted()
        M = self._as_matrix(X, reset=False)
        if self.constant_ is not None:
            out = np.full(len(M), logit(self.constant_))
        else:
            out = self._standardised(M) @ self.coef_ + self.intercept_
        out[~np.all(np.isfinite(M), axis=1)] = np.nan
        return out

    def predict_proba(self, X: Traces | np.ndarray) -> np.ndarray:
        """P(correct) = σ(b + wᵀ·z) ∈ [0, 1] per answer; NaN for zero-token answers.

        Traces are validated first: a negative or non-finite surprisal / entropy raises ``ValueError``
        naming the answer index (and id).
        """
        d = self.decision_function(X)
        if self.constant_ is not None:
            return np.where(np.isnan(d), np.nan, self.constant_)
        return expit(d)
