"""TRACE+: a calibrated P(correct) from trace-only features (docs/method.md §3).

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
`CalibratorFileError`. `tracecal.calibrators.load_calibrator` reads a file of any calibrator class.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
from sklearn.linear_model import LogisticRegression

from tracecal._validation import Constraint, Interval
from tracecal.calibrators.base import CalibratorFileError, json_array, json_float
from tracecal.calibrators.features_base import FEATURE_CONSTRAINTS, PARAMS, LinearTraceCalibrator, Traces, logit

__all__ = ["TracePlus"]


@PARAMS
class TracePlus(LinearTraceCalibrator):
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

    Example (synthetic traces: a long, uncertain answer is more often wrong):

    >>> import numpy as np
    >>> from tracecal.calibrators import TracePlus
    >>> from tracecal.traces.trace import TraceBatch
    >>> rng = np.random.default_rng(0)
    >>> hard = rng.random(60)
    >>> H = [rng.gamma(1.0, 0.3 + 2 * h, 5) for h in hard]
    >>> S = [rng.gamma(1.0, 0.2 + h, 5) for h in hard]
    >>> traces, y = TraceBatch.from_lists(S, H), (rng.random(60) > hard).astype(int)
    >>> cal = TracePlus().fit(traces, y)
    >>> p = cal.predict_proba(traces)
    >>> p.shape, bool(((p > 0) & (p < 1)).all())
    ((60,), True)
    >>> cal.feature_names_[:2]
    ['first3_entropy_conf', 'mean_entropy_conf']
    """

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "C": Interval(float, 0, None, closed="neither"),
        **FEATURE_CONSTRAINTS,
    }
    _MODEL_KEYS: ClassVar[tuple[str, ...]] = ("weights", "bias")
    _TUPLE_PARAMS: ClassVar[tuple[str, ...]] = ("lams",)
    _LEGACY_TAIL: ClassVar[bool] = True

    C: float = 1.0

    # ------------------------------------------------------------------ features
    def trace_feature_names(self) -> list[str]:
        """Names of the columns of `features` with the current parameters."""
        return self.plus_feature_names()

    def features(self, traces: Traces) -> np.ndarray:
        """The raw feature matrix φ, shape (B, n_features); validates the traces' values (`as_batch`)."""
        return self.plus_features(traces)

    def matrix(self, traces: Traces) -> np.ndarray:
        """The same as `features`: TracePlus's columns are TRACE+'s features φ."""
        return self.plus_features(traces)

    def _mismatch_message(self) -> str:
        if self.feature_names_[0] == "x0":
            return (
                f"this TracePlus was fitted on a {self.n_features_in_}-column feature matrix, not on trace "
                "features: it cannot score traces (pass a matrix of the same columns, or refit on traces)"
            )
        return (
            f"TracePlus parameters changed since fit: features {self.trace_feature_names()} != fitted "
            f"{self.feature_names_}; refit, or restore the parameters"
        )

    # ------------------------------------------------------------------ fit
    def fit(self, X: Traces | np.ndarray, y: Any) -> TracePlus:
        """Fit on the calibration split: ``X`` traces (or a precomputed feature matrix), ``y`` ∈ {0, 1}.

        Zero-token answers (NaN features) are left out of the fit, with a warning saying how many; labels
        with one class make a constant calibrator (base rate, `SingleClassWarning`). Returns ``self``.
        """
        phi, yy = self._fit_setup(X, y)
        width = phi.shape[1]
        if self._single_class(yy):
            self.mean_, self.scale_, self.kept_ = np.zeros(width), np.ones(width), np.zeros(width, dtype=bool)
        if self.constant_ is not None or not self.kept_.any():  # no usable feature: intercept-only model
            self.coef_ = np.zeros(int(self.kept_.sum()))
            self.intercept_ = logit(self.base_rate_) if 0 < self.base_rate_ < 1 else 0.0
            return self
        lr = LogisticRegression(C=float(self.C), max_iter=1000).fit(self._standardised(phi), yy)
        self.coef_ = lr.coef_.ravel().astype(np.float64)
        self.intercept_ = float(lr.intercept_[0])
        return self

    # ------------------------------------------------------------------ JSON persistence (the envelope's state)
    def _model_state(self) -> dict[str, Any]:
        return {"weights": self.coef_.tolist(), "bias": self.intercept_}

    def _set_model_state(self, state: Mapping[str, Any]) -> None:
        weights = json_array(state["weights"], "state.weights")
        n_kept = int(self.kept_.sum())
        if self.constant_ is None and weights.size != n_kept:
            raise CalibratorFileError(f"state.weights has {weights.size} entries for {n_kept} kept features")
        self.coef_, self.intercept_ = weights, json_float(state["bias"], "state.bias")
