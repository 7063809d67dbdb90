"""Scheduling an evaluation's units: which shards of which passes to compute, and who computes them.

A unit (`Unit`) is one shard of one pass for one task. The `Scheduler` lists the units of the passes the selected
estimators need (dependencies first, then the cheaper passes first), claims each missing one in the `RunStore` (a kernel
lock: several workers may share a run directory), computes it with `compute_unit` and writes it; `Resources` loads the
language model (on the backend the settings name: `model_options`) / embedder only when a unit needs one. A pass the
backend cannot compute (`unsupported_passes`: a capability it requires that the backend does not declare, e.g. beam
search on llama.cpp or a server) is not scheduled; its estimators are reported as not run, with the reason. An executor
runs the units: `LocalExecutor` in this process, `tracecal.evaluation.ray.RayExecutor` on Ray actors.

Every shard is written with the digest of each answer's question (`question_digest`: its id's text, context and
choices — what the prompt is made of); `check_stored` compares the stored digests with the task's data before
anything is computed or scored, and refuses a run whose questions changed (`DataChangedError`). The golds are not
in the digest: a corrected gold is relabelled at scoring (labels are always computed from the current data). Every
shard also carries the identity of the run that made it (`MADE_BY`: model, dtype, budgets), so a shard copied in
from another run of the same questions (another model) is refused too.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from tracecal.backends.registry import HIDDEN_STATES, get_backend
from tracecal.estimators import needs_of
from tracecal.evaluation.config import EvalConfig, resolve_embedder_dtype
from tracecal.evaluation.protocol import Progress
from tracecal.evaluation.result_json import plain_json
from tracecal.evaluation.runstore import TRACES, DataChangedError, RunStore, RunStoreError
from tracecal.passes import PASSES, Pass

__all__ = [
    "Resources",
    "Unit",
    "model_options",
    "unsupported_passes",
    "Scheduler",
    "compute_unit",
    "LocalExecutor",
    "Tasks",
    "question_digest",
    "check_stored",
]

MADE_BY = b"tracecal_run_identity"  # shard metadata: JSON of the identity of the run that computed the shard
Tasks = Sequence[tuple[Any, list[Any]]]  # (task, its examples) pairs, as `tracecal.evaluation.run` loads them


class Resources:
    """Loads the language model / embedder (in the run's ``embedder_dtype``) only when a shard needs one (re-scoring
    loads nothing)."""

    def __init__(self, cfg: EvalConfig, lm: Any = None, embedder: Any = None) -> None:
        self.cfg, self._lm, self._emb = cfg, lm, embedder

    def get(self, kind: str | None) -> Any:
        if kind is None:
            return None
        if kind == "embedder":
            if self._emb is None:
                from tracecal.passes.semantic import load_embedder

                self._emb = load_embedder(dtype=resolve_embedder_dtype(self.cfg.embedder_dtype))
            return self._emb
        if self._lm is None:
            from tracecal.backends import load_model

            self._lm = load_model(self.cfg.model, **model_options(self.cfg))
        if self.cfg.chat is not None:
            self._lm.chat = self.cfg.chat
        return self._lm


def model_options(cfg: EvalConfig) -> dict[str, Any]:
    """The `load_model` keywords of the run's model: its backend (``cfg.backend``) and, of the batch size, the dtype
    and the threads, those the backend takes (its declared ``options``, `tracecal.backends.registry`: llama.cpp takes
    no dtype, the GGUF decides). Threads: ``auto``, the count the process already set (``--threads``, also per Ray
    actor, or the rule: `tracecal.backends.runtime.resolve_threads`)."""
    spec = get_backend(cfg.backend_kind())
    out: dict[str, Any] = {"backend": cfg.backend, "batch_size": cfg.batch_size, "dtype": cfg.dtype}
    if "n_threads" in spec.options:
        out["threads"] = "auto"
    return {k: v for k, v in out.items() if k == "backend" or k in spec.options}


def unsupported_passes(cfg: EvalConfig) -> dict[str, str]:
    """The passes the selected estimators need that the run's backend cannot compute (a capability `Pass.requires`
    the backend lacks, or one they read is such a pass), each with why (`BackendSpec.why_not`); their estimators are
    reported as not run, with the reason."""
    out: dict[str, str] = {}
    spec = get_backend(cfg.backend_kind())
    for name in needs_of(cfg.estimators):  # dependencies first
        p = PASSES[name]
        lacking = [c for c in sorted(p.requires) if not spec.can(c)]
        why = spec.why_not(lacking[0]) if lacking else None
        why = why or next((f"it reads the {d} pass: {out[d]}" for d in p.depends if d in out), None)
        if why:
            out[name] = why
    return out


@dataclass
class Unit:
    """One shard of one pass for one task: answers ``a:b`` of the task."""

    pass_name: str
    task: Any
    k: int
    a: int
    b: int
    digests: dict[str, str] = field(default_factory=dict)  # {answer id: `question_digest`} of answers a:b

    @property
    def weight(self) -> float:
        return (self.b - self.a) * PASSES[self.pass_name].cost_weight


class Scheduler:
    """Computes the missing shards of every needed pass, claiming each one (several workers may share a run)."""

    def __init__(self, store: RunStore, cfg: EvalConfig, res: Resources, progress: Progress) -> None:
        self.store, self.cfg, self.res, self.progress = store, cfg, res, progress
        self.skipped = unsupported_passes(cfg)  # {pass: why the backend cannot compute it}
        passes = [p for p in needs_of(cfg.estimators) if p not in self.skipped]  # dependencies first
        self.passes: list[Pass] = [PASSES[p].from_config(cfg) for p in sorted(passes, key=self._rank(passes))]
        names = [p.name for p in self.passes]
        if "hidden" in names and TRACES in names and get_backend(cfg.backend_kind()).can(HIDDEN_STATES):
            self.pass_of(TRACES).hidden_layers = self.pass_of("hidden").layers  # type: ignore[attr-defined]

    @staticmethod
    def _rank(order: list[str]) -> Callable[[str], tuple[int, float, int]]:
        return lambda p: (len(PASSES[p].depends) > 0, PASSES[p].cost_weight, order.index(p))

    def units(self, tasks: Tasks) -> list[Unit]:
        size = self.cfg.shard_size
        return [
            Unit(p.name, task, k, a, min(a + size, len(exs)), {ex.id: question_digest(ex) for ex in exs[a : a + size]})
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
            self.progress(f"waiting for other workers to finish {held} shard(s)", 0, held)
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

    def save(self, u: Unit, table: pa.Table, seconds: float, cpu_seconds: float | None = None) -> None:
        """Write the table of unit ``u`` through the store, stamped with the run's identity (`MADE_BY`), and add
        its compute time to its stage: ``seconds`` wall, ``cpu_seconds`` the worker's process CPU time."""
        stamp = json.dumps(plain_json(self.cfg.identity()), sort_keys=True, default=str).encode()
        table = table.replace_schema_metadata(dict(table.schema.metadata or {}) | {MADE_BY: stamp})
        self.store.write_shard(u.pass_name, u.task.name, u.k, table, u.digests or None)
        stage = f"{'generate' if u.pass_name == TRACES else u.pass_name}/{u.task.name}"
        self.store.add_time(stage, seconds, cpu_seconds)

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
            t0, c0 = time.perf_counter(), time.process_time()
            table = compute_unit(self.pass_of(u.pass_name), self.res, u.task, examples[u.a : u.b], self.upstream(u))
            self.save(u, table, time.perf_counter() - t0, time.process_time() - c0)
            self.progress(f"{u.pass_name} {name}", u.b, len(examples))
        return True


