"""TRACE+: a calibrated P(correct) from trace-only features (METHOD §3).

    c_TRACE+ = σ(b + wᵀ · z(φ)),   z = (φ − μ) / σ_φ  with μ, σ_φ from the calibration split

(features whose calibration-split sd is 0 are dropped), fitted by L2 logistic regression (C = 1.0).
The fitted state saves to versioned plain JSON — never pickle — and a file with a wrong format or
version, missing keys, inconsistent lengths or non-finite numbers is refused with `CalibratorFileError`.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.linear_model import LogisticRegression

from tracecal.calibration import CalibratorFileError
from tracecal.features import feature_names, trace_plus_features
from tracecal.trace import Trace, TraceBatch

__all__ = ["TracePlus", "CalibratorFileError", "FORMAT", "FORMAT_VERSION"]

FORMAT = "tracecal.TracePlus"
FORMAT_VERSION = 1
_SD_EPS = 1e-12


def _labels(y: Any, n: int) -> np.ndarray:
    y = np.asarray(y)
    if y.shape != (n,):
        raise ValueError(f"labels must have shape ({n},) — one per trace — got {y.shape}")
    if not np.all(np.isin(y, (0, 1))):
        raise ValueError("labels must be 0 (incorrect) or 1 (correct)")
    return y.astype(np.int64)


class TracePlus:
    """Logistic calibrator on the TRACE+ features.

    Args:
        C: inverse L2 strength of the logistic regression (paper: 1.0).
        lams: decay rates λ of the decayed entropy / surprisal confidences (paper: 2 and 4).
        first_k: k of the first-k entropy confidence (paper: 3).
        kernel: decay kernel name (see `tracecal.operators.KERNELS`).
        seq_likelihood: add min p, geometric-mean p and the low-probability rate (ablation).
        low_prob_threshold: p below which a token counts as low-probability (our choice 0.5).

    Learned attributes: ``feature_names_``, ``mean_``, ``scale_``, ``kept_`` (bool mask), ``coef_``,
    ``intercept_``, ``n_train_``, ``base_rate_``; ``constant_`` is set instead when the labels have one
    class (the calibrator then predicts the base rate, with a warning).
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
        self.lams = tuple(float(x) for x in lams)
        self.first_k = first_k
        self.kernel = kernel
        self.seq_likelihood = seq_likelihood
        self.low_prob_threshold = low_prob_threshold

    def get_params(self) -> dict[str, Any]:
        return {
            "C": self.C,
            "lams": list(self.lams),
            "first_k": self.first_k,
            "kernel": self.kernel,
            "seq_likelihood": self.seq_likelihood,
            "low_prob_threshold": self.low_prob_threshold,
        }

    def features(self, traces: Sequence[Trace] | TraceBatch) -> np.ndarray:
        """The raw feature matrix φ, shape (B, n_features)."""
        return trace_plus_features(
            traces, self.lams, self.first_k, self.kernel, self.seq_likelihood, self.low_prob_threshold
        )

    # ------------------------------------------------------------------ fit / predict
    def fit(self, traces: Sequence[Trace] | TraceBatch | np.ndarray, labels: Any) -> TracePlus:
        """Fit on the calibration split. ``traces`` may also be a precomputed feature matrix.

        Zero-token answers (NaN features) are left out of the fit, with a warning saying how many.
        """
        X = np.asarray(traces, float) if isinstance(traces, np.ndarray) else self.features(traces)
        y = _labels(labels, len(X))
        if len(X) == 0:
            raise ValueError("TracePlus.fit got no traces")
        ok = np.all(np.isfinite(X), axis=1)
        if not ok.all():
            warnings.warn(
                f"TracePlus.fit: {int((~ok).sum())} of {len(X)} answers have non-finite features "
                "(zero-token answers) and were left out of the fit",
                stacklevel=2,
            )
            X, y = X[ok], y[ok]
        self.feature_names_ = feature_names(self.lams, self.seq_likelihood, self.first_k)
        self.n_train_ = int(len(y))
        self.base_rate_ = float(y.mean()) if len(y) else float("nan")
        self.constant_: float | None = None
        if len(y) == 0 or y.min() == y.max():
            warnings.warn(
                f"TracePlus.fit: the calibration labels have a single class ({self.n_train_} examples); "
                "predicting the constant base rate",
                stacklevel=2,
            )
            self.constant_ = self.base_rate_ if len(y) else 0.5
            self.mean_ = np.zeros(X.shape[1])
            self.scale_ = np.ones(X.shape[1])
            self.kept_ = np.zeros(X.shape[1], dtype=bool)
            self.coef_ = np.zeros(0)
            self.intercept_ = float(math.log(self.constant_ / (1 - self.constant_))) if 0 < self.constant_ < 1 else 0.0
            return self
        self.mean_ = X.mean(axis=0)
        sd = X.std(axis=0)
        self.kept_ = sd > _SD_EPS
        self.scale_ = np.where(self.kept_, sd, 1.0)
        Z = ((X - self.mean_) / self.scale_)[:, self.kept_]
        lr = LogisticRegression(C=self.C, max_iter=1000)
        lr.fit(Z, y)
        self.coef_ = lr.coef_.ravel().astype(np.float64)
        self.intercept_ = float(lr.intercept_[0])
        return self

    def decision_function(self, traces: Sequence[Trace] | TraceBatch | np.ndarray) -> np.ndarray:
        """b + wᵀ·z(φ) (log-odds of correctness); NaN for zero-token answers."""
        if not hasattr(self, "kept_"):
            raise RuntimeError("TracePlus is not fitted: call fit(traces, labels) or TracePlus.load(path)")
        X = np.asarray(traces, float) if isinstance(traces, np.ndarray) else self.features(traces)
        if X.ndim != 2 or X.shape[1] != len(self.mean_):
            raise ValueError(f"expected {len(self.mean_)} features per answer, got shape {X.shape}")
        if self.constant_ is not None:
            out = np.full(len(X), self.intercept_)
        else:
            Z = ((X - self.mean_) / self.scale_)[:, self.kept_]
            out = Z @ self.coef_ + self.intercept_
        out[~np.all(np.isfinite(X), axis=1)] = np.nan
        return out

    def predict_proba(self, traces: Sequence[Trace] | TraceBatch | np.ndarray) -> np.ndarray:
        """c_TRACE+ = σ(b + wᵀ·z(φ)) ∈ (0, 1) per answer; NaN for zero-token answers."""
        if getattr(self, "constant_", None) is not None:
            X = np.asarray(traces, float) if isinstance(traces, np.ndarray) else self.features(traces)
            out = np.full(len(X), float(self.constant_))
            out[~np.all(np.isfinite(X), axis=1)] = np.nan
            return out
        d = self.decision_function(traces)
        with np.errstate(over="ignore"):
            return 1.0 / (1.0 + np.exp(-d))

    # ------------------------------------------------------------------ JSON persistence
    def to_dict(self) -> dict[str, Any]:
        if not hasattr(self, "kept_"):
            raise RuntimeError("cannot save an unfitted TracePlus")
        import sklearn

        from tracecal import __version__

        return {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "tracecal_version": __version__,
            "sklearn_version": sklearn.__version__,
            "params": self.get_params(),
            "feature_names": list(self.feature_names_),
            "means": self.mean_.tolist(),
            "sds": self.scale_.tolist(),
            "kept": self.kept_.tolist(),
            "weights": self.coef_.tolist(),
            "bias": self.intercept_,
            "constant": self.constant_,
            "n_train": self.n_train_,
            "base_rate": self.base_rate_,
        }

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the fitted calibrator as JSON (atomically)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2, allow_nan=False))
        os.replace(tmp, path)
        return path

    @classmethod
    def from_dict(cls, d: Any, source: str = "calibrator") -> TracePlus:
        def bad(msg: str) -> CalibratorFileError:
            return CalibratorFileError(f"{source}: {msg}")

        if not isinstance(d, dict):
            raise bad("not a JSON object")
        if d.get("format") != FORMAT:
            raise bad(f"not a TRACE+ calibrator (format={d.get('format')!r}, expected {FORMAT!r})")
        if d.get("version") != FORMAT_VERSION:
            raise bad(f"unsupported calibrator version {d.get('version')!r} (this tracecal reads {FORMAT_VERSION})")
        required = ("params", "feature_names", "means", "sds", "kept", "weights", "bias")
        missing = [k for k in required if k not in d]
        if missing:
            raise bad(f"missing keys {missing}")
        try:
            obj = cls(**d["params"])
        except TypeError as e:
            raise bad(f"bad params: {e}") from e
        names = feature_names(obj.lams, obj.seq_likelihood, obj.first_k)
        if list(d["feature_names"]) != names:
            raise bad(f"feature names {d['feature_names']} do not match the params (expected {names})")
        try:
            means = np.asarray(d["means"], dtype=np.float64)
            sds = np.asarray(d["sds"], dtype=np.float64)
            kept = np.asarray(d["kept"], dtype=bool)
            w = np.asarray(d["weights"], dtype=np.float64)
            bias = float(d["bias"])
            constant = None if d.get("constant") is None else float(d["constant"])
        except (TypeError, ValueError) as e:
            raise bad(f"non-numeric values: {e}") from e
        n = len(names)
        if not (len(means) == len(sds) == len(kept) == n):
            raise bad(f"means/sds/kept must each have {n} entries")
        if constant is None and len(w) != int(kept.sum()):
            raise bad(f"{len(w)} weights for {int(kept.sum())} kept features")
        arrays = np.concatenate([means, sds, w, [bias]] + ([[constant]] if constant is not None else []))
        if not np.all(np.isfinite(arrays)):
            raise bad("contains NaN or infinite numbers")
        if np.any(sds[kept] <= 0):
            raise bad("a kept feature has a non-positive sd")
        obj.feature_names_, obj.mean_, obj.scale_, obj.kept_ = names, means, sds, kept
        obj.coef_, obj.intercept_, obj.constant_ = w, bias, constant
        obj.n_train_ = int(d.get("n_train", 0))
        obj.base_rate_ = float(d.get("base_rate", float("nan")) if d.get("base_rate") is not None else float("nan"))
        return obj

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> TracePlus:
        """Read a calibrator written by `save`; refuses corrupt or foreign files with `CalibratorFileError`."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise
        except (OSError, UnicodeDecodeError) as e:
            raise CalibratorFileError(f"{path}: cannot read calibrator file ({e})") from e
        try:
            d = json.loads(text, parse_constant=lambda c: float("nan"))
        except json.JSONDecodeError as e:
            raise CalibratorFileError(f"{path}: not valid JSON ({e})") from e
        return cls.from_dict(d, source=str(path))
