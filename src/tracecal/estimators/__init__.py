"""Confidence estimators in a registry, each declaring what it needs (trace / beam / embedder / extra)."""

from tracecal.estimators import builtin as _builtin  # noqa: F401  (registers the estimators)
from tracecal.estimators.base import (
    BEAM,
    EMBEDDER,
    EXTRA,
    NEEDS,
    REGISTRY,
    TRACE,
    Estimator,
    Inputs,
    UnknownEstimatorError,
    get_estimator,
    needs_of,
    register,
    resolve_estimators,
)
from tracecal.estimators.builtin import PAPER_BASELINES

__all__ = [
    "BEAM",
    "EMBEDDER",
    "EXTRA",
    "NEEDS",
    "PAPER_BASELINES",
    "REGISTRY",
    "TRACE",
    "Estimator",
    "Inputs",
    "UnknownEstimatorError",
    "get_estimator",
    "needs_of",
    "register",
    "resolve_estimators",
]
