"""The 19 baselines of docs/method.md §4: the 14 single trace statistics, 3 beam-search scores, TokenSAR and MARS.

All higher = more confident. p_t = exp(−s_t); H_t in nats. A zero-token answer scores NaN (the harness maps NaN
to the least confident value and reports how many it mapped). `PAPER_BASELINES` lists them in the paper's order.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tracecal._validation import Interval, ListOf
from tracecal.estimators.base import Estimator, Inputs, register
from tracecal.signals.statistics import TRACE_STATISTICS, TraceStatistic, trace_statistic
from tracecal.stats.metrics import auroc

__all__ = ["PAPER_BASELINES", "BeamRatio", "BeamSoftmax", "BeamTailThinness", "BeamNegEntropy", "TokenSAR", "MARS"]


def _nan_empty(inputs: Inputs, x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    x[inputs.batch.lengths == 0] = np.nan
    return x


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
    _parameter_constraints = {
        "k": (Interval(int, 2, None), None),
        "candidates": ListOf(Interval(int, 2, None), "beam ranks ≥ 2"),
    }

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


class BeamSoftmax(Estimator):
    """A function ``of_q`` of q = softmax of one answer's beam scores (``beam`` stat, one row per answer)."""

    family = "beam"
    stats = frozenset({"beam"})

    @staticmethod
    def of_q(q: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def score(self, inputs: Inputs) -> np.ndarray:
        return self.of_q(_beam_q(_beam(inputs)))


@register
class BeamTailThinness(BeamSoftmax):
    """½·Σ_i q_i² with q = softmax(beam scores) (our reading of "tail thinness")."""

    name = "beam_tail_thinness"
    description = "½·Σ q_i², q = softmax of the 5 beam scores"
    of_q = staticmethod(lambda q: 0.5 * np.sum(q * q, axis=1))


@register
class BeamNegEntropy(BeamSoftmax):
    """−H(q) = Σ_i q_i·ln q_i (nats), q = softmax of the beam scores."""

    name = "beam_neg_entropy"
    description = "−H(q), q = softmax of the 5 beam scores"
    of_q = staticmethod(lambda q: np.sum(np.where(q > 0, q * np.log(np.where(q > 0, q, 1.0)), 0.0), axis=1))


# ------------------------------------------------------------------------------------- semantic (18–19)
@register
class TokenSAR(Estimator):
    """TokenSAR: −Σ_t s_t·R̃_t with R̃ the normalised leave-one-token-out relevance (docs/method.md §4)."""

    name, family, stats = "tokensar", "semantic", frozenset({"tokensar_rel"})
    description = "TokenSAR: −Σ s_t·R̃_t, relevance from all-MiniLM-L6-v2 cosine (substitute for the cross-encoder)"
    substitute = "TokenSAR relevance: all-MiniLM-L6-v2 sentence-embedding cosine instead of the original cross-encoder"

    def score(self, inputs: Inputs) -> np.ndarray:
        rel = inputs.stat("tokensar_rel")
        return _nan_empty(inputs, -inputs.batch.segments.reduce(np.add, inputs.batch.surprisal * rel))


@register
class MARS(Estimator):
    """MARS: Π_t p_t^{w_t}, w_t = 1/(2T) + u_t/2, u = word-level leave-one-out importance (sums to 1)."""

    name, family, stats = "mars", "semantic", frozenset({"mars_u"})
    description = "MARS: Π p_t^(1/(2T) + u_t/2), word importance from all-MiniLM-L6-v2 leave-one-out"
    substitute = (
        "MARS importance: word-level leave-one-out all-MiniLM-L6-v2 relevance instead of the trained BERT scorer"
    )

    def score(self, inputs: Inputs) -> np.ndarray:
        seg = inputs.batch.segments
        T = seg.broadcast(seg.lengths.astype(np.float64))
        w = 1.0 / (2.0 * T) + inputs.stat("mars_u") / 2.0
        return _nan_empty(inputs, np.exp(-seg.reduce(np.add, w * inputs.batch.surprisal)))


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
