"""The TRACE family (docs/method.md §2–§3): TRACE itself and the TRACE+ calibrators wrapped as estimators.

All higher = more confident. p_t = exp(−s_t); H_t in nats; operators from `tracecal.signals.operators`, computed
over the whole batch at once. TRACE+ and its variants are `FittedModelEstimator` s: the calibrator of
`tracecal.calibrators` fitted on the calibration split, whose probability is the confidence.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from tracecal.calibrators.traceplus import TracePlus
from tracecal.calibrators.traceplus_cv import TracePlusCV
from tracecal.calibrators.traceplus_prior import TracePlusPrior
from tracecal.estimators.base import Estimator, FittedModelEstimator, Inputs, register
from tracecal.signals.operators import TRACE_CONSTRAINTS, TraceConfig, trace_confidence

__all__ = [
    "TraceEstimator",
    "TracePlusEstimator",
    "TracePlusSeqLik",
    "TracePlusPriorEstimator",
    "TracePlusPriorMonotone",
    "TracePlusCVEstimator",
]


# ------------------------------------------------------------------------------------------- TRACE family
@register
class TraceEstimator(Estimator):
    """c_TRACE = exp(−R), R = α·D_λ(H) + β·M^(w)(H) + γ·L_ρ(s) (docs/method.md §2)."""

    name = "trace"
    family = "TRACE"
    description = "TRACE: exp(−(0.4·D_2(H) + 0.4·M^4(H) + 0.2·L_1/4(s)))"
    _parameter_constraints = TRACE_CONSTRAINTS

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

    def check_params(self) -> Estimator:
        """Each setting against `TRACE_CONSTRAINTS`, then alpha + beta + gamma = 1 (`TraceConfig`)."""
        super().check_params()
        TraceConfig(**self.get_params())
        return self

    def score(self, inputs: Inputs) -> np.ndarray:
        cfg = TraceConfig(self.alpha, self.beta, self.gamma, self.lam, self.window, self.rho, self.kernel)
        return trace_confidence(inputs.batch, cfg)


@register
class TracePlusEstimator(FittedModelEstimator):
    """TRACE+: logistic calibrator on the 8 trace features, fitted on the calibration split (docs/method.md §3)."""

    name = "trace_plus"
    family = "TRACE"
    description = "TRACE+: σ(b + wᵀ·z(φ)), φ = 8 trace features, L2 logistic (C = 1)"
    model_class: ClassVar[Any] = TracePlus

    def __init__(self, C: float = 1.0, seq_likelihood: bool = False) -> None:
        self.C, self.seq_likelihood = C, seq_likelihood


@register
class TracePlusSeqLik(TracePlusEstimator):
    name = "trace_plus_seqlik"
    description = "TRACE+ ablation: + min p, geometric-mean p, share of p < 0.5"

    def __init__(self, C: float = 1.0, seq_likelihood: bool = True) -> None:
        super().__init__(C, seq_likelihood)


@register
class TracePlusPriorEstimator(FittedModelEstimator):
    """TRACE+ shrunk toward Platt(TRACE): deviations with an L2 prior, λ by 5-fold CV
    (`tracecal.calibrators.traceplus_prior`)."""

    name = "trace_plus_prior"
    family = "TRACE"
    description = "TRACE+ with a prior: Platt(TRACE) + L2-shrunk deviations on the 8 features, λ by CV (∞ = Platt)"
    model_class: ClassVar[Any] = TracePlusPrior

    def __init__(self, monotone: bool = False) -> None:
        self.monotone = monotone


@register
class TracePlusPriorMonotone(TracePlusPriorEstimator):
    name = "trace_plus_prior_mono"
    description = "trace_plus_prior whose prior keeps TRACE's sign: a negative Platt slope gives the base rate"

    def __init__(self, monotone: bool = True) -> None:
        super().__init__(monotone)


@register
class TracePlusCVEstimator(FittedModelEstimator):
    """Platt on the CV-selected best single trace statistic, extended when CV favours it
    (`tracecal.calibrators.traceplus_cv`)."""

    name = "trace_plus_cv"
    family = "TRACE"
    description = (
        "TRACE+ by CV: Platt on the best of TRACE and the 14 trace statistics (repeated 5-fold CV), "
        "+ L2-shrunk deviations on them and TRACE+'s features, λ by the one-SE rule"
    )
    model_class: ClassVar[Any] = TracePlusCV