def question_digest(example: Any) -> str:
    """The first 16 hex digits of the SHA-256 of what a question's prompt is made of: its text, context and
    choices (``[question, context, choices]`` as JSON). Golds are left out (they are relabelled, not answered)."""
    parts = [getattr(example, "question", ""), getattr(example, "context", ""), getattr(example, "choices", [])]
    return hashlib.sha256(json.dumps(parts, ensure_ascii=False).encode()).hexdigest()[:16]


def _changed(task: str, where: str, stored: dict[str, str | None], now: dict[str, str]) -> str | None:
    """The complaint about one stored shard whose question digests ``stored`` differ from ``now``, or None."""
    if unknown := [i for i in stored if i not in now]:
        return (
            f"{task}: {where} holds answers to {len(unknown)} question(s) the task's data does not have (e.g. "
            f"{unknown[0]!r}): a shard of another task or run, or data rows removed. Restore the data, or use a new "
            "--run-dir"
        )
    if changed := [i for i, d in stored.items() if d is not None and now[i] != d]:
        return (
            f"{task}: {len(changed)} question(s) of {where} changed since they were answered (e.g. {changed[0]!r}: "
            "its text, context or choices differ). Restore the original data file, or use a new --run-dir (a "
            "changed gold alone is fine: answers are relabelled at scoring)"
        )
    return None


