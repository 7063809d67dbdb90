"""Stat calculators (passes) in a registry; importing this package registers the built-in ones."""

from tracecal.passes import builtin as builtin_passes  # noqa: F401  (registers the built-in passes)
from tracecal.passes import hidden as hidden_passes  # noqa: F401  (registers the hidden-state pass)
from tracecal.passes import sampling as sampling_passes  # noqa: F401  (registers the sampling pass)
from tracecal.passes.base import (
    ANSWER,
    PASSES,
    TOKEN,
    VECTOR,
    Pass,
    UnknownStatError,
    get_pass,
    passes_for,
    provider_of,
    register_pass,
    stat_kind,
)

__all__ = [
    "ANSWER",
    "PASSES",
    "TOKEN",
    "VECTOR",
    "Pass",
    "UnknownStatError",
    "get_pass",
    "passes_for",
    "provider_of",
    "register_pass",
    "stat_kind",
]
