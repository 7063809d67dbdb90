"""An evaluation over a resumable run directory: settings, scheduling of the passes, scoring, writing.

``evaluate(run_dir, cfg)`` computes what the selected estimators need and the run directory lacks — the
generation (traces) and only the passes whose stats a selected estimator reads (`tracecal.passes`) — shard
by shard through the `RunStore`, then scores everything with the pure protocol (`tracecal.evaluation.protocol`) and
writes the results. Re-running the same command continues where it stopped; several workers (processes)
may share one run directory: each claims a shard (a kernel lock) before computing it, and waits for the
shards other workers hold before scoring. Re-scoring (other estimators, calibrator, seeds) never regenerates.
The units can also run on Ray actors across machines (`tracecal.evaluation.ray`, ``--ray``): same units, same
`compute_unit`, written here by the driver.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tracecal.calibrators.scalar import make_calibrator
from tracecal.estimators import REGISTRY, Inputs, needs_of, resolve_estimators
from tracecal.evaluation.protocol import ScoreConfig, TaskStats, score_tasks
from tracecal.evaluation.results import Results, results_csv, results_markdown
from tracecal.evaluation.runstore import TRACES, ConfigMismatchError, NotARunError, RunStore
from tracecal.passes import ANSWER, PASSES, TOKEN, VECTOR, Pass
from tracecal.traces.trace import TraceBatch

__all__ = [
    "EvalConfig",
    "ConfigError",
    "ConfigMismatchError",
    "evaluate",
    "score_run",
    "load_task_stats",
    "compute_unit",
    "LocalExecutor",
    "Scheduler",
    "Resources",
    "Unit",
]

DTYPES = ("auto", "float32", "bfloat16", "float16")
DEFAULT_MODEL_NAME = "smollm2-135m-instruct"
Progress = Callable[[str, int, int], None]  # (stage description, done, total); "run" = the whole run, weighted


class ConfigError(ValueError):
    """An evaluation setting is invalid (found before anything is written)."""


@dataclass
class EvalConfig:
    """Everything that defines an evaluation. `identity` lists what a run directory's stored shards depend on."""

    tasks: list[str]
    limit: int | None = None
    model: str | None = None
    dtype: str = "auto"
    estimators: list[str] = field(default_factory=lambda: list(REGISTRY))
    n_seeds: int = 20
    cal_frac: float = 0.35
    calibrator: str = "platt"
    n_bins: int = 10
    batch_size: int = 16
    max_new_tokens: int | None = None
    num_beams: int = 5
    beam_max_new_tokens: int | None = 32
    chat: bool | None = None
    shard_size: int = 64
    on_error: str = "skip"
    data_dir: str | None = None
    seed: int = 0
    n_boot: int = 1000
    level: float = 0.95
    sel_alpha: float = 0.1
    sel_delta: float = 0.1
    sel_holdout: float = 0.5

    SCORING_KEYS = ("n_boot", "level", "sel_alpha", "sel_delta", "sel_holdout")  # `ScoreConfig`'s statistics settings
    IDENTITY_KEYS = (
        "limit",
        "model",
        "dtype",
        "max_new_tokens",
        "chat",
        "shard_size",
        "num_beams",
        "beam_max_new_tokens",
    )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def validate(self) -> EvalConfig:
        """Check every value (and resolve task and estimator names); `ConfigError` says what to fix."""
        from tracecal.tasks import get_tasks

        def positive(name: str, v: Any, optional: bool = False) -> None:
            if optional and v is None:
                return
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"{name.replace('_', '-')} must be a positive whole number, got {v!r}")

        for k in ("limit", "max_new_tokens", "beam_max_new_tokens"):
            positive(k, getattr(self, k), optional=True)
        for k in ("n_seeds", "n_bins", "batch_size", "shard_size"):
            positive(k, getattr(self, k))
        if isinstance(self.num_beams, bool) or not isinstance(self.num_beams, int) or self.num_beams < 2:
            raise ConfigError(f"num-beams must be a whole number ≥ 2, got {self.num_beams!r}")
        if not (isinstance(self.cal_frac, int | float) and 0 < self.cal_frac < 1):
            raise ConfigError(f"cal-frac must be strictly between 0 and 1, got {self.cal_frac!r}")
        if self.dtype not in DTYPES:
            raise ConfigError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.on_error not in ("skip", "raise"):
            raise ConfigError(f"on-error must be 'skip' or 'raise', got {self.on_error!r}")
        try:
            make_calibrator(self.calibrator)
        except (ValueError, KeyError) as e:
            raise ConfigError(f"calibrator: {e}") from e
        if not self.tasks:
            raise ConfigError("no tasks given: pass --tasks, e.g. --tasks triviaqa,svamp")
        try:
            self.tasks = [t.ref for t in get_tasks(self.tasks)]  # built-in names, or absolute paths of user files
        except (ValueError, FileNotFoundError) as e:
            raise ConfigError(str(e)) from e
        self.estimators = resolve_estimators(self.estimators)
        try:
            self.score_config().validate()
        except ValueError as e:
            raise ConfigError(str(e).replace("_", "-")) from e
        return self

    def identity(self) -> dict[str, Any]:
        """What the stored outputs depend on; the dtype resolved (``auto`` → float32 on CPU, bfloat16 on GPU)."""
        ident = {k: getattr(self, k) for k in self.IDENTITY_KEYS}
        ident["model"] = self.model or DEFAULT_MODEL_NAME
        ident["dtype"] = resolve_dtype(self.dtype)
        return ident

    def score_config(self) -> ScoreConfig:
        return ScoreConfig(
            self.estimators,
            self.n_seeds,
            self.cal_frac,
            self.calibrator,
            self.n_bins,
            self.seed,
            **{k: getattr(self, k) for k in self.SCORING_KEYS},
        )


