"""Confidence estimators in a registry, each declaring the stats it reads (and so the passes it needs)."""

# Importing a module registers its estimators: this order is the registry's (the default order of every run).
# isort: off
from tracecal.estimators import trace as trace_estimators  # noqa: F401
from tracecal.estimators import baselines as baseline_estimators  # noqa: F401
from tracecal.estimators import extra as extra_estimators  # noqa: F401
from tracecal.estimators import sampling as sampling_estimators  # noqa: F401
from tracecal.estimators import hidden as hidden_estimators  # noqa: F401

# isort: on
from tracecal.estimators.base import (
    REGISTRY,
    TRACE_STATS,
    Estimator,
    FittedModelEstimator,
    Inputs,
    MissingStatError,
    UnknownEstimatorError,
    default_estimators,
    estimator_groups,
    get_estimator,
    needs_of,
    passes_of,
    register,
    resolve_estimators,
)
from tracecal.estimators.baselines import PAPER_BASELINES

__all__ = [
    "PAPER_BASELINES",
    "REGISTRY",
    "TRACE_STATS",
    "Estimator",
    "FittedModelEstimator",
    "Inputs",
    "MissingStatError",
    "UnknownEstimatorError",
    "default_estimators",
    "estimator_groups",
    "get_estimator",
    "needs_of",
    "passes_of",
    "register",
    "resolve_estimators",
]
