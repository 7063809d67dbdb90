"""`HiddenProbe`: a linear probe on hidden-state summaries (optionally with the TRACE+ features), fitted on the
calibration split alone.

For a feature matrix X (n answers × p columns: the hidden summaries, then ``passthrough`` further columns, e.g. the
8 TRACE+ features φ), the fit is

1. standardise: z = (x − m) / s per column over the calibration answers (s = 1 for a constant column; a
   non-finite value is replaced by its column's mean m before anything else);
2. reduce: the first p − ``passthrough`` columns to their top k = min(``n_components``, n − 1, p − passthrough)
   principal components (SVD of the standardised block, signs fixed so each component's largest loading is
   positive), each score divided by its standard deviation; the passthrough columns stay as they are;
3. logistic regression with an L2 penalty on the k (+ passthrough) columns, its inverse strength C chosen from
   ``Cs`` by stratified ``cv``-fold cross-validated log-loss on the calibration answers (min(cv, smallest class)
   folds; the PCA sees no label, so CV over C leaks none), then refitted on all of them.

Every step is linear, so the fitted probe is stored folded into one weight vector on the raw columns:
P(correct | x) = σ(wᵀx + b) (``coef_``, ``intercept_``), plus the column means used for non-finite values. The JSON
file (`Calibrator.save`; never pickle) holds p + 1 weights and p means (Qwen2.5-1.5B, 3 layers: 2·9,216 + 1 numbers),
and the probe refuses a matrix of another width (another model, other layers) with a `ValidationError` saying so.
With one class in the labels the probe is its base rate.

Registered in `tracecal.calibrators.CALIBRATOR_CLASSES` as a calibrator that reads ``"hidden"`` (`READS`): applied
to answers (`Calibrator.confidence`, ``fit_answers``) its x is each trace's hidden summary ``trace.hidden``
((2, k, d) → its 2·k·d numbers: the k means, then the k first states, layer-major, as the hidden pass stores them)
followed, with ``trace_plus``, by TRACE+'s 8 features φ of the trace. It records the layers (1-based) its summaries
came from (``layers_``: the ``layers`` given, else those the traces record, ``trace.hidden_layers``) in its file, so
a scorer asks the backend for the same ones (`backend_options`: ``hidden_layers``), and refuses traces of other
layers. Its summaries need a backend that declares ``hidden_states`` (``needs``: HF); trace files hold none.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold

from tracecal._validation import SEED, Constraint, Flag, Interval, ListOf
from tracecal.backends.registry import HIDDEN_STATES
from tracecal.calibrators.base import NO_HIDDEN, Calibrator, json_array, json_float
from tracecal.calibrators.traceplus import TracePlus
from tracecal.calibrators.values import CalibratorFileError
from tracecal.errors import ValidationError
from tracecal.traces.trace import Trace

__all__ = ["HiddenProbe", "DEFAULT_CS", "N_PLUS"]

N_PLUS = len(TracePlus().trace_feature_names())
"""The number of TRACE+ features φ a ``trace_plus`` probe reads after the hidden summary (8)."""

DEFAULT_CS = tuple(float(c) for c in np.logspace(-4, 2, 13))
"""The grid of inverse L2 strengths C the cross-validation chooses from (10⁻⁴ … 10², half-decade steps)."""


RANK_TOL = 1e-6
"""A principal direction whose singular value is under ``RANK_TOL`` × the largest is round-off (the rows span fewer
dimensions: repeated answers) and is dropped, so that no weight is divided by a standard deviation of ~0."""


def _pca(Z: np.ndarray, k: int) -> np.ndarray:
    """The top ``k`` principal directions of the (centred) rows of ``Z`` (those above `RANK_TOL`: at most its rank),
    shape (≤ k, p), signs fixed."""
    _, sv, vt = np.linalg.svd(Z, full_matrices=False)
    v = vt[: min(k, int(np.sum(sv > RANK_TOL * sv[0])) if len(sv) and sv[0] > 0 else 0)]
    sign = np.sign(v[np.arange(len(v)), np.abs(v).argmax(1)])
    return np.asarray(v * sign[:, None])


def _log_loss(y: np.ndarray, p: np.ndarray) -> float:
    p = np.clip(p, 1e-12, 1 - 1e-12)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


class HiddenProbe(Calibrator):
    """Standardise → PCA → L2 logistic with C by CV (module docstring); reads a feature matrix (n, p).

    Args:
        n_components: principal components kept of the hidden block (at most n − 1 and its width).
        passthrough: trailing columns that are standardised but not reduced (the TRACE+ features: 8).
        Cs: the inverse L2 strengths to choose from; cv: folds of the cross-validation; seed: of its shuffle.
        layers: the 1-based layers of the hidden summaries (None: those the traces record, else unknown).
        trace_plus: read TRACE+'s 8 features of each trace after its hidden summary (needs ``passthrough=8``).
    """

    reads: ClassVar[str] = "hidden"
    needs: ClassVar[frozenset[str]] = frozenset({HIDDEN_STATES})
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "n_components": Interval(int, 1, None),
        "passthrough": Interval(int, 0, None),
        "Cs": ListOf(Interval(float, 0.0, None, closed="neither"), "positive numbers"),
        "cv": Interval(int, 2, None),
        "seed": SEED,
        "layers": (None, ListOf(Interval(int, 1, None), "layer indices (1-based)", unique=True)),
        "trace_plus": Flag(),
    }

    def __init__(
        self,
        n_components: int = 64,
        passthrough: int = 0,
        Cs: Sequence[float] = DEFAULT_CS,
        cv: int = 5,
        seed: int = 0,
        layers: Sequence[int] | None = None,
        trace_plus: bool = False,
    ) -> None:
        self.n_components, self.passthrough, self.Cs, self.cv, self.seed = n_components, passthrough, Cs, cv, seed
        self.layers, self.trace_plus = layers, trace_plus

    @classmethod
    def _params_from_json(cls, params: dict[str, Any]) -> dict[str, Any]:
        lists = {k: tuple(params[k]) for k in ("Cs", "layers") if isinstance(params.get(k), list)}
        return {**params, **lists}

    def _check_params(self) -> None:
        super()._check_params()
        if self.trace_plus and self.passthrough != N_PLUS:
            n = N_PLUS
            raise ValidationError(f"trace_plus=True appends TRACE+'s {n} features: set passthrough={n}")

    def backend_options(self) -> dict[str, Any]:
        """``{"hidden_layers": [...]}``: the layers this probe was fitted on, for ``generate`` / ``trace_answers``."""
        self._check_fitted()
        if self.layers_ is None:
            raise ValidationError(
                "this HiddenProbe records no hidden layers (fitted on a bare matrix without layers=): refit it on "
                "traces recorded with hidden_layers=..., or with HiddenProbe(layers=[...])"
            )
        return {"hidden_layers": list(self.layers_)}

    # ------------------------------------------------------------------ fitting
    def _traces_layers(self, traces: list[Trace], fitted: tuple[int, ...] | None) -> tuple[int, ...] | None:
        """The layers the traces' summaries come from, refused where they differ from each other or ``fitted``."""
        seen = {t.hidden_layers for t in traces if t.hidden_layers is not None}
        if len(seen) > 1:
            raise ValidationError(f"the traces hold hidden summaries of different layers {sorted(seen)}: use one set")
        got = tuple(seen.pop()) if seen else None
        if fitted is not None and got is not None and got != fitted:
            raise ValidationError(
                f"this HiddenProbe was fitted on the hidden states of layers {list(fitted)}, the traces hold layers "
                f"{list(got)}: record them with hidden_layers={list(fitted)} (cal.backend_options())"
            )
        return fitted if fitted is not None else got

    def _features(self, X: Any, fitting: bool) -> np.ndarray:
        """The feature matrix of X: X itself, or for traces their hidden summaries (then TRACE+'s φ)."""
        if isinstance(X, list | tuple) and not X and not fitting:  # no answers: no rows
            return np.zeros((0, int(getattr(self, "n_features_in_", 0))))
        if not (isinstance(X, list | tuple) and X and all(isinstance(t, Trace) for t in X)):
            if fitting:
                self.layers_ = None if self.layers is None else tuple(int(x) for x in self.layers)
            return np.asarray(X, dtype=np.float64)
        traces = list(X)
        if any(t.hidden is None for t in traces):
            raise ValidationError(f"HiddenProbe {NO_HIDDEN.format(where='traces recorded without hidden_layers')}")
        wanted = (None if self.layers is None else tuple(int(x) for x in self.layers)) if fitting else self.layers_
        layers = self._traces_layers(traces, wanted)
        if fitting:
            self.layers_ = layers
        widths = {np.shape(t.hidden) for t in traces}
        if len(widths) != 1 or None in widths:
            raise ValidationError(f"every trace must carry a hidden summary of one shape, got shapes {sorted(widths)}")
        blocks = [np.stack([np.asarray(t.hidden, dtype=np.float64).ravel() for t in traces])]
        if self.trace_plus:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # zero-token answers: NaN features, imputed
                blocks.append(TracePlus().features(traces))
        return np.hstack(blocks)

    def _matrix(self, X: Any, reset: bool) -> np.ndarray:
        M = self._features(X, reset)
        if M.ndim != 2:
            raise ValidationError(f"HiddenProbe reads a 2-D feature matrix (answers × features), got shape {M.shape}")
        if reset:
            if M.shape[1] <= self.passthrough:
                raise ValidationError(
                    f"{M.shape[1]} features leave no hidden columns besides passthrough={self.passthrough}"
                )
            return M
        if M.shape[1] != self.n_features_in_:
            raise ValidationError(
                f"this HiddenProbe was fitted on {self.n_features_in_} features per answer, got {M.shape[1]}: score "
                "answers of the same model, with the same layers (and TRACE+ features) it was fitted with"
            )
        return np.where(np.isfinite(M), M, self.means_)

    def fit(self, X: Any, y: Any) -> HiddenProbe:
        """Fit on a feature matrix X (n, p) and labels y ∈ {0, 1}."""
        self._check_params()
        M = self._matrix(X, reset=True)
        if self.layers_ is not None and (M.shape[1] - self.passthrough) % (2 * len(self.layers_)):
            raise ValidationError(
                f"{M.shape[1] - self.passthrough} hidden columns are not 2 summaries of {len(self.layers_)} layers "
                f"{list(self.layers_)}: give the layers the summaries come from"
            )
        yv = np.asarray(y, dtype=np.float64)
        if yv.shape != (len(M),) or not np.isin(yv, (0.0, 1.0)).all():
            raise ValidationError(f"labels must be 0 or 1, one per answer ({len(M)}), got shape {yv.shape}")
        col_mean = np.nanmean(np.where(np.isfinite(M), M, np.nan), axis=0)
        self.means_ = np.nan_to_num(col_mean)
        self.n_features_in_ = M.shape[1]
        M = np.where(np.isfinite(M), M, self.means_)
        if yv.min() == yv.max():
            self.coef_, self.intercept_, self.C_, self.k_ = np.zeros(M.shape[1]), _logit(float(yv[0])), np.nan, 0
            return self
        sd = M.std(0)
        sd = np.where(sd > 0, sd, 1.0)
        Z = (M - self.means_) / sd
        h = M.shape[1] - self.passthrough
        V = _pca(Z[:, :h], min(self.n_components, len(M) - 1, h))
        if not len(V) and not self.passthrough:  # every hidden column constant: the base rate
            self.coef_, self.intercept_, self.C_, self.k_ = np.zeros(M.shape[1]), _logit(float(yv.mean())), np.nan, 0
            return self
        U = Z[:, :h] @ V.T
        usd = U.std(0)
        usd = np.where(usd > 0, usd, 1.0)
        F = np.hstack([U / usd, Z[:, h:]])
        self.C_ = self._choose_C(F, yv)
        lr = LogisticRegression(C=self.C_, max_iter=2000).fit(F, yv)
        c = lr.coef_[0]
        w = np.concatenate([(V.T @ (c[: len(V)] / usd)) / sd[:h], c[len(V) :] / sd[h:]])
        self.coef_, self.k_ = w, len(V)
        self.intercept_ = float(lr.intercept_[0] - w @ self.means_)
        return self

    def _choose_C(self, F: np.ndarray, y: np.ndarray) -> float:
        folds = min(self.cv, int(min(y.sum(), len(y) - y.sum())))
        if folds < 2:
            return float(np.median(self.Cs))
        split = StratifiedKFold(folds, shuffle=True, random_state=self.seed).split(F, y)
        pairs = list(split)
        losses = []
        for C in self.Cs:
            loss = 0.0
            for tr, te in pairs:
                lr = LogisticRegression(C=float(C), max_iter=2000).fit(F[tr], y[tr])
                loss += _log_loss(y[te], lr.predict_proba(F[te])[:, 1]) * len(te)
            losses.append(loss)
        return float(self.Cs[int(np.argmin(losses))])

    def decision_function(self, X: Any) -> np.ndarray:
        """wᵀx + b per answer (non-finite values read as the calibration mean of their column)."""
        self._check_fitted()
        return np.asarray(self._matrix(X, reset=False) @ self.coef_ + self.intercept_)

    def predict_proba(self, X: Any) -> np.ndarray:
        """P(correct) = σ(wᵀx + b) per answer."""
        return np.asarray(1.0 / (1.0 + np.exp(-np.clip(self.decision_function(X), -500, 500))))

    # ------------------------------------------------------------------ persistence
    def _get_state(self) -> dict[str, Any]:
        return {
            "coef": self.coef_.tolist(),
            "intercept": float(self.intercept_),
            "means": self.means_.tolist(),
            "C": float(self.C_) if np.isfinite(self.C_) else None,
            "k": int(self.k_),
            "layers": None if self.layers_ is None else [int(x) for x in self.layers_],
        }

    def _set_state(self, state: Mapping[str, Any]) -> None:
        coef = json_array(state["coef"], "coef")
        means = json_array(state["means"], "means", n=len(coef), bound=math.inf)
        if len(coef) <= self.passthrough:
            raise CalibratorFileError(f"coef holds {len(coef)} weights, not more than passthrough={self.passthrough}")
        self.coef_, self.means_ = coef, means
        self.intercept_ = json_float(state["intercept"], "intercept")
        self.n_features_in_ = len(coef)
        C = state.get("C")
        self.C_ = np.nan if C is None else json_float(C, "C", lo=0.0, hi=math.inf, open_lo=True)
        k = state.get("k")
        if not isinstance(k, int) or isinstance(k, bool) or k < 0:
            raise CalibratorFileError(f"k must be a count of components, got {k!r}")
        self.k_ = k
        self.layers_ = _state_layers(state.get("layers"), len(coef) - self.passthrough)


def _state_layers(layers: Any, hidden_width: int) -> tuple[int, ...] | None:
    """The ``layers`` of a probe file (None: unrecorded), checked: distinct indices ≥ 1 that split the hidden
    columns into 2 summaries per layer."""
    if layers is None:
        return None
    ok = isinstance(layers, list) and layers and all(isinstance(x, int) and not isinstance(x, bool) for x in layers)
    if not ok or min(layers) < 1 or len(set(layers)) != len(layers) or hidden_width % (2 * len(layers)):
        raise CalibratorFileError(
            f"layers must be distinct layer indices ≥ 1 that split the {hidden_width} hidden weights into 2 "
            f"summaries per layer, got {layers!r}"
        )
    return tuple(layers)


def _logit(p: float) -> float:
    p = min(max(p, 1e-6), 1 - 1e-6)
    return float(np.log(p / (1 - p)))
