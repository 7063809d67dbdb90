"""Scheduling an evaluation's units: which shards of which passes to compute, and who computes them.

A unit (`Unit`) is one shard of one pass for one task. The `Scheduler` lists the units of the passes the
selected estimators need (dependencies first, then the cheaper passes first), claims each missing one in the
`RunStore` (a kernel lock: several workers may share a run directory), computes it with `compute_unit` and
writes it; `Resources` loads the language model / embedder only when a unit needs one. An executor runs the
units: `LocalExecutor` in this process, `tracecal.evaluation.ray.RayExecutor` on Ray actors.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from tracecal.estimators import needs_of
from tracecal.evaluation.config import EvalConfig
from tracecal.evaluation.protocol import Progress
from tracecal.evaluation.runstore import TRACES, RunStore
from tracecal.passes import PASSES, Pass

__all__ = ["Resources", "Unit", "Scheduler", "compute_unit", "LocalExecutor", "Tasks"]

Tasks = Sequence[tuple[Any, list[Any]]]  # (task, its examples) pairs, as `tracecal.evaluation.run` loads them


class Resources:
    """Loads the language model / embedder only when a shard needs one (re-scoring loads nothing)."""

    def __init__(self, cfg: EvalConfig, lm: Any = None, embedder: Any = None) -> None:
        self.cfg, self._lm, self._emb = cfg, lm, embedder

    def get(self, kind: str | None) -> Any:
        if kind is None:
            return None
        if kind == "embedder":
            if self._emb is None:
                from tracecal.passes.semantic import load_embedder

                self._emb = load_embedder()
            return self._emb
        if self._lm is None:
            from tracecal.backends import load_model

            self._lm = load_model(self.cfg.model, batch_size=self.cfg.batch_size, dtype=self.cfg.dtype)
        if self.cfg.chat is not None:
            self._lm.chat = self.cfg.chat
        return self._lm


@dataclass
class Unit:
    """One shard of one pass for one task: answers ``a:b`` of the task."""

    pass_name: str
    task: Any
    k: int
    a: int
    b: int

    @property
    def weight(self) -> float:
        return (self.b - self.a) * PASSES[self.pass_name].cost_weight


class Scheduler:
    """Computes the missing shards of every needed pass, claiming each one (several workers may share a run)."""

    def __init__(self, store: RunStore, cfg: EvalConfig, res: Resources, progress: Progress) -> None:
        self.store, self.cfg, self.res, self.progress = store, cfg, res, progress
        passes = needs_of(cfg.estimators)  # dependencies first; then the cheaper passes first
        self.passes: list[Pass] = [PASSES[p].from_config(cfg) for p in sorted(passes, key=self._rank(passes))]

    @staticmethod
    def _rank(order: list[str]) -> Callable[[str], tuple[int, float, int]]:
        return lambda p: (len(PASSES[p].depends) > 0, PASSES[p].cost_weight, order.index(p))

    def units(self, tasks: Tasks) -> list[Unit]:
        size = self.cfg.shard_size
        return [
            Unit(p.name, task, k, a, min(a + size, len(exs)))
            for p in self.passes
            for task, exs in tasks
            for k, a in enumerate(range(0, len(exs), size))
        ]

    def load_resources(self, tasks: Tasks) -> None:
        """Load the model / embedder now if some missing shard needs it (errors before anything is written)."""
        pending = {u.pass_name for u in self.units(tasks) if not self.store.has(u.pass_name, u.task.name, u.k)}
        for kind in {PASSES[p].resource for p in pending}:
            self.res.get(kind)

    def run(self, tasks: Tasks, poll_s: float) -> None:
        """Until every unit is on disk: compute what is free, then wait for what other workers hold."""
        units = self.units(tasks)
        examples = {task.name: exs for task, exs in tasks}
        total = sum(u.weight for u in units)
        while True:
            todo = [u for u in units if not self.store.has(u.pass_name, u.task.name, u.k)]
            done = total - sum(u.weight for u in todo)
            self.progress("run", round(done), round(total))
            held = 0
            for u in todo:
                if self._do(u, examples[u.task.name]):
                    done += u.weight
                    self.progress("run", round(done), round(total))
                elif not self.store.has(u.pass_name, u.task.name, u.k):
                    held += 1
            if not held:
                return
            self.progress(f"waiting for {held} shards other workers hold", 0, held)
            time.sleep(poll_s)

    def pass_of(self, name: str) -> Pass:
        return next(x for x in self.passes if x.name == name)

    def ready(self, u: Unit) -> bool:
        """Whether unit ``u`` is still to compute and its inputs (the shards of its pass's `depends`) are written."""
        name = u.task.name
        deps = self.pass_of(u.pass_name).depends
        return not self.store.has(u.pass_name, name, u.k) and all(self.store.has(d, name, u.k) for d in deps)

    def upstream(self, u: Unit) -> list[Any]:
        """What unit ``u`` reads besides its questions: the traces of the same answers when its pass depends on them."""
        return self.store.read_traces_shard(u.task.name, u.k) if self.pass_of(u.pass_name).depends else []

    def save(self, u: Unit, table: pa.Table, seconds: float) -> None:
        """Write the table of unit ``u`` through the store and add its compute time (seconds) to its stage."""
        self.store.write_shard(u.pass_name, u.task.name, u.k, table)
        self.store.add_time(f"{'generate' if u.pass_name == TRACES else u.pass_name}/{u.task.name}", seconds)

    def _do(self, u: Unit, examples: list[Any]) -> bool:
        """Compute unit ``u`` unless it is written, its inputs are not, or another worker holds it."""
        store, name = self.store, u.task.name
        if not self.ready(u):
            return False
        claim = store.claim(u.pass_name, name, u.k)
        if claim is None:
            return False
        with claim:
            if store.has(u.pass_name, name, u.k):  # written by another worker since we looked
                return False
            self.progress(f"{u.pass_name} {name}", u.a, len(examples))
            t0 = time.perf_counter()
            table = compute_unit(self.pass_of(u.pass_name), self.res, u.task, examples[u.a : u.b], self.upstream(u))
            self.save(u, table, time.perf_counter() - t0)
            self.progress(f"{u.pass_name} {name}", u.b, len(examples))
        return True


def compute_unit(p: Pass, res: Resources, task: Any, examples: Sequence[Any], traces: Sequence[Any]) -> pa.Table:
    """The shard table of pass ``p`` for ``examples`` (one unit): ``id`` plus the pass's columns, computed with the
    resource the pass needs (``res.get(p.resource)``). ``traces``: the traces of the same answers when the pass
    depends on them, else []. The one definition of what a unit computes: `Scheduler` runs it in this process,
    `tracecal.evaluation.ray` inside Ray actors (each with its own `Resources`)."""
    cols = p.compute(res.get(p.resource), task, examples, traces)
    ids = [t.id for t in traces] if traces else [ex.id for ex in examples]
    return p.to_table(ids, cols)


class LocalExecutor:
    """Computes the units in this process (the default); several processes may share a run through claims.

    An executor has three steps, called by `evaluate`: ``pin(cfg)`` fixes settings only the machines that run the
    model can resolve (before the run's identity is checked), ``prepare(sched, tasks)`` loads what the missing
    units need (errors surface before anything is written), ``run(sched, tasks, poll_s)`` computes every missing
    unit through ``sched`` (`Scheduler.save` writes it). `tracecal.evaluation.ray.RayExecutor` is the other one.
    """

    def pin(self, cfg: EvalConfig) -> None:
        return None

    def prepare(self, sched: Scheduler, tasks: Tasks) -> None:
        sched.load_resources(tasks)

    def run(self, sched: Scheduler, tasks: Tasks, poll_s: float) -> None:
        sched.run(tasks, poll_s)
