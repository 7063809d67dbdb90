"""Scalar calibrators that map one confidence score per answer to P(correct) (docs/method.md §5).

* `PlattCalibrator`       p = σ(b + w·(s − μ)/σ_s): logistic regression on the standardised score.
* `IsotonicCalibrator`    p = non-decreasing step/linear fit of y on s (clipped outside the fit range).
* `TemperatureCalibrator` p = σ(logit(clip(s, ε, 1 − ε)) / T), T > 0; for scores already in [0, 1].

They follow scikit-learn conventions (see `tracecal.calibrators.base.Calibrator`): hyper-parameters only in
``__init__``, stored as given and validated in ``fit`` (so ``get_params`` / ``set_params`` / ``clone``
round-trip); learned state in attributes ending in ``_``; ``fit(scores, y)`` returns ``self``; an
unfitted calibrator raises ``NotFittedError``; ``predict_proba(scores)`` returns a 1-D array of
P(correct) in [0, 1] (not sklearn's 2-column form). X is a 1-D array of scores, so sklearn's generic
2-D estimator checks do not apply (tagged ``one_d_array``); the API checks do.

Edge cases shared by all: NaN/inf scores (fit or predict) → ``ValueError``; labels outside {0, 1} or
mismatched lengths → ``ValueError``; ``fit`` on a single-class ``y`` does not crash: it warns
(`SingleClassWarning`) and the calibrator predicts the constant base rate (stored in ``constant_``). ``fit``
refuses scores of magnitude above `MAX_ABS_SCORE` (1e12; no confidence score comes near): a saved calibrator
holds values in score units (Platt's mean and scale, isotonic breakpoints), and a file is loaded only with those
within that bound (and every other value within `MAX_ABS_STATE`), so whatever is fitted can be saved and loaded.
``predict_proba`` takes any finite score: Platt's standardised score is clipped to ±`Z_CLIP`, so an absurd score
gives 0 or 1, never an overflow.

Persistence: ``cal.save(path)`` / ``PlattCalibrator.load(path)`` (or ``ScalarCalibrator.load`` for any
of the three), the JSON envelope of `tracecal.calibrators.base`; never pickle. A malformed file or dict, or one
with invalid values (beyond `MAX_ABS_SCORE` / `MAX_ABS_STATE`, a temperature outside [1/`MAX_ABS_STATE`,
`MAX_ABS_STATE`], model values next to a ``constant``), raises `CalibratorFileError` naming the field.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.optimize import minimize_scalar
from scipy.special import expit
from sklearn.exceptions import NotFittedError
from sklearn.isotonic import IsotonicRegression
from sklearn.utils import Tags

from tracecal._validation import Constraint, Interval
from tracecal.calibrators.base import (
    FORMAT_VERSION,
    MAX_ABS_STATE,
    Z_CLIP,
    Calibrator,
    CalibratorFileError,
    check_number,
    json_array,
    json_float,
)
from tracecal.calibrators.logistic import PLATT_C, PLATT_MAX_ITER, platt_rows
from tracecal.errors import ValidationError
from tracecal.stats.metrics import SingleClassWarning, check_labels, check_scores

__all__ = [
    "CalibratorFileError",
    "Calibrator",
    "ScalarCalibrator",
    "PlattCalibrator",
    "IsotonicCalibrator",
    "TemperatureCalibrator",
    "CALIBRATORS",
    "SCALAR_CLASSES",
    "calibrator_from_dict",
    "FORMAT_VERSION",
    "MAX_ABS_SCORE",
]

MAX_ABS_SCORE = 1e12
"""Our choice: the largest score magnitude a scalar calibrator is fitted on, and so the bound of the values in
score units of its saved state (Platt's ``mean`` and ``scale``, isotonic ``x_thresholds``). Far beyond any
confidence score (tracecal's are probabilities, nats ≤ 1e4, or sums of them) yet roomy for a poorly scaled one."""


# ---------------------------------------------------------------------------------------- scalar calibrators


class ScalarCalibrator(Calibrator):
    """Base of the calibrators of one score per answer: validation, single-class fallback, persistence.

    Subclasses set ``kind`` and ``_STATE_KEYS`` and implement ``_fit``, ``_predict``, ``_model_state`` and
    ``_set_model_state``. Common fitted attributes: ``n_fit_`` (samples seen), ``base_rate_`` (mean of y)
    and ``constant_`` (the base rate when y had a single class, else ``None``).
    """

    reads: ClassVar[str] = "score"
    kind: ClassVar[str] = ""
    _STATE_KEYS: ClassVar[tuple[str, ...]] = ()

    def __sklearn_tags__(self) -> Tags:
        tags = super().__sklearn_tags__()
        tags.input_tags.one_d_array, tags.input_tags.two_d_array = True, False  # X is a 1-D array of scores
        tags.target_tags.required = True
        return tags

    @classmethod
    def _loadable(cls) -> Mapping[str, type[Calibrator]]:
        return SCALAR_CLASSES if cls is ScalarCalibrator else {cls.__name__: cls}

    # ---- subclass hooks -------------------------------------------------------------------------
    def _validate_scores(self, s: NDArray[np.float64]) -> None:
        """Extra per-calibrator checks on finite scores (e.g. range); raise ValueError."""

    def _fit(self, s: NDArray[np.float64], y: NDArray[np.int64]) -> None:
        raise NotImplementedError

    def _predict(self, s: NDArray[np.float64]) -> NDArray[np.float64]:
        raise NotImplementedError

    def _model_state(self) -> dict[str, Any]:
        raise NotImplementedError

    def _set_model_state(self, state: Mapping[str, Any]) -> None:
        raise NotImplementedError

    # ---- public API -----------------------------------------------------------------------------
    def prepare_scores(self, cal_scores: ArrayLike, *scores: ArrayLike) -> tuple[NDArray[np.float64], ...]:
        """The calibration scores and each of ``scores`` as this calibrator expects them, by a map learnt on the
        calibration scores alone: unchanged here; `TemperatureCalibrator` maps them into [0, 1] (`min_max`)."""
        return tuple(np.asarray(x, dtype=np.float64) for x in (cal_scores, *scores))

    def fit(self, scores: ArrayLike, y: ArrayLike) -> ScalarCalibrator:
        """Fit on raw confidence ``scores`` (1-D, finite) and correctness labels ``y`` ∈ {0, 1}.

        A single-class ``y`` emits a `SingleClassWarning` and makes the calibrator predict the constant
        base rate (``constant_``). Returns ``self``.
        """
        self._check_params()
        if y is None:
            raise ValidationError(f"{type(self).__name__} requires y to be passed, but the target y is None")
        yy = check_labels(y)
        s = check_scores(scores, yy.size, name="scores")
        self._validate_scores(s)
        if s.size and np.abs(s).max() > MAX_ABS_SCORE:
            raise ValidationError(
                f"{type(self).__name__}.fit: scores must lie in [-{MAX_ABS_SCORE:g}, {MAX_ABS_SCORE:g}] (a saved "
                f"calibrator holds them), got {float(s[np.argmax(np.abs(s))])!r}; rescale the scores"
            )
        for key in self._STATE_KEYS:  # forget state of a previous fit
            self.__dict__.pop(key, None)
        self.n_fit_ = int(yy.size)
        self.base_rate_ = float(yy.mean())
        if 0 < yy.sum() < yy.size:
            self.constant_: float | None = None
            self._fit(s, yy)
        else:
            warnings.warn(
                f"{type(self).__name__}.fit: y has a single class (all {yy.size} label(s) are {int(yy[0])}); "
                f"falling back to the constant base rate {self.base_rate_}",
                SingleClassWarning,
                stacklevel=2,
            )
            self.constant_ = self.base_rate_
        return self

    def _check_fitted(self) -> None:
        if not hasattr(self, "n_fit_"):
            raise NotFittedError(f"this {type(self).__name__} is not fitted yet; call fit(scores, y) first")

    def predict_proba(self, scores: ArrayLike) -> NDArray[np.float64]:
        """P(correct) for each score: a 1-D float array in [0, 1] (empty input → empty output)."""
        self._check_fitted()
        arr = np.asarray(scores)
        if arr.ndim == 1 and arr.size == 0:
            return np.empty(0, dtype=np.float64)
        s = check_scores(arr, name="scores")
        self._validate_scores(s)
        if self.constant_ is not None:
            return np.full(s.shape, self.constant_, dtype=np.float64)
        return np.clip(self._predict(s), 0.0, 1.0)

    def _get_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {"n_fit": self.n_fit_, "base_rate": self.base_rate_, "constant": self.constant_}
        keys = tuple(k.rstrip("_") for k in self._STATE_KEYS)
        state.update(self._model_state() if self.constant_ is None else dict.fromkeys(keys))
        return state

    def _set_state(self, state: Mapping[str, Any]) -> None:
        missing = {"n_fit", "base_rate", "constant", *(k.rstrip("_") for k in self._STATE_KEYS)} - set(state)
        if missing:
            raise CalibratorFileError(f"state is missing key(s) {sorted(missing)}")
        self.n_fit_ = int(check_number(state["n_fit"], "state.n_fit", 1, integer=True, error=CalibratorFileError))
        self.base_rate_ = json_float(state["base_rate"], "state.base_rate (a probability)", 0.0, 1.0)
        if state["constant"] is None:
            self.constant_ = None
            self._set_model_state(state)
        else:
            self.constant_ = json_float(state["constant"], "state.constant (a probability)", 0.0, 1.0)
            given = [k.rstrip("_") for k in self._STATE_KEYS if state[k.rstrip("_")] is not None]
            if given:  # a constant calibrator predicts the base rate: model values would be ignored silently
                raise CalibratorFileError(f"state.constant is set, so state.{', state.'.join(given)} must be null")


class PlattCalibrator(ScalarCalibrator):
    """Platt scaling: p = σ(b + w·z), z = (s − mean_) / scale_ (score standardised on the fit data).

    Logistic regression of y on the standardised score with the slope's L2 penalty w²/(2C) (scikit-learn's
    ``LogisticRegression(C)`` model; the default 1e6 is effectively unregularised, yet keeps the optimum finite on
    separable data), fitted to its optimum by Newton's method (`tracecal.calibrators.logistic.platt_rows`, the
    very fit the evaluation protocol runs on every split; at most ``max_iter`` steps); standardising keeps it well
    conditioned for scores on any scale. A constant score gets ``scale_ = 1``. Works for any real-valued score.
    Fitted: ``mean_``, ``scale_``, ``coef_`` (w), ``intercept_`` (b).

    >>> from tracecal.calibrators import PlattCalibrator
    >>> cal = PlattCalibrator().fit([0.1, 0.3, 0.4, 0.6, 0.7, 0.9], [0, 0, 1, 0, 1, 1])
    >>> p = cal.predict_proba([0.1, 0.5, 0.9])
    >>> bool(p[0] < p[1] < p[2]), cal.coef_ > 0
    (True, True)
    """

    kind: ClassVar[str] = "platt"
    _STATE_KEYS: ClassVar[tuple[str, ...]] = ("mean_", "scale_", "coef_", "intercept_")
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "C": Interval(float, 0, None, closed="neither"),
        "max_iter": Interval(int, 1, None),
    }

    def __init__(self, C: float = PLATT_C, max_iter: int = PLATT_MAX_ITER) -> None:
        self.C = C
        self.max_iter = max_iter

    def _fit(self, s: NDArray[np.float64], y: NDArray[np.int64]) -> None:
        mean, scale, a, w, _ = platt_rows(s[None], y[None], float(self.C), int(self.max_iter))
        self.mean_, self.scale_ = float(mean[0]), float(scale[0])
        self.coef_, self.intercept_ = float(w[0]), float(a[0])

    def _predict(self, s: NDArray[np.float64]) -> NDArray[np.float64]:
        with np.errstate(over="ignore"):  # |z| beyond float64 → ±inf, clipped to ±Z_CLIP next
            z = np.clip((s - self.mean_) / self.scale_, -Z_CLIP, Z_CLIP)
        return expit(self.intercept_ + self.coef_ * z)

    def _model_state(self) -> dict[str, Any]:
        return {"mean": self.mean_, "scale": self.scale_, "coef": self.coef_, "intercept": self.intercept_}

    def _set_model_state(self, state: Mapping[str, Any]) -> None:
        self.mean_ = json_float(state["mean"], "state.mean", -MAX_ABS_SCORE, MAX_ABS_SCORE)
        self.scale_ = json_float(state["scale"], "state.scale (a standard deviation)", 0.0, MAX_ABS_SCORE, True)
        self.coef_ = json_float(state["coef"], "state.coef")
        self.intercept_ = json_float(state["intercept"], "state.intercept")


class IsotonicCalibrator(ScalarCalibrator):
    """Isotonic regression: the non-decreasing map of s to P(correct) minimising squared error.

    Fitted with sklearn ``IsotonicRegression(out_of_bounds="clip", y_min=0, y_max=1)``; we keep only
    its breakpoints (``x_thresholds_``, ``y_thresholds_``) and predict by linear interpolation between
    them (as sklearn does), constant beyond the fitted score range. Works for any real-valued score.
    """

    kind: ClassVar[str] = "isotonic"
    _STATE_KEYS: ClassVar[tuple[str, ...]] = ("x_thresholds_", "y_thresholds_")

    def __init__(self) -> None:
        pass

    def _fit(self, s: NDArray[np.float64], y: NDArray[np.int64]) -> None:
        ir = IsotonicRegression(out_of_bounds="clip", y_min=0.0, y_max=1.0).fit(s, y)
        self.x_thresholds_ = np.asarray(ir.X_thresholds_, dtype=np.float64)
        self.y_thresholds_ = np.asarray(ir.y_thresholds_, dtype=np.float64)

    def _predict(self, s: NDArray[np.float64]) -> NDArray[np.float64]:
        return np.interp(s, self.x_thresholds_, self.y_thresholds_)

    def _model_state(self) -> dict[str, Any]:
        return {"x_thresholds": self.x_thresholds_.tolist(), "y_thresholds": self.y_thresholds_.tolist()}

    def _set_model_state(self, state: Mapping[str, Any]) -> None:
        x = json_array(state["x_thresholds"], "state.x_thresholds", bound=MAX_ABS_SCORE)
        y = json_array(state["y_thresholds"], "state.y_thresholds", n=x.size)
        if x.size == 0:
            raise CalibratorFileError("state.x_thresholds must not be empty")
        if np.any(np.diff(x) < 0) or np.any(np.diff(y) < 0):
            raise CalibratorFileError("isotonic thresholds must be non-decreasing")
        if y.min() < 0 or y.max() > 1:
            raise CalibratorFileError(f"state.y_thresholds are probabilities in [0, 1], got {y.min():g} … {y.max():g}")
        self.x_thresholds_, self.y_thresholds_ = x, y


class TemperatureCalibrator(ScalarCalibrator):
    """Temperature scaling of a probability-like score: p = σ(logit(clip(s, eps, 1 − eps)) / T).

    One parameter T > 0 (no bias), fitted by minimising the mean negative log-likelihood
    NLL(T) = mean_i [log(1 + e^{a_i}) − y_i·a_i], a_i = logit(s_i) / T, over log T ∈ [−max_log_t,
    max_log_t] with bounded Brent (``scipy.optimize.minimize_scalar``); the NLL is convex in 1/T, so the
    search is unimodal. T > 1 softens over-confident scores, T < 1 sharpens. Scores must lie in [0, 1]
    (e.g. c_TRACE or a token probability); use Platt for unbounded scores. Fitted: ``temperature_``.
    """

    kind: ClassVar[str] = "temperature"
    _STATE_KEYS: ClassVar[tuple[str, ...]] = ("temperature_",)
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "eps": Interval(float, 0, 0.5, closed="neither"),
        "max_log_t": Interval(float, 0, None, closed="neither"),
    }

    def __init__(self, eps: float = 1e-6, max_log_t: float = 7.0) -> None:
        self.eps = eps
        self.max_log_t = max_log_t

    def _validate_scores(self, s: NDArray[np.float64]) -> None:
        out = (s < 0.0) | (s > 1.0)
        if out.any():
            raise ValidationError(
                f"TemperatureCalibrator expects scores in [0, 1]; {int(out.sum())} of {s.size} lie outside "
                f"(min={s.min():.6g}, max={s.max():.6g}); use 'platt' or 'isotonic' for unbounded scores"
            )

    @staticmethod
    def min_max(cal_scores: ArrayLike, *scores: ArrayLike) -> tuple[NDArray[np.float64], ...]:
        """``cal_scores`` and each of ``scores`` mapped into [0, 1] by the min-max map of the calibration scores:
        x ↦ clip((x − lo) / span, 0, 1), lo / hi the least / largest calibration score, span = hi − lo (1 when
        hi = lo). Temperature scaling expects scores in [0, 1]; this is how an unbounded score gets there."""
        cal = np.asarray(cal_scores, dtype=np.float64)
        lo, hi = cal.min(), cal.max()
        span = hi - lo if hi > lo else 1.0
        return tuple(np.clip((np.asarray(x, dtype=np.float64) - lo) / span, 0, 1) for x in (cal, *scores))

    def prepare_scores(self, cal_scores: ArrayLike, *scores: ArrayLike) -> tuple[NDArray[np.float64], ...]:
        """The scores in [0, 1] by `min_max` of the calibration scores (temperature scaling needs them there)."""
        return self.min_max(cal_scores, *scores)

    def _logit(self, s: NDArray[np.float64]) -> NDArray[np.float64]:
        c = np.clip(s, self.eps, 1.0 - self.eps)
        return np.log(c) - np.log1p(-c)

    def _fit(self, s: NDArray[np.float64], y: NDArray[np.int64]) -> None:
        z = self._logit(s)
        yf = y.astype(np.float64)

        def nll(log_t: float) -> float:
            a = z * math.exp(-log_t)
            return float(np.mean(np.logaddexp(0.0, a) - yf * a))

        res = minimize_scalar(nll, bounds=(-self.max_log_t, self.max_log_t), method="bounded", options={"xatol": 1e-9})
        self.temperature_ = float(math.exp(res.x))

    def _predict(self, s: NDArray[np.float64]) -> NDArray[np.float64]:
        return expit(self._logit(s) / self.temperature_)

    def _model_state(self) -> dict[str, Any]:
        return {"temperature": self.temperature_}

    def _set_model_state(self, state: Mapping[str, Any]) -> None:
        lo = 1.0 / MAX_ABS_STATE  # fit gives T ∈ [e^−max_log_t, e^max_log_t] = [9e-4, 1097] by default
        self.temperature_ = json_float(state["temperature"], "state.temperature", lo, MAX_ABS_STATE)


CALIBRATORS: dict[str, type[ScalarCalibrator]] = {
    "platt": PlattCalibrator,
    "isotonic": IsotonicCalibrator,
    "temperature": TemperatureCalibrator,
}
"""Scalar calibrators by name (docs/method.md §5: Platt by default; isotonic and temperature available)."""
SCALAR_CLASSES: dict[str, type[Calibrator]] = {cls.__name__: cls for cls in CALIBRATORS.values()}
"""The fixed registry `ScalarCalibrator.load` / `calibrator_from_dict` dispatch on (by class name)."""


def calibrator_from_dict(d: Mapping[str, Any], source: str = "calibrator") -> Calibrator:
    """Rebuild any scalar calibrator from `Calibrator.to_dict` output (or a legacy ``kind`` dict),
    dispatching on ``d["class"]`` through `SCALAR_CLASSES`. For every class, TRACE+ included, use
    ``Calibrator.from_dict(d, registry=tracecal.calibrators.CALIBRATOR_CLASSES)``."""
    return ScalarCalibrator.from_dict(d, source)
