"""TRACE+ by cross-validation (``trace_plus_cv``): a TRACE+ that cannot fall far below the best single trace
statistic, and goes beyond it only as far as held-out data support.

The candidates, each fitted on the calibration answers (``X`` traces, ``y`` ∈ {0, 1}):

1. **Platt on each single statistic** s_j — TRACE (`tracecal.signals.operators.trace_confidence`) and the 14 single trace
   statistics of `tracecal.signals.statistics` (min p, −Var(H), −M⁽⁴⁾(H), …):  logit P_j = a_j + w_j·z_j with
   z_j = (s_j − μ_j)/σ_j, the slope free (a statistic can be reversed when the labels say so);
2. **Platt on the label-free consensus** z̄ = mean_j z_j (equal weights: an "improper linear model"), its slope kept
   ≥ 0 — a negative one gives the base rate, with z̄ kept only to order the answers;
3. **an extension** centred on the best of them (the anchor j*) on all columns x = (statistics, TRACE+'s 8 features
   φ), standardised:  logit P = a_j* + w_j*·z_j* + θ₀ + θᵀ·z(x),  θ = argmin Σ_i ℓ_i + (λ/2)·(θ₀² + ‖θ‖²), ℓ the
   log-loss (the MAP estimate under a Gaussian prior centred on Platt(anchor)); λ from ``penalties`` by the
   one-standard-error rule (the largest λ whose CV log-loss is within one SE of the least; λ = ∞: no extension).

Everything is judged by repeated stratified K-fold cross-validation on the calibration answers only (``n_repeats`` ×
K folds, K = min(``n_folds``, answers of the smaller class); every candidate refitted inside each fold; each
answer's out-of-fold log-likelihood ℓ_ic (nats) averaged over the repeats). The prediction is the mixture
P = Σ_c w_c·P_c with pseudo-Bayesian-model-averaging weights w_c ∝ exp(Σ_i ℓ_ic) (``combine="bma"``), or the
single candidate of largest Σ_i ℓ_ic (``"select"``). With fewer than ``min_per_class`` answers of a class there is
no cross-validation and no slope to trust: the probability is the base rate, and the ``default_anchor`` candidate
(the label-free consensus by default) only orders the answers.
docs/statistics.md §5 argues the design and reports what it does on the runs.

Vectorised: the Platt fits of all candidates on a fold are one batched Newton iteration over columns
(`batched_platt`), the statistics ragged-array operators. scikit-learn conventions as `tracecal.calibrators.traceplus.TracePlus`
(clone-able, learned attributes end in ``_``, ``fit`` returns self; ``X`` traces, or a 2-D matrix whose first
``len(statistics)`` columns are the candidate statistics and the others extra features); persistence through the
JSON envelope of `tracecal.calibrators.base` (∞ written "inf").
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy.special import expit
from sklearn.model_selection import RepeatedStratifiedKFold
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
from tracecal.calibrators.traceplus_prior import DEFAULT_PENALTIES, penalised_logistic
from tracecal.signals.features import feature_names, trace_plus_features
from tracecal.signals.operators import as_batch, trace_confidence
from tracecal.signals.statistics import TRACE_STATISTICS, trace_statistic
from tracecal.stats.metrics import SingleClassWarning
from tracecal.traces.trace import Trace, TraceBatch

__all__ = ["TracePlusCV", "DEFAULT_STATISTICS", "CONSENSUS", "EXTENDED", "COMBINE", "batched_platt"]

DEFAULT_STATISTICS = ("trace", *TRACE_STATISTICS)
"""The candidate statistics: TRACE and the 14 single trace statistics (registry names)."""
CONSENSUS = "consensus"
EXTENDED = "extended"
COMBINE = ("bma", "select")
SD_EPS = 1e-12
MONOTONE_EPS = 1e-6  # a rank-only slope (per sd): orders the answers, changes no probability beyond 1e-6
PLATT_RIDGE = 1e-6  # = 1/C of `PlattCalibrator` (C = 1e6): the slope's L2 on the summed log-loss
Traces = Sequence[Trace] | TraceBatch


def batched_platt(
    Z: np.ndarray, y: np.ndarray, ridge: float = PLATT_RIDGE, max_iter: int = 50, tol: float = 1e-10
) -> tuple[np.ndarray, np.ndarray]:
    """Platt scaling of every column of ``Z`` (n, K) at once: (a, w), each (K,), minimising per column
    Σ_i [log(1 + e^{η_i}) − y_i·η_i] + (ridge/2)·w², η = a + w·Z[:, j].

    Newton's method on all K two-parameter problems together (closed-form 2×2 solves, steps capped at 5 in
    log-odds); on standardised columns it matches `PlattCalibrator` (whose slope penalty is the same 1/C).
    """
    yf = y.astype(np.float64)[:, None]
    p0 = float(np.clip(yf.mean(), 1e-6, 1 - 1e-6))
    a, w = np.full(Z.shape[1], math.log(p0 / (1 - p0))), np.zeros(Z.shape[1])
    for _ in range(max_iter):
        p = expit(a + Z * w)
        r, v = p - yf, p * (1.0 - p)
        ga, gw = r.sum(axis=0), (r * Z).sum(axis=0) + ridge * w
        haa, haw, hww = v.sum(axis=0), (v * Z).sum(axis=0), (v * Z * Z).sum(axis=0) + ridge
        det = np.maximum(haa * hww - haw * haw, 1e-300)
        da, dw = np.clip((hww * ga - haw * gw) / det, -5, 5), np.clip((haa * gw - haw * ga) / det, -5, 5)
        a, w = a - da, w - dw
        if max(np.abs(da).max(), np.abs(dw).max()) < tol:
            break
    return a, w


def _log_loss(eta: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per-answer log-loss log(1 + e^η) − y·η (nats) of log-odds ``eta`` (n, C); ``y`` (n,)."""
    return np.logaddexp(0.0, eta) - y.astype(np.float64)[:, None] * eta


