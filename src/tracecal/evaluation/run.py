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

import json
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tracecal.estimators import Inputs, needs_of
from tracecal.evaluation.config import ConfigError, EvalConfig, check_splittable, legacy_identity
from tracecal.evaluation.protocol import Progress, TaskStats, score_tasks
from tracecal.evaluation.results import Results, results_csv, results_markdown
from tracecal.evaluation.runstore import TRACES, DataChangedError, NotARunError, RunStore
from tracecal.evaluation.scheduler import LocalExecutor, Resources, Scheduler, Tasks, check_stored
from tracecal.passes import ANSWER, PASSES, TOKEN, VECTOR
from tracecal.traces.trace import TraceBatch

__all__ = ["evaluate", "score_run", "load_task_stats", "write_results"]


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
    if unknown := [t.id for t in traces if t.id not in by_id]:
        raise DataChangedError(
            f"{task.name}: the run holds answers to {len(unknown)} question(s) the task does not have (e.g. "
            f"{unknown[0]!r}): a shard of another task or run? Restore the data, or use a new --run-dir"
        )
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
    tasks: Tasks | None = None,
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
    check_splittable(tasks, cfg.cal_frac)
    check_stored(store, tasks, passes)  # answers to changed questions are never scored against the new ones
    data = [load_task_stats(store, t, exs, passes, allow_missing) for t, exs in tasks]
    for d in data:
        if d.missing:
            not_run = [e for e in cfg.estimators if set(needs_of([e])) & d.missing]
            warnings.warn(
                f"{d.task}: {', '.join(sorted(d.missing))} pass incomplete; not scored there: {', '.join(not_run)}",
                UserWarning,
                stacklevel=2,
            )
    res = score_tasks(data, cfg.score, progress)
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
    check_splittable(tasks, cfg.cal_frac)  # too few questions to split: refused before anything is generated
    executor = executor or LocalExecutor()
    if model is not None and not isinstance(executor, LocalExecutor):
        raise ConfigError("a loaded model cannot be shipped to workers: give its name, path or URL (--model)")
    executor.pin(cfg)
    identity = cfg.identity()
    store.check(identity, legacy=legacy_identity)
    sched = Scheduler(store, cfg, Resources(cfg, model), progress)
    check_stored(store, tasks, [p.name for p in sched.passes], cfg.shard_size)  # changed data: before any model
    executor.prepare(sched, tasks)  # a model that does not load leaves no run directory behind
    store.open(cfg.to_dict(), identity, legacy=legacy_identity)
    executor.run(sched, tasks, poll_s)
    if stages_only:
        return None
    return score_run(store, cfg, progress, tasks=tasks)
