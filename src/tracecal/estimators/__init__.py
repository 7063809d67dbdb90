"""Confidence estimators in a registry, each declaring the stats it reads (and so the passes it needs)."""

from tracecal.estimators import builtin as builtin_estimators  # noqa: F401  (registers the estimators)
from tracecal.estimators.base import (
    REGISTRY,
    TRACE_STATS,
    Estimator,
    Inputs,
    MissingStatError,
    UnknownEstimatorError,
    estimator_groups,
    get_estimator,
    needs_of,
    passes_of,
    register,
    resolve_estimators,
)
from tracecal.estimators.builtin import PAPER_BASELINES

__all__ = [
    "PAPER_BASELINES",
    "REGISTRY",
    "TRACE_STATS",
    "Estimator",
    "Inputs",
    "MissingStatError",
    "UnknownEstimatorError",
    "estimator_groups",
    "get_estimator",
    "needs_of",
    "passes_of",
    "register",
    "resolve_estimators",
]