def resolve_dtype(dtype: str, cuda: bool | None = None) -> str:
    """The weights' dtype a setting means on this machine: ``auto`` is bfloat16 with a GPU, float32 without."""
    if dtype != "auto":
        return dtype
    if cuda is None:
        import torch

        cuda = bool(torch.cuda.is_available())
    return "bfloat16" if cuda else "float32"


def legacy_identity(config: dict[str, Any]) -> dict[str, Any]:
    """The identity of a run directory written before identities were stored (its dtype ran on a CPU)."""
    ident = {k: config[k] for k in EvalConfig.IDENTITY_KEYS if k in config}
    if "model" in ident:
        ident["model"] = ident["model"] or DEFAULT_MODEL_NAME
    if ident.get("dtype", "auto") == "auto":
        ident["dtype"] = "float32"
    return ident


# --------------------------------------------------------------------------------------------- scheduling
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
            from tracecal.backends.hf import load_model

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

    def units(self, tasks: Sequence[tuple[Any, list[Any]]]) -> list[Unit]:
        size = self.cfg.shard_size
        return [
            Unit(p.name, task, k, a, min(a + size, len(exs)))
            for p in self.passes
            for task, exs in tasks
            for k, a in enumerate(range(0, len(exs), size))
        ]

    def load_resources(self, tasks: Sequence[tuple[Any, list[Any]]]) -> None:
        """Load the model / embedder now if some missing shard needs it (errors before anything is written)."""
        pending = {u.pass_name for u in self.units(tasks) if not self.store.has(u.pass_name, u.task.name, u.k)}
        for kind in {PASSES[p].resource for p in pending}:
            self.res.get(kind)

    def run(self, tasks: Sequence[tuple[Any, list[Any]]], poll_s: float) -> None:
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

    def prepare(self, sched: Scheduler, tasks: Sequence[tuple[Any, list[Any]]]) -> None:
        sched.load_resources(tasks)

    def run(self, sched: Scheduler, tasks: Sequence[tuple[Any, list[Any]]], poll_s: float) -> None:
        sched.run(tasks, poll_s)


# --------------------------------------------------------------------------------------------- reading back
def _stat_array(table: pa.Table, stat: str, kind: str, lengths: np.ndarray, where: str) -> np.ndarray:
    col = table.column(stat)
    if kind == ANSWER:
        return col.to_numpy(zero_copy_only=False).astype(np.float64)
    if kind == VECTOR:
        return np.array(col.to_pylist(), dtype=np.float64)
    assert kind == TOKEN
    n = pc.list_value_length(col).to_numpy(zero_copy_only=False)
    if not np.array_equal(n, lengths):
        raise RuntimeError(f"{where}: {stat!r} is not aligned with the answer tokens — the run directory is damaged")
    flat = pc.list_flatten(col)
    return flat.to_numpy(zero_copy_only=False).astype(np.float64) if len(flat) else np.zeros(0)


def load_task_stats(
    store: RunStore, task: Any, examples: list[Any], passes: Sequence[str], allow_missing: bool = False
) -> TaskStats:
    """One task's traces, labels and the stats of ``passes`` from the run store (see `TaskStats`)."""
    traces = store.read_traces(task.name)
    if len(traces) != len(examples):
        raise RuntimeError(
            f"{task.name}: the run holds {len(traces)} answers for the {len(examples)} questions asked — the run is "
            "incomplete, or --limit / the data differ from the run's (see its config.json)"
        )
    by_id = {ex.id: ex for ex in examples}
    exs = [by_id[t.id] for t in traces]
    y = np.array([task.label(ex, t.text) for ex, t in zip(exs, traces, strict=True)], dtype=np.int64)
    inputs = Inputs(TraceBatch.from_traces(traces), traces)
    missing: set[str] = set()
    for name in (p for p in passes if p != TRACES):
        t = store.read_pass(name, task.name)
        if t is None or t.num_rows != len(traces):
            if not allow_missing:
                raise RuntimeError(
                    f"{task.name}: the {name} pass is incomplete "
                    f"({0 if t is None else t.num_rows} of {len(traces)} answers)"
                )
            missing.add(name)
            continue
        if t.column("id").to_pylist() != [tr.id for tr in traces]:
            raise RuntimeError(f"{task.name}: the {name} pass is not aligned with the traces")
        for stat, kind in PASSES[name].provides.items():
            inputs.stats[stat] = _stat_array(t, stat, kind, inputs.batch.lengths, f"{task.name}/{name}")
    rows = {
        "question": [ex.question for ex in exs],
        "golds": [json.dumps(ex.golds, ensure_ascii=False) for ex in exs],
        "answer": [t.text for t in traces],
        "stop_reason": [t.stop_reason for t in traces],
    }
    return TaskStats(task.name, [t.id for t in traces], y, inputs, task.label_rule, rows, missing)


