"""An evaluation over a resumable run directory: computing what is missing, scoring, writing.

``evaluate(run_dir, cfg)`` computes what the selected estimators need and the run directory lacks — the
generation (traces) and only the passes whose stats a selected estimator reads (`tracecal.passes`) — shard
by shard through the `RunStore` (`tracecal.evaluation.scheduler`), then scores everything with the pure protocol
(`tracecal.evaluation.protocol`) and writes the results. Re-running the same command continues where it stopped;
several workers (processes) may share one run directory: each claims a shard (a kernel lock) before computing it,
and waits for the shards other workers hold before scoring. Re-scoring (other estimators, calibrator, seeds) never
regenerates. The units can also run on Ray actors across machines (`tracecal.evaluation.ray`, ``--ray``): same
units, same `tracecal.evaluation.scheduler.compute_unit`, written here by the driver. The settings:
`tracecal.evaluation.config.EvalConfig`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tracecal.backends.registry import DTYPE, backend_of, get_backend
from tracecal.estimators import Inputs, needs_of
from tracecal.evaluation.blockscore import Runner, answered, check_pass, read_frames, rows_of, score_frames, stat_array
from tracecal.evaluation.config import (
    IDENTITY_DEFAULTS,
    ConfigError,
    EvalConfig,
    check_splittable,
    legacy_identity,
    resolve_embedder_dtype,
)
from tracecal.evaluation.protocol import Progress, TaskFrame, TaskStats
from tracecal.evaluation.results import Results, results_csv, results_markdown
from tracecal.evaluation.runstore import TRACES, NotARunError, RunStore
from tracecal.evaluation.scheduler import (
    LocalExecutor,
    Resources,
    Scheduler,
    Tasks,
    check_stored,
    unsupported_passes,
)
from tracecal.passes import PASSES
from tracecal.traces.trace import TraceBatch

__all__ = ["evaluate", "score_run", "load_task_stats", "write_results"]


# --------------------------------------------------------------------------------------------- reading back
def load_task_stats(
    store: RunStore, task: Any, examples: list[Any], passes: Sequence[str], allow_missing: bool = False
) -> TaskStats:
    """One task's traces, labels and the stats of ``passes`` from the run store (see `TaskStats`), every column of
    every pass in memory (`score_run` reads only what each estimator needs: `tracecal.evaluation.blockscore`)."""
    traces = store.read_traces(task.name)
    ids = [t.id for t in traces]
    exs = answered(task, ids, examples)
    y = np.array([task.label(ex, t.text) for ex, t in zip(exs, traces, strict=True)], dtype=np.int64)
    inputs = Inputs(TraceBatch.from_traces(traces), traces)
    missing: set[str] = set()
    for name in (p for p in passes if p != TRACES):
        t = store.read_pass(name, task.name)
        if not check_pass(task.name, name, None if t is None else t.column("id").to_pylist(), ids, allow_missing):
            missing.add(name)
            continue
        assert t is not None
        for stat, kind in PASSES[name].provides.items():
            inputs.stats[stat] = stat_array(t, stat, kind, inputs.batch.lengths, f"{task.name}/{name}")
    rows = rows_of(exs, [t.text for t in traces], [t.stop_reason for t in traces])
    return TaskStats(task.name, ids, y, inputs, task.label_rule, rows, missing)


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
    tasks: Tasks | None = None,
    runner: Runner | None = None,
) -> Results:
    """Score what a run directory holds (loads no model) and write the results into it, one task × estimator
    block at a time, each reading only the columns it needs (`tracecal.evaluation.blockscore`; ``runner``: where the
    blocks run, default this process, `tracecal.evaluation.rayscore.RayBlocks` on a Ray cluster).

    ``allow_missing``: an estimator whose pass is not complete for a task is reported as not run there (NaN
    metrics, listed in ``tasks[task]["not_run"]``, no average) instead of raising. ``tasks``: the loaded
    (task, examples) pairs when the caller has them. An estimator whose pass the run's backend cannot compute
    (`unsupported_passes`) is not run either; ``tasks[task]["not_run_reasons"]`` says why, for each not run.
    """
    store = run_path if isinstance(run_path, RunStore) else RunStore(run_path)
    t0 = time.perf_counter()
    passes = needs_of(cfg.estimators)
    skipped = unsupported_passes(cfg)
    tasks = tasks if tasks is not None else _load_examples(cfg)
    check_splittable(tasks, cfg.cal_frac)
    check_stored(store, tasks, passes)  # answers to changed questions are never scored against the new ones
    data = read_frames(store, tasks, [p for p in passes if p not in skipped], allow_missing, cfg.estimators)
    for d in data:
        d.missing |= set(skipped)
    res = score_frames(store, data, cfg.score, progress, runner)
    _explain_not_run(res, data, skipped)
    res.config = cfg.to_dict()
    store.add_time("score", time.perf_counter() - t0)
    res.timings = store.timings()
    write_results(store, res)
    return res


def _explain_not_run(res: Results, data: Sequence[TaskFrame], skipped: dict[str, str]) -> None:
    """``tasks[task]["not_run_reasons"]``: {estimator: why} for each estimator not run on a task (a pass it reads is
    one the backend cannot compute, ``skipped``, or is incomplete)."""
    for d in data:
        info = res.tasks[d.task]
        why = {p: skipped.get(p, f"its {p} pass is incomplete") for p in d.missing}
        info["not_run_reasons"] = {
            e: "; ".join(dict.fromkeys(why[p] for p in needs_of([e]) if p in why)) for e in info["not_run"]
        }


def _adopt(cfg: EvalConfig, model: Any) -> None:
    """Settings a loaded ``model`` decides: the run's model (when not given), its weights' dtype (for ``auto``) and,
    where its backend or the one named is part of a run's identity (``in_identity``: llama.cpp), the backend
    (`tracecal.backends.registry.backend_of`)."""
    if cfg.model is None:
        cfg.model = model.model_id
    weights = getattr(getattr(model, "model", None), "dtype", None)  # an HF model's torch dtype
    if cfg.dtype == "auto" and weights is not None:
        cfg.dtype = str(weights).removeprefix("torch.")
    given = backend_of(model)
    named = None if cfg.backend == "auto" else cfg.backend
    marks = [b for b in (given, named) if b is not None and get_backend(b).in_identity]
    if marks and given != named:
        if named is not None:
            raise ConfigError(f"backend: the model given is a {type(model).__name__}, not --backend {cfg.backend}")
        cfg.backend = str(given)


def _pin_dtype(cfg: EvalConfig, store: RunStore) -> None:
    """Resolve ``dtype=auto`` of a resumed run to the weights' dtype its identity holds (one made before identities
    were stored: `legacy_identity`), so that a run made where ``auto`` meant float32 resumes where it means bfloat16
    (and back); a new run's ``auto`` is resolved by the executor or `EvalConfig.identity` (this machine's)."""
    if cfg.dtype != "auto" or not get_backend(cfg.backend_kind()).can(DTYPE) or not store.exists():
        return
    doc = store.config()
    stored = doc.get("identity") or legacy_identity(doc.get("config", {}))
    if stored.get("dtype"):  # None: a llama.cpp run (the GGUF decides)
        cfg.dtype = str(stored["dtype"])


def _pin_embedder_dtype(cfg: EvalConfig, store: RunStore) -> None:
    """Resolve ``embedder_dtype=auto`` before the identity is checked: a run directory keeps the embedder dtype its
    identity holds (one made before the option: float32), a new run takes this machine's (`resolve_embedder_dtype`)."""
    if cfg.embedder_dtype == "auto":
        stored = (store.config().get("identity") or {}) if store.exists() else None
        cfg.embedder_dtype = resolve_embedder_dtype("auto", stored)


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
    the run's model, and a `LlamaCppModel` makes it a llama.cpp run). ``stages_only``: compute, do not score.
    ``poll_s``: seconds between checks while waiting for shards other workers hold. ``score_only``: compute
    nothing; score what the run holds (see `score_run`; with a `tracecal.evaluation.ray.RayExecutor` on its
    cluster: `tracecal.evaluation.rayscore`).
    ``executor``: where the units are computed (default `LocalExecutor`: this process; or a
    `tracecal.evaluation.ray.RayExecutor`, which loads ``cfg.model`` in its actors and takes no loaded ``model``).
    """
    if model is not None:
        _adopt(cfg, model)
    cfg.validate()  # before anything is written
    progress = progress or (lambda *_: None)
    store = RunStore(run_path)
    if score_only:
        if not store.exists():
            raise NotARunError(f"{run_path} is not a run directory (no config.json): nothing to score")
        runner = None
        if executor is not None and not isinstance(executor, LocalExecutor):  # the blocks on its Ray cluster
            from tracecal.evaluation.rayscore import RayBlocks

            runner = RayBlocks(executor)
        return score_run(store, cfg, progress, allow_missing=True, runner=runner)
    tasks = _load_examples(cfg)  # data errors surface before the run directory is touched
    check_splittable(tasks, cfg.cal_frac)  # too few questions to split: refused before anything is generated
    executor = executor or LocalExecutor()
    if model is not None and not isinstance(executor, LocalExecutor):
        raise ConfigError("a loaded model cannot be shipped to workers: give its name, path or URL (--model)")
    _pin_dtype(cfg, store)  # before the executor resolves a new run's auto
    executor.pin(cfg)
    _pin_embedder_dtype(cfg, store)
    identity = cfg.identity()
    store.check(identity, legacy=legacy_identity, defaults=IDENTITY_DEFAULTS)
    sched = Scheduler(store, cfg, Resources(cfg, model), progress)
    check_stored(store, tasks, [p.name for p in sched.passes], cfg.shard_size)  # changed data: before any model
    executor.prepare(sched, tasks)  # a model that does not load leaves no run directory behind
    store.open(cfg.to_dict(), identity, legacy=legacy_identity, defaults=IDENTITY_DEFAULTS)
    executor.run(sched, tasks, poll_s)
    if stages_only:
        return None
    return score_run(store, cfg, progress, tasks=tasks)
