"""Calibrators that map confidence to P(correct) (METHOD §3, §5).

Scalar calibrators map one raw confidence score per answer to a probability of being correct. They
follow scikit-learn conventions: hyper-parameters only in ``__init__`` (so ``get_params`` / ``clone``
work), learned state in attributes ending in ``_``, ``fit(scores, y)`` returns ``self``, and
``predict_proba(scores)`` returns a 1-D array of P(correct) in [0, 1] (not sklearn's 2-column form).

* `PlattCalibrator`       p = σ(b + w·(s − μ)/σ_s): logistic regression on the standardised score.
* `IsotonicCalibrator`    p = non-decreasing step/linear fit of y on s (clipped outside the fit range).
* `TemperatureCalibrator` p = σ(logit(clip(s, ε, 1 − ε)) / T), T > 0; for scores already in [0, 1].

Edge cases shared by all: NaN/inf scores (fit or predict) → ``ValueError``; labels outside {0, 1} or
mismatched lengths → ``ValueError``; ``fit`` on a single-class ``y`` does not crash: it warns
(`SingleClassWarning`) and the calibrator predicts the constant base rate (stored in ``constant_``).

Persistence is plain JSON-able dicts (`ScalarCalibrator.to_dict` / ``from_dict``), never pickle; a
malformed or incompatible dict raises `CalibratorFileError`.
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
from sklearn.base import BaseEstimator
from sklearn.exceptions import NotFittedError
from sklearn.isotonic import IsotonicRegression
from sklearn.linear_model import LogisticRegression

from tracecal.metrics import SingleClassWarning, check_labels, check_scores

__all__ = [
    "CalibratorFileError",
    "ScalarCalibrator",
    "PlattCalibrator",
    "IsotonicCalibrator",
    "TemperatureCalibrator",
    "CALIBRATORS",
    "make_calibrator",
    "calibrator_from_dict",
    "FORMAT_VERSION",
]

FORMAT_VERSION = 1
"""Version of the ``to_dict`` layout of the scalar calibrators."""


class CalibratorFileError(ValueError):
    """A saved calibrator (dict / JSON) is malformed, of another kind, or of an unsupported version."""


def _versions() -> dict[str, str]:
    import sklearn

    try:
        from tracecal import __version__ as tracecal_version
    except ImportError:  # pragma: no cover - partial installs
        tracecal_version = "unknown"
    return {"tracecal": tracecal_version, "numpy": np.__version__, "sklearn": sklearn.__version__}


def _as_float(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CalibratorFileError(f"state[{key!r}] must be a number, got {value!r}")
    out = float(value)
    if not math.isfinite(out):
        raise CalibratorFileError(f"state[{key!r}] must be finite, got {value!r}")
    return out


class ScalarCalibrator(BaseEstimator):
    """Base class: validation, single-class fallback, and JSON-able persistence.

    Subclasses set ``kind`` and ``_STATE_KEYS`` and implement ``_fit``, ``_predict``, ``_get_state`` and
    ``_set_state``. Common fitted attributes: ``n_fit_`` (samples seen), ``base_rate_`` (mean of y) and
    ``constant_`` (the base rate when y had a single class, else ``None``).
    """

    kind: ClassVar[str] = ""
    _STATE_KEYS: ClassVar[tuple[str, ...]] = ()

    # ---- subclass hooks -------------------------------------------------------------------------
    def _validate_scores(self, s: NDArray[np.float64]) -> None:
        """Extra per-calibrator checks on finite scores (e.g. range); raise ValueError."""

    def _fit(self, s: NDArray[np.float64], y: NDArray[np.int64]) -> None:
        raise NotImplementedError

    def _predict(self, s: NDArray[np.float64]) -> NDArray[np.float64]:
        raise NotImplementedError

    def _get_state(self) -> dict[str, Any]:
        raise NotImplementedError

    def _set_state(self, state: Mapping[str, Any]) -> None:
        raise NotImplementedError

    # ---- public API -----------------------------------------------------------------------------
    def fit(self, scores: ArrayLike, y: ArrayLike) -> ScalarCalibrator:
        """Fit on raw confidence ``scores`` (1-D, finite) and correctness labels ``y`` ∈ {0, 1}.

        A single-class ``y`` emits a `SingleClassWarning` and makes the calibrator predict the constant
        base rate (``constant_``). Returns ``self``.
        """
        yy = check_labels(y)
        s = check_scores(scores, yy.size, name="scores")
        self._validate_scores(s)
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

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able state: ``{"kind", "format_version", "params", "state", "versions"}``."""
        self._check_fitted()
        state: dict[str, Any] = {
            "n_fit": self.n_fit_,
            "base_rate": self.base_rate_,
            "constant": self.constant_,
        }
        model_state = self._get_state() if self.constant_ is None else dict.fromkeys(self._public_state_keys())
        state.update(model_state)
        return {
            "kind": self.kind,
            "format_version": FORMAT_VERSION,
            "params": self.get_params(deep=False),
            "state": state,
            "versions": _versions(),
        }

    @classmethod
    def _public_state_keys(cls) -> tuple[str, ...]:
        return tuple(k.rstrip("_") for k in cls._STATE_KEYS)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ScalarCalibrator:
        """Rebuild a fitted calibrator from `to_dict` output (predictions are bit-identical)."""
        if not isinstance(d, Mapping):
            raise CalibratorFileError(f"expected a dict, got {type(d).__name__}")
        kind = d.get("kind")
        if cls is ScalarCalibrator:
            if kind not in CALIBRATORS:
                raise CalibratorFileError(f"unknown calibrator kind {kind!r}; valid kinds: {sorted(CALIBRATORS)}")
            return CALIBRATORS[kind].from_dict(d)
        if kind != cls.kind:
            raise CalibratorFileError(f"{cls.__name__}.from_dict: expected kind {cls.kind!r}, got {kind!r}")
        if d.get("format_version") != FORMAT_VERSION:
            raise CalibratorFileError(
                f"unsupported format_version {d.get('format_version')!r} (this code reads {FORMAT_VERSION})"
            )
        params, state = d.get("params", {}), d.get("state")
        if not isinstance(params, Mapping) or not isinstance(state, Mapping):
            raise CalibratorFileError("'params' and 'state' must be dicts")
        try:
            obj = cls(**params)
        except TypeError as exc:
            raise CalibratorFileError(f"bad params for {cls.__name__}: {exc}") from exc
        missing = {"n_fit", "base_rate", "constant", *cls._public_state_keys()} - set(state)
        if missing:
            raise CalibratorFileError(f"state is missing key(s) {sorted(missing)}")
        n_fit = state["n_fit"]
        if isinstance(n_fit, bool) or not isinstance(n_fit, int) or n_fit < 1:
            raise CalibratorFileError(f"state['n_fit'] must be a positive int, got {n_fit!r}")
        obj.n_fit_ = n_fit
        obj.base_rate_ = _as_float(state["base_rate"], "base_rate")
        if state["constant"] is None:
            obj.constant_ = None
            obj._set_state(state)
        else:
            obj.constant_ = _as_float(state["constant"], "constant")
            if not 0.0 <= obj.constant_ <= 1.0:
                raise CalibratorFileError(f"state['constant'] must lie in [0, 1], got {obj.constant_}")
        return obj


