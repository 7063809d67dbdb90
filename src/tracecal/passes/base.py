"""Passes: stat calculators that run once per answer and store columns for the estimators to read.

The LM-Polygraph idea: the expensive statistics (a generation with its trace, a beam search, sentence
embeddings, a self-evaluation prompt) are computed once per answer by a *pass*, stored in the run directory
shard by shard, and read by any number of cheap estimators. A pass is one class:

* ``name``: also the folder of its shards in the run directory;
* ``depends``: the passes whose output it reads (every pass but the generation reads the traces);
* ``provides``: the stats it computes, each with its shape per answer (`ANSWER`: one float; `VECTOR`: a
  fixed-length float vector; `TOKEN`: one float per answer token, aligned with the trace);
* ``resource``: what `compute` receives as ``model`` (``"lm"``: the language model backend, ``"embedder"``:
  the sentence embedder, ``None``: nothing);
* ``compute(model, task, examples, traces) -> columns``: a dict stat → one value per answer;
* ``requires``: the backend capabilities it needs (`tracecal.backends.registry.CAPABILITIES`, e.g. ``beams``): a run
  on a backend that lacks one does not schedule the pass and reports its estimators as not run, with the backend's
  reason (`tracecal.backends.registry.BackendSpec.why_not`).

Adding a pass is one subclass and `register_pass`; estimators declare the stats they read (`Estimator.stats`)
and the harness runs exactly the passes those stats come from.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from tracecal.errors import TracecalError, ValidationError

__all__ = [
    "ANSWER",
    "VECTOR",
    "TOKEN",
    "Pass",
    "PASSES",
    "UnknownStatError",
    "register_pass",
    "get_pass",
    "provider_of",
    "passes_for",
    "stat_kind",
]

ANSWER = "answer"  # one float per answer
VECTOR = "vector"  # a fixed-length float vector per answer
TOKEN = "token"  # one float per answer token (ragged like the trace)
KINDS = (ANSWER, VECTOR, TOKEN)


class UnknownStatError(TracecalError, ValueError):
    """An estimator reads a stat that no registered pass provides."""


class Pass:
    """Base class of a stat calculator (see the module docstring).

    Subclasses set the class attributes and implement `compute`; parameters go in ``__init__`` and are built
    from the evaluation settings by `from_config`.
    """

    name: ClassVar[str] = ""
    depends: ClassVar[tuple[str, ...]] = ("traces",)
    provides: ClassVar[dict[str, str]] = {}
    resource: ClassVar[str | None] = "lm"
    cost_weight: ClassVar[float] = 1.0  # relative seconds per answer (generation = 1), for the progress ETA
    description: ClassVar[str] = ""
    requires: ClassVar[frozenset[str]] = frozenset()  # the backend capabilities it needs (module docstring)

    @classmethod
    def from_config(cls, cfg: Any) -> Pass:
        """An instance with the parameters the evaluation settings ``cfg`` give (default: no parameters)."""
        return cls()

    def compute(self, model: Any, task: Any, examples: Sequence[Any], traces: Sequence[Any]) -> dict[str, Any]:
        """Columns ``{stat: values}``, one value per answer, aligned with ``traces``."""
        raise NotImplementedError

    def to_table(self, ids: Sequence[str], columns: dict[str, Any]) -> pa.Table:
        """The shard table: ``id`` plus every provided stat (validated: one finite-or-NaN value per answer)."""
        out: dict[str, Any] = {"id": list(ids)}
        for stat, kind in self.provides.items():
            if stat not in columns:
                raise ValidationError(f"pass {self.name!r} did not compute {stat!r}")
            col = columns[stat]
            if len(col) != len(ids):
                raise ValidationError(f"pass {self.name!r}: {stat!r} has {len(col)} values for {len(ids)} answers")
            if kind == ANSWER:
                out[stat] = np.asarray(col, dtype=np.float64)
            else:
                out[stat] = [np.asarray(v, dtype=np.float64).tolist() for v in col]
        return pa.table(out)

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({params})"


PASSES: dict[str, type[Pass]] = {}


def register_pass(cls: type[Pass]) -> type[Pass]:
    """Add a pass to the registry (usable as a class decorator)."""
    if not cls.name or cls.name in PASSES:
        raise ValidationError(f"pass name {cls.name!r} is empty or already registered")
    bad = {k: v for k, v in cls.provides.items() if v not in KINDS}
    if bad:
        raise ValidationError(f"pass {cls.name!r}: unknown stat kinds {bad}; use {', '.join(KINDS)}")
    for other in PASSES.values():
        clash = set(other.provides) & set(cls.provides)
        if clash:
            raise ValidationError(f"pass {cls.name!r}: stats {sorted(clash)} are already provided by {other.name!r}")
    PASSES[cls.name] = cls
    return cls


def get_pass(name: str) -> type[Pass]:
    if name not in PASSES:
        raise ValidationError(f"unknown pass {name!r}; known: {', '.join(PASSES)}")
    return PASSES[name]


def provider_of(stat: str) -> str:
    """The name of the pass that computes ``stat``."""
    for name, cls in PASSES.items():
        if stat in cls.provides:
            return name
    raise UnknownStatError(f"no registered pass provides the stat {stat!r}")


def stat_kind(stat: str) -> str:
    return PASSES[provider_of(stat)].provides[stat]


def passes_for(stats: Iterable[str]) -> list[str]:
    """The passes needed for ``stats`` (with their dependencies), in an order where dependencies come first."""
    order: list[str] = []

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in order:
            return
        if name in path:
            raise ValidationError(f"passes depend on each other in a cycle: {' → '.join((*path, name))}")
        for dep in get_pass(name).depends:
            visit(dep, (*path, name))
        order.append(name)

    for stat in stats:
        visit(provider_of(stat), ())
    return order
