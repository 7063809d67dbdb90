"""TRACE+ by cross-validation (``trace_plus_cv``): a TRACE+ that cannot fall far below the best single trace
statistic, and goes beyond it only as far as held-out data support.

The candidates, each fitted on the calibration answers (``X`` traces, ``y`` ∈ {0, 1}):

1. **Platt on each single statistic** s_j — TRACE (`tracecal.signals.operators.trace_confidence`) and the 14 single
   trace statistics of `tracecal.signals.statistics` (min p, −Var(H), −M⁽⁴⁾(H), …):  logit P_j = a_j + w_j·z_j with
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
(`tracecal.calibrators.logistic.batched_platt`), the statistics ragged-array operators. scikit-learn conventions as
`tracecal.calibrators.traceplus.TracePlus`, on the same base (`tracecal.calibrators.features_base`): clone-able,
learned attributes end in ``_``, ``fit`` returns self; ``X`` traces, or a 2-D matrix whose first ``len(statistics)``
columns are the candidate statistics and the others extra features. Persistence through the JSON envelope of
`tracecal.calibrators.base` (∞ written "inf").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
from scipy.special import expit
from sklearn.model_selection import RepeatedStratifiedKFold

from tracecal._validation import SEED, Constraint, Flag, Interval, ListOf, Options
from tracecal.calibrators.base import CalibratorFileError, json_array, json_float
from tracecal.calibrators.features_base import PARAMS, PENALTIES, TraceFeatureCalibrator, Traces, logit, penalty_json
from tracecal.calibrators.logistic import DEFAULT_PENALTIES, batched_platt, log_loss, one_se_index, penalised_logistic
from tracecal.errors import ValidationError
from tracecal.signals.features import feature_names, trace_and_features
from tracecal.signals.operators import as_batch
from tracecal.signals.statistics import TRACE_STATISTICS, trace_statistic

__all__ = ["TracePlusCV", "DEFAULT_STATISTICS", "CONSENSUS", "EXTENDED", "COMBINE"]

DEFAULT_STATISTICS = ("trace", *TRACE_STATISTICS)
"""The candidate statistics: TRACE and the 14 single trace statistics (registry names)."""
CONSENSUS = "consensus"
EXTENDED = "extended"
COMBINE = ("bma", "select")
MONOTONE_EPS = 1e-6  # a rank-only slope (per sd): orders the answers, changes no probability beyond 1e-6


def _rank_only(v: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Log-odds coefficients (logit ȳ, ε·v): the base rate as probability, the candidate's own label-free order."""
    return np.r_[logit(float(np.clip(y.mean(), 1e-12, 1 - 1e-12))), MONOTONE_EPS * v]


def _finite_or_none(a: np.ndarray) -> list[float | None]:
    return [float(v) if math.isfinite(v) else None for v in a]