class PlattCalibrator(ScalarCalibrator):
    """Platt scaling: p = σ(b + w·z), z = (s − mean_) / scale_ (score standardised on the fit data).

    Logistic regression (sklearn ``LogisticRegression``, L2 with inverse strength ``C``; the default
    1e6 is effectively unregularised) of y on the standardised score; standardising keeps the solver
    well conditioned for scores on any scale. A constant score gets ``scale_ = 1``. Works for any
    real-valued score. Fitted: ``mean_``, ``scale_``, ``coef_`` (w), ``intercept_`` (b).
    """

    kind: ClassVar[str] = "platt"
    _STATE_KEYS: ClassVar[tuple[str, ...]] = ("mean_", "scale_", "coef_", "intercept_")

    def __init__(self, C: float = 1e6, max_iter: int = 1000) -> None:
        self.C = C
        self.max_iter = max_iter

    def _fit(self, s: NDArray[np.float64], y: NDArray[np.int64]) -> None:
        if not (isinstance(self.C, int | float) and self.C > 0):
            raise ValueError(f"C must be a positive number, got {self.C!r}")
        mean, sd = float(s.mean()), float(s.std())
        scale = sd if sd > 0 and math.isfinite(sd) else 1.0
        z = ((s - mean) / scale)[:, None]
        lr = LogisticRegression(C=self.C, max_iter=self.max_iter).fit(z, y)
        self.mean_, self.scale_ = mean, scale
        self.coef_ = float(lr.coef_[0, 0])
        self.intercept_ = float(lr.intercept_[0])

    def _predict(self, s: NDArray[np.float64]) -> NDArray[np.float64]:
        return expit(self.intercept_ + self.coef_ * ((s - self.mean_) / self.scale_))

    def _get_state(self) -> dict[str, Any]:
        return {"mean": self.mean_, "scale": self.scale_, "coef": self.coef_, "intercept": self.intercept_}

    def _set_state(self, state: Mapping[str, Any]) -> None:
        self.mean_ = _as_float(state["mean"], "mean")
        self.scale_ = _as_float(state["scale"], "scale")
        if self.scale_ <= 0:
            raise CalibratorFileError(f"state['scale'] must be > 0, got {self.scale_}")
        self.coef_ = _as_float(state["coef"], "coef")
        self.intercept_ = _as_float(state["intercept"], "intercept")


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

    def _get_state(self) -> dict[str, Any]:
        return {"x_thresholds": self.x_thresholds_.tolist(), "y_thresholds": self.y_thresholds_.tolist()}

    def _set_state(self, state: Mapping[str, Any]) -> None:
        try:
            x = np.asarray(state["x_thresholds"], dtype=np.float64)
            y = np.asarray(state["y_thresholds"], dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise CalibratorFileError(f"isotonic thresholds must be lists of numbers: {exc}") from exc
        if x.ndim != 1 or x.shape != y.shape or x.size == 0:
            raise CalibratorFileError(
                f"isotonic thresholds must be equal-length non-empty lists ({x.shape}, {y.shape})"
            )
        if not (np.isfinite(x).all() and np.isfinite(y).all()):
            raise CalibratorFileError("isotonic thresholds must be finite")
        if np.any(np.diff(x) < 0) or np.any(np.diff(y) < 0) or y.min() < 0 or y.max() > 1:
            raise CalibratorFileError("isotonic thresholds must be non-decreasing with y in [0, 1]")
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

    def __init__(self, eps: float = 1e-6, max_log_t: float = 7.0) -> None:
        self.eps = eps
        self.max_log_t = max_log_t

    def _validate_scores(self, s: NDArray[np.float64]) -> None:
        out = (s < 0.0) | (s > 1.0)
        if out.any():
            raise ValueError(
                f"TemperatureCalibrator expects scores in [0, 1]; {int(out.sum())} of {s.size} lie outside "
                f"(min={s.min():.6g}, max={s.max():.6g}); use 'platt' or 'isotonic' for unbounded scores"
            )

    def _logit(self, s: NDArray[np.float64]) -> NDArray[np.float64]:
        if not (0.0 < self.eps < 0.5):
            raise ValueError(f"eps must lie in (0, 0.5), got {self.eps!r}")
        c = np.clip(s, self.eps, 1.0 - self.eps)
        return np.log(c) - np.log1p(-c)

    def _fit(self, s: NDArray[np.float64], y: NDArray[np.int64]) -> None:
        if not (isinstance(self.max_log_t, int | float) and self.max_log_t > 0):
            raise ValueError(f"max_log_t must be a positive number, got {self.max_log_t!r}")
        z = self._logit(s)
        yf = y.astype(np.float64)

        def nll(log_t: float) -> float:
            a = z * math.exp(-log_t)
            return float(np.mean(np.logaddexp(0.0, a) - yf * a))

        res = minimize_scalar(nll, bounds=(-self.max_log_t, self.max_log_t), method="bounded", options={"xatol": 1e-9})
        self.temperature_ = float(math.exp(res.x))

    def _predict(self, s: NDArray[np.float64]) -> NDArray[np.float64]:
        return expit(self._logit(s) / self.temperature_)

    def _get_state(self) -> dict[str, Any]:
        return {"temperature": self.temperature_}

    def _set_state(self, state: Mapping[str, Any]) -> None:
        t = _as_float(state["temperature"], "temperature")
        if t <= 0:
            raise CalibratorFileError(f"state['temperature'] must be > 0, got {t}")
        self.temperature_ = t


CALIBRATORS: dict[str, type[ScalarCalibrator]] = {
    "platt": PlattCalibrator,
    "isotonic": IsotonicCalibrator,
    "temperature": TemperatureCalibrator,
}
"""Scalar calibrators by name (METHOD §5: Platt by default; isotonic and temperature available)."""


def make_calibrator(name: str, **kw: Any) -> ScalarCalibrator:
    """A new, unfitted scalar calibrator by registry name, with hyper-parameters ``kw``."""
    try:
        cls = CALIBRATORS[name]
    except (KeyError, TypeError):
        valid = ", ".join(repr(k) for k in CALIBRATORS)
        raise ValueError(f"unknown calibrator {name!r}; valid names: {valid}") from None
    return cls(**kw)


def calibrator_from_dict(d: Mapping[str, Any]) -> ScalarCalibrator:
    """Rebuild any scalar calibrator from `ScalarCalibrator.to_dict` output, dispatching on ``d["kind"]``."""
    return ScalarCalibrator.from_dict(d)