def _load_examples(cfg: EvalConfig) -> list[tuple[Any, list[Any]]]:
    from tracecal.tasks import get_task

    out = []
    for name in cfg.tasks:
        task = get_task(name)
        out.append((task, task.load(limit=cfg.limit, data_dir=cfg.data_dir, on_error=cfg.on_error)))
    return out


def write_results(store: RunStore, res: Results) -> None:
    """Write the per-answer tables and the results (JSON, CSV, Markdown) through the store."""
    for name, table in res.answers.items():
        store.write_table(name, table)
    store.write_results(res.to_json(), results_csv(res), results_markdown(res))


def score_run(
    run_path: str | Path | RunStore,
    cfg: EvalConfig,
    progress: Progress | None = None,
    allow_missing: bool = False,
    tasks: Sequence[tuple[Any, list[Any]]] | None = None,
) -> Results:
    """Score what a run directory holds (loads no model) and write the results into it.

    ``allow_missing``: an estimator whose pass is not complete for a task is reported as not run there (NaN
    metrics, listed in ``tasks[task]["not_run"]``, no average) instead of raising. ``tasks``: the loaded
    (task, examples) pairs when the caller has them.
    """
    store = run_path if isinstance(run_path, RunStore) else RunStore(run_path)
    t0 = time.perf_counter()
    passes = needs_of(cfg.estimators)
    tasks = tasks if tasks is not None else _load_examples(cfg)
    data = [load_task_stats(store, t, exs, passes, allow_missing) for t, exs in tasks]
    for d in data:
        if d.missing:
            not_run = [e for e in cfg.estimators if set(needs_of([e])) & d.missing]
            warnings.warn(
                f"{d.task}: {', '.join(sorted(d.missing))} pass incomplete; not scored there: {', '.join(not_run)}",
                UserWarning,
                stacklevel=2,
            )
    res = score_tasks(data, cfg.score_config(), progress)
    res.config = cfg.to_dict()
    store.add_time("score", time.perf_counter() - t0)
    res.timings = store.timings()
    write_results(store, res)
    return res


def evaluate(
    run_path: str | Path,
    cfg: EvalConfig,
    progress: Progress | None = None,
    stages_only: bool = False,
    poll_s: float = 10.0,
    score_only: bool = False,
    model: Any = None,
    executor: Any = None,
) -> Results | None:
    """Compute what is missing in ``run_path`` (resumable; several workers may share it), then score.

    ``model``: an already loaded backend to use instead of loading ``cfg.model`` (its ``model_id`` becomes
    the run's model). ``stages_only``: compute, do not score. ``poll_s``: seconds between checks while waiting
    for shards other workers hold. ``score_only``: compute nothing; score what the run holds (see `score_run`).
    ``executor``: where the units are computed (default `LocalExecutor`: this process; or a
    `tracecal.evaluation.ray.RayExecutor`, which loads ``cfg.model`` in its actors and takes no loaded ``model``).
    """
    if model is not None and cfg.model is None:
        cfg.model = model.model_id
    cfg.validate()  # before anything is written
    progress = progress or (lambda *_: None)
    store = RunStore(run_path)
    if score_only:
        if not store.exists():
            raise NotARunError(f"{run_path} is not a run directory (no config.json): nothing to score")
        return score_run(store, cfg, progress, allow_missing=True)
    tasks = _load_examples(cfg)  # data errors surface before the run directory is touched
    executor = executor or LocalExecutor()
    if model is not None and not isinstance(executor, LocalExecutor):
        raise ConfigError("a loaded model cannot be shipped to workers: give its name, path or URL (--model)")
    executor.pin(cfg)
    identity = cfg.identity()
    store.check(identity, legacy=legacy_identity)
    sched = Scheduler(store, cfg, Resources(cfg, model), progress)
    executor.prepare(sched, tasks)  # a model that does not load leaves no run directory behind
    store.open(cfg.to_dict(), identity, legacy=legacy_identity)
    executor.run(sched, tasks, poll_s)
    if stages_only:
        return None
    return score_run(store, cfg, progress, tasks=tasks)