@PARAMS
class TracePlusCV(TraceFeatureCalibrator):
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

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "statistics": ListOf(Options(*DEFAULT_STATISTICS), "distinct statistic names", unique=True),
        "consensus": Flag(),
        "monotone": Flag(),
        "one_se": Flag(),
        "default_anchor": Options(*DEFAULT_STATISTICS, CONSENSUS),
        "penalties": PENALTIES,
        "combine": Options(*COMBINE),
        "n_folds": Interval(int, 2, None),
        "n_repeats": Interval(int, 1, None),
        "min_per_class": Interval(int, 2, None),
        "random_state": SEED,
    }
    _MODEL_KEYS: ClassVar[tuple[str, ...]] = (
        "candidates",
        "components",
        "weights",
        "cv_loglik",
        "anchor",
        "penalty",
        "cv_loss",
    )
    _TUPLE_PARAMS: ClassVar[tuple[str, ...]] = ("penalties", "statistics")

    statistics: Sequence[str] = DEFAULT_STATISTICS
    consensus: bool = True
    default_anchor: str = CONSENSUS
    penalties: Sequence[float] = DEFAULT_PENALTIES
    combine: str = "bma"
    monotone: bool = False
    n_folds: int = 5
    n_repeats: int = 3
    min_per_class: int = 5
    one_se: bool = True
    random_state: int = 0

    def _check_params(self) -> None:
        """The declared constraints, then the one that depends on two parameters: the default anchor must be a
        candidate (a listed statistic, or the consensus when ``consensus``)."""
        super()._check_params()
        allowed = [*self.statistics, CONSENSUS] if self.consensus else list(self.statistics)
        if self.default_anchor not in allowed:
            raise ValidationError(f"default_anchor must be one of {allowed}, got {self.default_anchor!r}")

    def trace_feature_names(self) -> list[str]:
        """Column names of `matrix`: the candidate statistics, then TRACE+'s 8 features."""
        self._check_params()
        return [*self.statistics, *feature_names()]

    def matrix(self, traces: Traces) -> np.ndarray:
        """(statistics, φ) per answer, shape (B, len(statistics) + 8); validates the traces' values."""
        self._check_params()
        b = as_batch(traces)
        c, phi = trace_and_features(b)  # c_TRACE and φ in one sweep
        cols = [c if s == "trace" else trace_statistic(s, b) for s in self.statistics]
        stats = np.column_stack(cols) if len(b) else np.zeros((0, len(self.statistics)))
        return np.column_stack([stats, phi])

    # ------------------------------------------------------------------ fit: the pieces
    def _setup(self, M: np.ndarray) -> None:
        """The candidate names for a fit matrix ``M`` (finite rows; standardisation set by `_fit_setup`)."""
        self.n_stats_ = min(len(self.statistics), M.shape[1])
        self.candidates_ = [*self.feature_names_[: self.n_stats_], *([CONSENSUS] if self.consensus else [])]
        self.penalty_, self.cv_loss_ = math.inf, np.full(len(self.penalties), np.nan)

    def _default_index(self) -> int:
        if self.default_anchor == CONSENSUS:
            return len(self.candidates_) - 1
        j = list(self.statistics).index(self.default_anchor)
        return j if j < self.n_stats_ else 0

    def _design(self, M: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(X1 = (1, kept standardised columns), S = candidate columns: the statistics' z, then the consensus)."""
        Z = np.where(self.kept_, self.standardise(M), 0.0)
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
            per_fold.append(-log_loss(a + S[te] * w, y[te]))
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
            per_fold.append(log_loss(np.column_stack(cols), y[te]))
        losses = self._oof(per_fold, folds, len(y))
        i = one_se_index(losses, pens, bool(self.one_se))
        return float(pens[i]), losses.mean(axis=0), -losses[:, i]

    def _weights(self, loglik: np.ndarray) -> np.ndarray:
        """BMA: w_c ∝ exp(Σ_i ℓ_ic) (pseudo-BMA with K-fold log-likelihoods); select: all on the largest."""
        total = loglik.sum(axis=0)
        if self.combine == "select":
            w = np.zeros(len(total))
            w[int(np.argmax(total))] = 1.0
            return w
        w = np.exp(total - total.max())
        return w / w.sum()

    def _cross_validate(self, X1: np.ndarray, S: np.ndarray, y: np.ndarray, C: np.ndarray) -> tuple[int, np.ndarray]:
        """(anchor, components) chosen by cross-validation: the candidates' out-of-fold log-likelihoods give the
        anchor and the weights; the extension on the anchor is added when CV picks a finite λ."""
        folds = self._folds(y)
        loglik, fits = self._cv_candidates(S, y, folds)
        anchor = int(np.argmax(loglik.sum(axis=0)))
        if any(not math.isinf(float(v)) for v in self.penalties):
            lam, self.cv_loss_, ext = self._cv_extension(X1, S, y, anchor, folds, fits)
            if not math.isinf(lam):
                self.penalty_ = lam
                C = np.vstack([C, C[anchor] + penalised_logistic(X1, y, X1 @ C[anchor], lam)])
                self.candidates_.append(EXTENDED)
                loglik = np.column_stack([loglik, ext])
        self.cv_loglik_ = loglik.mean(axis=0)
        self.weights_ = self._weights(loglik)
        return anchor, C

    # ------------------------------------------------------------------ fit
    def fit(self, X: Traces | np.ndarray, y: Any) -> TracePlusCV:
        """Fit on the calibration answers: ``X`` traces (or a matrix, module docstring), ``y`` ∈ {0, 1}.

        Zero-token answers (NaN rows) are left out, with a warning; single-class labels give a constant
        calibrator (base rate, `SingleClassWarning`). Returns ``self``.
        """
        M, yy = self._fit_setup(X, y)
        self._setup(M)
        anchor = self._default_index()
        self.weights_ = np.eye(len(self.candidates_))[anchor]
        self.cv_loglik_ = np.full(len(self.candidates_), np.nan)
        if self._single_class(yy):
            self.anchor_ = self.candidates_[anchor]
            self.components_ = np.zeros((len(self.candidates_), 1 + int(self.kept_.sum())))
            return self
        X1, S = self._design(M)
        V = self._directions()
        C = self._components(S, yy, V)
        if min(yy.sum(), len(yy) - yy.sum()) < int(self.min_per_class):  # too few labels to learn a slope
            C[anchor] = _rank_only(V[anchor], yy)
        else:
            anchor, C = self._cross_validate(X1, S, yy, C)
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
            X1, _ = self._design(np.where(bad[:, None], 0.0, M))
            out = expit(X1 @ self.components_.T) @ self.weights_
        out[bad] = np.nan
        return out

    def decision_function(self, X: Traces | np.ndarray) -> np.ndarray:
        """The log-odds of correctness log(P / (1 − P)) per answer (±inf at 0 / 1); NaN for zero-token answers."""
        p = self.predict_proba(X)
        with np.errstate(divide="ignore"):
            return np.log(p) - np.log1p(-p)

    # ------------------------------------------------------------------ JSON persistence (the envelope's state)
    def _model_state(self) -> dict[str, Any]:
        return {
            "candidates": list(self.candidates_),
            "components": self.components_.tolist(),
            "weights": self.weights_.tolist(),
            "cv_loglik": _finite_or_none(self.cv_loglik_),
            "anchor": self.anchor_,
            "penalty": penalty_json(self.penalty_),
            "cv_loss": _finite_or_none(self.cv_loss_),
        }

    def _set_model_state(self, state: Mapping[str, Any]) -> None:
        self.n_stats_ = min(len(self.statistics), len(self.feature_names_))
        pen = state["penalty"]
        self.penalty_ = math.inf if pen == "inf" else json_float(pen, "state.penalty", 0.0, math.inf, open_lo=True)
        cands = [*self.feature_names_[: self.n_stats_], *([CONSENSUS] if self.consensus else [])]
        cands += [] if math.isinf(self.penalty_) else [EXTENDED]
        if state["candidates"] != cands:
            raise CalibratorFileError(f"state.candidates {state['candidates']!r} do not match the params ({cands})")
        self.candidates_ = cands
        self.components_ = self._rows(state["components"], len(cands), 1 + int(self.kept_.sum()))
        w = json_array(state["weights"], "state.weights", len(cands))
        if np.any(w < 0) or abs(w.sum() - 1.0) > 1e-9:
            raise CalibratorFileError("state.weights must be ≥ 0 and sum to 1")
        if state["anchor"] not in cands or state["anchor"] == EXTENDED:
            raise CalibratorFileError(f"state.anchor {state['anchor']!r} is not one of the candidates {cands}")
        self.weights_, self.anchor_ = w, state["anchor"]
        self.cv_loglik_ = self._values(state["cv_loglik"], len(cands), "state.cv_loglik", -math.inf, 0.0)
        self.cv_loss_ = self._values(state["cv_loss"], len(self.penalties), "state.cv_loss", 0.0, math.inf)

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