def _rank_only(v: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Log-odds coefficients (logit ȳ, ε·v): the base rate as probability, the candidate's own label-free order."""
    return np.r_[logit(float(np.clip(y.mean(), 1e-12, 1 - 1e-12))), MONOTONE_EPS * v]


def _finite_or_none(a: np.ndarray) -> list[float | None]:
    return [float(v) if math.isfinite(v) else None for v in a]


class TracePlusCV(Calibrator):
    """A cross-validated mixture of Platt-scaled single trace statistics, with an L2-shrunk extension on TRACE+'s
    features when CV favours it (see the module docstring).

    Args:
        statistics: candidate statistics (``"trace"`` and names of `tracecal.signals.statistics.TRACE_STATISTICS`).
        consensus: add the label-free consensus (mean of the standardised statistics) as a candidate.
        default_anchor: the candidate whose order is used with too few labels (with the base rate as probability):
            ``"consensus"`` or a statistic.
        penalties: λ grid of the extension (each > 0; ``math.inf`` = no extension); ``(inf,)``: no extension.
        combine: ``"bma"`` (weights ∝ exp(out-of-fold log-likelihood)) or ``"select"`` (the best candidate only).
        monotone: every statistic keeps its sign (a negative Platt slope gives the base rate, the statistic's own
            order kept); by default only the consensus does and a statistic may be reversed.
        n_folds, n_repeats: K (≥ 2) and repeats (≥ 1) of the stratified K-fold cross-validation.
        min_per_class: cross-validate only when each class has ≥ this many answers (≥ 2).
        one_se: λ of the extension by the one-standard-error rule (else the least CV loss).
        random_state: seed of the folds.

    Learned: ``feature_names_``, ``n_features_in_``, ``mean_``, ``scale_``, ``kept_`` (the standardisation);
    ``candidates_`` (names), ``components_`` (one row of log-odds coefficients per candidate on (1, kept standardised
    columns)), ``weights_`` (sum to 1), ``cv_loglik_`` (out-of-fold log-likelihood per answer, nats; NaN without
    CV), ``anchor_`` (the candidate of highest CV log-likelihood, or the default), ``penalty_`` (λ of the
    extension; inf: none), ``cv_loss_`` (its CV log-loss per λ), ``n_train_``, ``base_rate_``, ``constant_``.
    """

    def __init__(
        self,
        statistics: Sequence[str] = DEFAULT_STATISTICS,
        consensus: bool = True,
        default_anchor: str = CONSENSUS,
        penalties: Sequence[float] = DEFAULT_PENALTIES,
        combine: str = "bma",
        monotone: bool = False,
        n_folds: int = 5,
        n_repeats: int = 3,
        min_per_class: int = 5,
        one_se: bool = True,
        random_state: int = 0,
    ) -> None:
        self.statistics = statistics
        self.consensus = consensus
        self.default_anchor = default_anchor
        self.penalties = penalties
        self.combine = combine
        self.monotone = monotone
        self.n_folds = n_folds
        self.n_repeats = n_repeats
        self.min_per_class = min_per_class
        self.one_se = one_se
        self.random_state = random_state

    def __sklearn_tags__(self):  # type: ignore[no-untyped-def]
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True  # a NaN row is a zero-token answer: left out of fit, NaN out
        tags.target_tags.required = True
        tags.classifier_tags = ClassifierTags(multi_class=False)
        return tags

    # ------------------------------------------------------------------ parameters
    def _check_params(self) -> None:
        stats, known = self.statistics, ("trace", *TRACE_STATISTICS)
        if isinstance(stats, str) or not isinstance(stats, list | tuple) or not stats:
            raise ValueError(f"statistics must be a non-empty list of statistic names, got {stats!r}")
        for s in stats:
            if s not in known:
                raise ValueError(f"statistics: unknown statistic {s!r}; known: {', '.join(known)}")
        if len(set(stats)) != len(stats):
            raise ValueError(f"statistics must not repeat a name, got {list(stats)}")
        for flag in ("consensus", "monotone", "one_se"):
            if not isinstance(getattr(self, flag), bool | np.bool_):
                raise ValueError(f"{flag} must be true or false, got {getattr(self, flag)!r}")
        allowed = [*stats, CONSENSUS] if self.consensus else list(stats)
        if self.default_anchor not in allowed:
            raise ValueError(f"default_anchor must be one of {allowed}, got {self.default_anchor!r}")
        if not isinstance(self.penalties, list | tuple | np.ndarray) or len(self.penalties) == 0:
            raise ValueError(
                f"penalties must be a non-empty list of L2 strengths λ > 0 (inf allowed), got {self.penalties!r}"
            )
        for i, lam in enumerate(self.penalties):
            if isinstance(lam, bool) or not isinstance(lam, int | float | np.floating) or not lam > 0:
                raise ValueError(f"penalties[{i}] must be a number > 0 (or inf), got {lam!r}")
        if self.combine not in COMBINE:
            raise ValueError(f"combine must be one of {COMBINE}, got {self.combine!r}")
        check_number(self.n_folds, "n_folds", 2, integer=True)
        check_number(self.n_repeats, "n_repeats", 1, integer=True)
        check_number(self.min_per_class, "min_per_class", 2, integer=True)
        check_number(self.random_state, "random_state", 0, integer=True)

    @classmethod
    def _params_from_json(cls, params: dict[str, Any]) -> dict[str, Any]:
        if isinstance(params.get("penalties"), list):
            params["penalties"] = tuple(math.inf if v == "inf" else v for v in params["penalties"])
        if isinstance(params.get("statistics"), list):
            params["statistics"] = tuple(params["statistics"])
        return params

    def to_dict(self) -> dict[str, Any]:
        """The JSON envelope (`Calibrator.to_dict`), with an infinite λ written as ``"inf"``."""
        d = super().to_dict()
        d["params"]["penalties"] = ["inf" if math.isinf(v) else float(v) for v in self.penalties]
        return d

    def trace_feature_names(self) -> list[str]:
        """Column names of `matrix`: the candidate statistics, then TRACE+'s 8 features."""
        self._check_params()
        return [*self.statistics, *feature_names()]

    def matrix(self, traces: Traces) -> np.ndarray:
        """(statistics, φ) per answer, shape (B, len(statistics) + 8); validates the traces' values."""
        self._check_params()
        b = as_batch(traces)
        cols = [trace_confidence(b) if s == "trace" else trace_statistic(s, b) for s in self.statistics]
        stats = np.column_stack(cols) if len(b) else np.zeros((0, len(self.statistics)))
        return np.column_stack([stats, trace_plus_features(b)])

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
                f"this TracePlusCV was fitted on columns {self.feature_names_[:3]}…, not on these trace features: "
                "refit it on traces with the current parameters (or pass a matrix of the fitted columns)"
            )
        return M

    # ------------------------------------------------------------------ fit: the pieces
    def _setup(self, M: np.ndarray) -> None:
        """Standardisation and the candidate names for a fit matrix ``M`` (finite rows)."""
        names = self.trace_feature_names()
        self.feature_names_ = names if M.shape[1] == len(names) else [f"x{i}" for i in range(M.shape[1])]
        self.n_stats_ = min(len(self.statistics), M.shape[1])
        self.candidates_ = [*self.feature_names_[: self.n_stats_], *([CONSENSUS] if self.consensus else [])]
        self.mean_, sd = M.mean(axis=0), M.std(axis=0)
        self.kept_ = sd > SD_EPS
        self.scale_ = np.where(self.kept_, sd, 1.0)
        self.constant_: float | None = None
        self.penalty_, self.cv_loss_ = math.inf, np.full(len(self.penalties), np.nan)

    def _default_index(self) -> int:
        if self.default_anchor == CONSENSUS:
            return len(self.candidates_) - 1
        j = list(self.statistics).index(self.default_anchor)
        return j if j < self.n_stats_ else 0

    def _standardised(self, M: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(X1 = (1, kept standardised columns), S = candidate columns: the statistics' z, then the consensus)."""
        Z = np.where(self.kept_, (M - self.mean_) / self.scale_, 0.0)
        S = Z[:, : self.n_stats_]
        if self.consensus:
            S = np.column_stack([S, S.mean(axis=1)])
        return np.column_stack([np.ones(len(M)), Z[:, self.kept_]]), S

    def _signed(self) -> np.ndarray:
        """Which candidates keep their sign (slope ≥ 0): the consensus always, every statistic with ``monotone``."""
        keep = np.full(len(self.candidates_), bool(self.monotone))
        if self.consensus:
            keep[-1] = True
        return keep

    def _platt_fold(self, S: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Platt of every candidate column on these rows; a sign-keeping candidate's negative slope → the base rate."""
        a, w = batched_platt(S, y)
        flip = self._signed()[: len(w)] & (w < 0)
        p = float(np.clip(y.mean(), 1e-12, 1 - 1e-12))
        a[flip], w[flip] = math.log(p / (1 - p)), 0.0
        return a, w

    def _directions(self) -> np.ndarray:
        """V, (candidates, kept columns): candidate column c of S is X1[:, 1:] @ V[c] (a unit vector for a statistic;
        1/K on each statistic for the consensus)."""
        pos = np.cumsum(self.kept_) - 1  # column j's position among the kept ones
        V = np.zeros((self.n_stats_ + int(bool(self.consensus)), int(self.kept_.sum())))
        for j in np.flatnonzero(self.kept_[: self.n_stats_]):
            V[j, pos[j]] = 1.0
            if self.consensus:
                V[-1, pos[j]] = 1.0 / self.n_stats_
        return V

    def _components(self, S: np.ndarray, y: np.ndarray, V: np.ndarray) -> np.ndarray:
        """Each candidate's Platt fitted on all rows (`batched_platt`: the exact optimum of `PlattCalibrator`'s
        objective, which sklearn's lbfgs reaches to ~1e-4) as a row of log-odds coefficients on X1 = (1, kept
        standardised columns): η = a + w·S_c = a + w·V_c·X1[:, 1:]."""
        a, w = batched_platt(S, y)
        C = np.column_stack([a, w[:, None] * V])
        for c in np.flatnonzero(self._signed() & (w <= 0)):  # keeps its sign: its own order, the base rate
            C[c] = _rank_only(V[c], y)
        return C

    def _folds(self, y: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        k = min(int(self.n_folds), int(min(y.sum(), len(y) - y.sum())))
        cv = RepeatedStratifiedKFold(n_splits=k, n_repeats=int(self.n_repeats), random_state=int(self.random_state))
        return list(cv.split(np.zeros(len(y)), y))

    def _oof(self, per_fold: list[np.ndarray], folds: list, n: int) -> np.ndarray:
        """Each answer's held-out value averaged over the repeats: (n, C) from per-fold (n_test, C) values."""
        total = np.zeros((n, per_fold[0].shape[1]))
        for (_, te), v in zip(folds, per_fold, strict=True):
            total[te] += v
        return total / int(self.n_repeats)

    def _cv_candidates(self, S: np.ndarray, y: np.ndarray, folds: list) -> tuple[np.ndarray, list]:
        """(per-answer out-of-fold log-likelihood (n, C) of every candidate, per-fold Platt fits (a, w))."""
        fits, per_fold = [], []
        for tr, te in folds:
            a, w = self._platt_fold(S[tr], y[tr])
            fits.append((a, w))
            per_fold.append(-_log_loss(a + S[te] * w, y[te]))
        return self._oof(per_fold, folds, len(y)), fits

    def _cv_extension(
        self, X1: np.ndarray, S: np.ndarray, y: np.ndarray, j: int, folds: list, fits: list
    ) -> tuple[float, np.ndarray, np.ndarray]:
        """(λ, CV log-loss per λ, per-answer out-of-fold log-likelihood at λ): deviations from each fold's Platt of
        candidate j on the extended columns, λ by the one-SE rule (the largest λ within one SE of the least)."""
        pens = np.asarray([float(v) for v in self.penalties])
        per_fold = []
        for (tr, te), (a, w) in zip(folds, fits, strict=True):
            off = a[j] + w[j] * S[:, j]
            cols = [
                off[te] if math.isinf(lam) else off[te] + X1[te] @ penalised_logistic(X1[tr], y[tr], off[tr], lam)
                for lam in pens
            ]
            per_fold.append(_log_loss(np.column_stack(cols), y[te]))
        losses = self._oof(per_fold, folds, len(y))
        mean = losses.mean(axis=0)
        i = int(np.argmin(mean))
        if self.one_se:
            ok = np.flatnonzero(mean <= mean[i] + losses[:, i].std(ddof=1) / math.sqrt(len(y)))
            i = int(ok[np.argmax(pens[ok])])
        return float(pens[i]), mean, -losses[:, i]

    def _weights(self, loglik: np.ndarray) -> np.ndarray:
        """BMA: w_c ∝ exp(Σ_i ℓ_ic) (pseudo-BMA with K-fold log-likelihoods); select: all on the largest."""
        total = loglik.sum(axis=0)
        if self.combine == "select":
            w = np.zeros(len(total))
            w[int(np.argmax(total))] = 1.0
            return w
        w = np.exp(total - total.max())
        return w / w.sum()

    # ------------------------------------------------------------------ fit
    def fit(self, X: Traces | np.ndarray, y: Any) -> TracePlusCV:
        """Fit on the calibration answers: ``X`` traces (or a matrix, module docstring), ``y`` ∈ {0, 1}.

        Zero-token answers (NaN rows) are left out, with a warning; single-class labels give a constant
        calibrator (base rate, `SingleClassWarning`). Returns ``self``.
        """
        self._check_params()
        M = self._as_matrix(X, reset=True)
        yy = fit_labels(y, len(M), "TracePlusCV")
        M, yy = finite_fit_rows(M, yy, "TracePlusCV")
        self.n_train_, self.base_rate_ = int(len(yy)), float(yy.mean())
        self._setup(M)
        anchor = self._default_index()
        self.weights_ = np.eye(len(self.candidates_))[anchor]
        self.cv_loglik_ = np.full(len(self.candidates_), np.nan)
        if yy.min() == yy.max():
            warnings.warn(
                f"TracePlusCV.fit: the labels have a single class ({self.n_train_} examples); "
                "predicting the constant base rate",
                SingleClassWarning,
                stacklevel=2,
            )
            self.constant_, self.anchor_ = self.base_rate_, self.candidates_[anchor]
            self.components_ = np.zeros((len(self.candidates_), 1 + int(self.kept_.sum())))
            return self
        X1, S = self._standardised(M)
        V = self._directions()
        C = self._components(S, yy, V)
        if min(yy.sum(), len(yy) - yy.sum()) < int(self.min_per_class):  # too few labels to learn a slope
            C[anchor] = _rank_only(V[anchor], yy)
        else:
            folds = self._folds(yy)
            loglik, fits = self._cv_candidates(S, yy, folds)
            anchor = int(np.argmax(loglik.sum(axis=0)))
            if any(not math.isinf(float(v)) for v in self.penalties):
                lam, self.cv_loss_, ext = self._cv_extension(X1, S, yy, anchor, folds, fits)
                if not math.isinf(lam):
                    self.penalty_ = lam
                    C = np.vstack([C, C[anchor] + penalised_logistic(X1, yy, X1 @ C[anchor], lam)])
                    self.candidates_.append(EXTENDED)
                    loglik = np.column_stack([loglik, ext])
            self.cv_loglik_ = loglik.mean(axis=0)
            self.weights_ = self._weights(loglik)
        self.anchor_, self.components_ = self.candidates_[anchor], C
        return self

    # ------------------------------------------------------------------ predict
    def predict_proba(self, X: Traces | np.ndarray) -> np.ndarray:
        """P(correct) = Σ_c w_c·σ(η_c) ∈ [0, 1] per answer; NaN for zero-token answers."""
        self._check_fitted()
        M = self._as_matrix(X, reset=False)
        bad = ~np.all(np.isfinite(M), axis=1)
        if self.constant_ is not None:
            out = np.full(len(M), self.constant_)
        else:
            X1, _ = self._standardised(np.where(bad[:, None], 0.0, M))
            out = expit(X1 @ self.components_.T) @ self.weights_
        out[bad] = np.nan
        return out

    def decision_function(self, X: Traces | np.ndarray) -> np.ndarray:
        """The log-odds of correctness log(P / (1 − P)) per answer (±inf at 0 / 1); NaN for zero-token answers."""
        p = self.predict_proba(X)
        with np.errstate(divide="ignore"):
            return np.log(p) - np.log1p(-p)

    # ------------------------------------------------------------------ JSON persistence (the envelope's state)
    def _get_state(self) -> dict[str, Any]:
        return {
            "feature_names": list(self.feature_names_),
            "means": self.mean_.tolist(),
            "sds": self.scale_.tolist(),
            "kept": self.kept_.tolist(),
            "candidates": list(self.candidates_),
            "components": self.components_.tolist(),
            "weights": self.weights_.tolist(),
            "cv_loglik": _finite_or_none(self.cv_loglik_),
            "anchor": self.anchor_,
            "penalty": "inf" if math.isinf(self.penalty_) else self.penalty_,
            "cv_loss": _finite_or_none(self.cv_loss_),
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
            "candidates",
            "components",
            "weights",
            "cv_loglik",
            "anchor",
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
        self.feature_names_, self.n_features_in_, self.mean_, self.scale_, self.kept_ = names, n, means, sds, kept
        self.n_stats_ = min(len(self.statistics), n)
        pen = state["penalty"]
        self.penalty_ = math.inf if pen == "inf" else json_float(pen, "state.penalty", 0.0, open_lo=True)
        cands = [*names[: self.n_stats_], *([CONSENSUS] if self.consensus else [])]
        cands += [] if math.isinf(self.penalty_) else [EXTENDED]
        if state["candidates"] != cands:
            raise CalibratorFileError(f"state.candidates {state['candidates']!r} do not match the params ({cands})")
        self.candidates_ = cands
        self.components_ = self._rows(state["components"], len(cands), 1 + int(kept.sum()))
        w = json_array(state["weights"], "state.weights", len(cands))
        if np.any(w < 0) or abs(w.sum() - 1.0) > 1e-9:
            raise CalibratorFileError("state.weights must be ≥ 0 and sum to 1")
        if state["anchor"] not in cands or state["anchor"] == EXTENDED:
            raise CalibratorFileError(f"state.anchor {state['anchor']!r} is not one of the candidates {cands}")
        self.weights_, self.anchor_ = w, state["anchor"]
        self.cv_loglik_ = self._values(state["cv_loglik"], len(cands), "state.cv_loglik", -math.inf, 0.0)
        self.cv_loss_ = self._values(state["cv_loss"], len(self.penalties), "state.cv_loss", 0.0, math.inf)
        constant = state["constant"]
        self.constant_ = None if constant is None else json_float(constant, "state.constant", 0.0, 1.0)
        self.base_rate_ = json_float(state["base_rate"], "state.base_rate", 0.0, 1.0)
        self.n_train_ = int(check_number(state["n_train"], "state.n_train", 1, integer=True, error=CalibratorFileError))

    @staticmethod
    def _rows(v: Any, n: int, width: int) -> np.ndarray:
        if not isinstance(v, list) or len(v) != n:
            raise CalibratorFileError(f"state.components must list {n} rows (one per candidate)")
        return np.array([json_array(r, f"state.components[{i}]", width) for i, r in enumerate(v)]).reshape(n, width)

    @staticmethod
    def _values(v: Any, n: int, what: str, lo: float, hi: float) -> np.ndarray:
        if not isinstance(v, list) or len(v) != n:
            raise CalibratorFileError(f"{what} must list {n} values (null where not cross-validated)")
        return np.array([np.nan if x is None else json_float(x, what, lo, hi) for x in v])
