"""The estimators of METHOD §2–§4: TRACE, TRACE+, the 19 baselines, P(True) and verbalised confidence.

All higher = more confident. p_t = exp(−s_t); H_t in nats; operators from `tracecal.signals.operators`, computed
over the whole batch at once. A zero-token answer scores NaN (the harness maps NaN to the least confident
value and reports how many it mapped).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tracecal.calibrators.traceplus import TracePlus
from tracecal.calibrators.traceplus_cv import TracePlusCV
from tracecal.calibrators.traceplus_prior import TracePlusPrior
from tracecal.estimators.base import Estimator, Inputs, register
from tracecal.signals.operators import TraceConfig, trace_confidence
from tracecal.signals.statistics import TRACE_STATISTICS, TraceStatistic, trace_statistic
from tracecal.stats.metrics import auroc


def _nan_empty(inputs: Inputs, x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    x[inputs.batch.lengths == 0] = np.nan
    return x


# ------------------------------------------------------------------------------------------- TRACE family
@register
class Trace_(Estimator):
    """c_TRACE = exp(−R), R = α·D_λ(H) + β·M^(w)(H) + γ·L_ρ(s) (METHOD §2)."""

    name = "trace"
    family = "TRACE"
    description = "TRACE: exp(−(0.4·D_2(H) + 0.4·M^4(H) + 0.2·L_1/4(s)))"

    def __init__(
        self,
        alpha: float = 0.4,
        beta: float = 0.4,
        gamma: float = 0.2,
        lam: float = 2.0,
        window: int = 4,
        rho: float = 0.25,
        kernel: str = "exp",
    ) -> None:
        self.alpha, self.beta, self.gamma, self.lam = alpha, beta, gamma, lam
        self.window, self.rho, self.kernel = window, rho, kernel

    def score(self, inputs: Inputs) -> np.ndarray:
        cfg = TraceConfig(self.alpha, self.beta, self.gamma, self.lam, self.window, self.rho, self.kernel)
        return trace_confidence(inputs.batch, cfg)


@register
class TracePlusEstimator(Estimator):
    """TRACE+: logistic calibrator on the 8 trace features, fitted on the calibration split (METHOD §3)."""

    name = "trace_plus"
    family = "TRACE"
    description = "TRACE+: σ(b + wᵀ·z(φ)), φ = 8 trace features, L2 logistic (C = 1)"
    self_calibrated = True
    needs_fit = True

    def __init__(self, C: float = 1.0, seq_likelihood: bool = False) -> None:
        self.C, self.seq_likelihood = C, seq_likelihood

    def fit(self, inputs: Inputs, y: np.ndarray) -> TracePlusEstimator:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # zero-token answers / single class: reported by harness
            self.model_ = TracePlus(C=self.C, seq_likelihood=self.seq_likelihood).fit(inputs.batch, y)
        return self

    def score(self, inputs: Inputs) -> np.ndarray:
        return self.model_.predict_proba(inputs.batch)


@register
class TracePlusSeqLik(TracePlusEstimator):
    name = "trace_plus_seqlik"
    description = "TRACE+ ablation: + min p, geometric-mean p, share of p < 0.5"

    def __init__(self, C: float = 1.0, seq_likelihood: bool = True) -> None:
        super().__init__(C, seq_likelihood)


@register
class TracePlusPriorEstimator(Estimator):
    """TRACE+ shrunk toward Platt(TRACE): deviations with an L2 prior, λ by 5-fold CV (`tracecal.calibrators.traceplus_prior`)."""

    name = "trace_plus_prior"
    family = "TRACE"
    description = "TRACE+ with a prior: Platt(TRACE) + L2-shrunk deviations on the 8 features, λ by CV (∞ = Platt)"
    self_calibrated = True
    needs_fit = True

    def __init__(self, monotone: bool = False) -> None:
        self.monotone = monotone

    def fit(self, inputs: Inputs, y: np.ndarray) -> TracePlusPriorEstimator:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # zero-token answers / single class: reported by harness
            self.model_ = TracePlusPrior(monotone=self.monotone).fit(inputs.batch, y)
        return self

    def score(self, inputs: Inputs) -> np.ndarray:
        return self.model_.predict_proba(inputs.batch)


@register
class TracePlusPriorMonotone(TracePlusPriorEstimator):
    name = "trace_plus_prior_mono"
    description = "trace_plus_prior whose prior keeps TRACE's sign: a negative Platt slope gives the base rate"

    def __init__(self, monotone: bool = True) -> None:
        super().__init__(monotone)


@register
class TracePlusCVEstimator(Estimator):
    """Platt on the CV-selected best single trace statistic, extended when CV favours it (`tracecal.calibrators.traceplus_cv`)."""

    name = "trace_plus_cv"
    family = "TRACE"
    description = (
        "TRACE+ by CV: Platt on the best of TRACE and the 14 trace statistics (repeated 5-fold CV), "
        "+ L2-shrunk deviations on them and TRACE+'s features, λ by the one-SE rule"
    )
    self_calibrated = True
    needs_fit = True

    def fit(self, inputs: Inputs, y: np.ndarray) -> TracePlusCVEstimator:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # zero-token answers / single class: reported by harness
            self.model_ = TracePlusCV().fit(inputs.batch, y)
        return self

    def score(self, inputs: Inputs) -> np.ndarray:
        return self.model_.predict_proba(inputs.batch)


# -------------------------------------------------------------- likelihood, entropy, trajectory (1–14)
def _trace_estimator(stat: TraceStatistic) -> type[Estimator]:
    """Register the label-free estimator of one single trace statistic (`tracecal.signals.statistics`)."""

    def score(self: Estimator, inputs: Inputs) -> np.ndarray:
        return trace_statistic(self.name, inputs.batch)

    cls = type(
        stat.name,
        (Estimator,),
        {
            "name": stat.name,
            "family": stat.family,
            "description": stat.description,
            "score": score,
            "__doc__": stat.description,
        },
    )
    return register(cls)


for _stat in TRACE_STATISTICS.values():
    _trace_estimator(_stat)


# ------------------------------------------------------------------------------------------ beam (15–17)
def _beam(inputs: Inputs) -> np.ndarray:
    return inputs.stat("beam")


@register
class BeamRatio(Estimator):
    """exp(s_1 − s_k): margin of the best beam over beam k; k ∈ {2..B} chosen on the calibration split."""

    name = "beam_ratio"
    family = "beam"
    stats = frozenset({"beam"})
    description = "beam score ratio exp(s_1 − s_k), k chosen by calibration-split AUROC"
    needs_fit = True

    def __init__(self, k: int | None = None, candidates: Sequence[int] = (2, 3, 4, 5)) -> None:
        self.k, self.candidates = k, tuple(candidates)

    def _score_k(self, beam: np.ndarray, k: int) -> np.ndarray:
        with np.errstate(over="ignore", invalid="ignore"):
            return np.exp(beam[:, 0] - beam[:, k - 1])

    def fit(self, inputs: Inputs, y: np.ndarray) -> BeamRatio:
        beam = _beam(inputs)
        if self.k is not None:
            self.k_ = self.k
            return self
        best, best_k = -np.inf, self.candidates[0]
        for k in (c for c in self.candidates if c <= beam.shape[1]):
            s = self._score_k(beam, k)
            ok = np.isfinite(s)
            if ok.sum() > 1 and 0 < y[ok].sum() < ok.sum():
                a = auroc(y[ok], s[ok])
                if a > best:
                    best, best_k = a, k
        self.k_ = best_k
        return self

    def score(self, inputs: Inputs) -> np.ndarray:
        return self._score_k(_beam(inputs), getattr(self, "k_", self.k or 2))


def _beam_q(beam: np.ndarray) -> np.ndarray:
    z = beam - np.nanmax(beam, axis=1, keepdims=True)
    e = np.where(np.isfinite(z), np.exp(z), 0.0)
    return e / e.sum(axis=1, keepdims=True)


@register
class BeamTailThinness(Estimator):
    """½·Σ_i q_i² with q = softmax(beam scores) (our reading of "tail thinness")."""

    name = "beam_tail_thinness"
    family = "beam"
    stats = frozenset({"beam"})
    description = "½·Σ q_i², q = softmax of the 5 beam scores"

    def score(self, inputs: Inputs) -> np.ndarray:
        q = _beam_q(_beam(inputs))
        return 0.5 * np.sum(q * q, axis=1)


@register
class BeamNegEntropy(Estimator):
    """−H(q), q = softmax of the beam scores."""

    name = "beam_neg_entropy"
    family = "beam"
    stats = frozenset({"beam"})
    description = "−H(q), q = softmax of the 5 beam scores"

    def score(self, inputs: Inputs) -> np.ndarray:
        q = _beam_q(_beam(inputs))
        return np.sum(np.where(q > 0, q * np.log(np.where(q > 0, q, 1.0)), 0.0), axis=1)


# ------------------------------------------------------------------------------------- semantic (18–19)
@register
class TokenSAR(Estimator):
    """TokenSAR: −Σ_t s_t·R̃_t with R̃ the normalised leave-one-token-out relevance (METHOD §4)."""

    name = "tokensar"
    family = "semantic"
    stats = frozenset({"tokensar_rel"})
    description = "TokenSAR: −Σ s_t·R̃_t, relevance from all-MiniLM-L6-v2 cosine (substitute for the cross-encoder)"
    substitute = "TokenSAR relevance: all-MiniLM-L6-v2 sentence-embedding cosine instead of the original cross-encoder"

    def score(self, inputs: Inputs) -> np.ndarray:
        rel = inputs.stat("tokensar_rel")
        return _nan_empty(inputs, -inputs.batch.segments.reduce(np.add, inputs.batch.surprisal * rel))


@register
class MARS(Estimator):
    """MARS: Π_t p_t^{w_t}, w_t = 1/(2T) + u_t/2, u = word-level leave-one-out importance (sums to 1)."""

    name = "mars"
    family = "semantic"
    stats = frozenset({"mars_u"})
    description = "MARS: Π p_t^(1/(2T) + u_t/2), word importance from all-MiniLM-L6-v2 leave-one-out"
    substitute = (
        "MARS importance: word-level leave-one-out all-MiniLM-L6-v2 relevance instead of the trained BERT scorer"
    )

    def score(self, inputs: Inputs) -> np.ndarray:
        seg = inputs.batch.segments
        T = seg.broadcast(seg.lengths.astype(np.float64))
        w = 1.0 / (2.0 * T) + inputs.stat("mars_u") / 2.0
        return _nan_empty(inputs, np.exp(-seg.reduce(np.add, w * inputs.batch.surprisal)))


# ------------------------------------------------------------------------------------------- extra inference
class _ExtraInference(Estimator):
    """Reads one per-answer value computed by the extra-inference pass (`tracecal.passes.selfeval`)."""

    family = "extra inference"
    field: str = ""

    def score(self, inputs: Inputs) -> np.ndarray:
        return np.asarray(inputs.stat(self.field), dtype=np.float64)


@register
class PTrue(_ExtraInference):
    """P(True) = P(yes)/(P(yes)+P(no)) on the model's own answer (one extra forward pass)."""

    name = "p_true"
    field = "p_true"
    stats = frozenset({"p_true"})
    description = "P(True): P(yes)/(P(yes)+P(no)) asked about its own answer"


@register
class Verbalized(_ExtraInference):
    """Verbalised confidence: probability-weighted mean of the 0–100 number the model would state."""

    name = "verbalized"
    field = "verbalized"
    stats = frozenset({"verbalized"})
    description = "verbalised 0–100 confidence, expectation over the number tokens"


PAPER_BASELINES = [
    "first_token_prob",
    "mean_prob",
    "norm_seq_prob",
    "seq_likelihood",
    "min_prob",
    "high_prob_rate",
    "neg_mean_entropy",
    "neg_max_entropy",
    "neg_first3_entropy",
    "neg_last3_entropy",
    "neg_window_entropy",
    "neg_entropy_var",
    "neg_entropy_slope",
    "prob_slope",
    "beam_ratio",
    "beam_tail_thinness",
    "beam_neg_entropy",
    "tokensar",
    "mars",
]