def _damaged(shard: Path, what: str, why: str) -> RunStoreError:
    return RunStoreError(f"{shard} carries a damaged {what} stamp ({why}): delete it and run again to compute it anew")


def _stamp_object(raw: bytes | None, shard: Path, what: str) -> dict[str, Any] | None:
    """A shard's JSON-object stamp (None: unstamped, an older tracecal); `RunStoreError` for one that is not."""
    if not raw:
        return None
    try:
        value = json.loads(raw.decode("utf-8"))
    except ValueError as e:  # also UnicodeDecodeError
        raise _damaged(shard, what, f"not UTF-8 JSON: {e}") from None
    if not isinstance(value, dict):
        raise _damaged(shard, what, f"a JSON {type(value).__name__}, not an object")
    return value


def _digests_of(got: list[str], digests: Any, shard: Path) -> dict[str, str | None]:
    """The stored digest of each answer id of a shard (None for every id of an unstamped shard: checked by id
    only); `RunStoreError` for digests that are not one string per answer of the shard."""
    if digests is None:
        return dict.fromkeys(got)
    if not isinstance(digests, dict):
        raise _damaged(shard, "question-digest", f"a JSON {type(digests).__name__}, not an object")
    if set(digests) != set(got) or not all(isinstance(v, str) for v in digests.values()):
        raise _damaged(shard, "question-digest", "not one digest string per answer of the shard")
    return dict(digests)


def _foreign(task: str, where: str, shard: Path, identity: dict[str, Any]) -> str | None:
    """The complaint about a shard whose `MADE_BY` stamp differs from the run's ``identity`` in a key both hold
    (a shard copied in from another run: another model, dtype or budget), or None (also for an unstamped one)."""
    made = _stamp_object((pq.read_schema(shard).metadata or {}).get(MADE_BY), shard, "run-identity") or {}
    diff = [k for k in sorted(made) if k in identity and made[k] != identity[k]]
    if not diff:
        return None
    k = diff[0]
    return (
        f"{task}: {where} ({shard}) was made by another run ({k}={made[k]!r}; this run's is {identity[k]!r}): a "
        "shard copied in from another run directory. Delete it (the same command computes it anew), or move it "
        "back to its own run"
    )


def check_stored(store: RunStore, tasks: Tasks, passes: Sequence[str], shard_size: int | None = None) -> None:
    """Refuse (`DataChangedError`, before anything is computed) a run whose stored shards of ``passes`` answer other
    questions than ``tasks`` hold now: an id the data lacks, a changed question (`question_digest`; shards written
    before digests were stored are checked by id only), with ``shard_size`` a shard k that does not hold the
    answers to questions k·size … (k+1)·size − 1 (rows added, removed or reordered), and a shard another run made
    (its `MADE_BY` stamp against the run's stored identity: `_foreign`)."""
    identity = (store.config().get("identity") or {}) if store.exists() else {}
    for task, exs in tasks:
        now = {ex.id: question_digest(ex) for ex in exs}
        ids = [ex.id for ex in exs]
        for name in passes:
            files = {int(f.stem): f for f in store.shard_files(name, task.name) if f.stem.isdigit()}
            for k in store.shard_indices(name, task.name):
                where = f"shard {k} of the {name} pass"
                got, digests = store.shard_stamp(name, task.name, k)
                stored = _digests_of(got, digests, files[k])
                msg = _changed(task.name, where, stored, now)
                if msg is None and shard_size and set(got) != set(ids[k * shard_size : (k + 1) * shard_size]):
                    msg = (
                        f"{task.name}: {where} answers other questions than the data holds at its place (rows "
                        "added, removed or reordered since). Restore the original data file, or use a new --run-dir"
                    )
                if msg is None and identity:
                    msg = _foreign(task.name, where, files[k], identity)
                if msg:
                    raise DataChangedError(msg)


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
