"""Scoring a stored run out of core: one task × estimator block at a time, each reading only the columns it needs.

A block (`tracecal.evaluation.protocol.score_block`: one estimator on every split of one task) needs the task's
labels and that estimator's inputs only — the traces' s_t and H_t and the stats the estimator declares
(`Estimator.stats`) — read from the task's shards of each pass as one Arrow dataset (`pyarrow.dataset` over
`RunStore.shard_files`: the first shard's schema, the needed columns projected, the files memory-mapped), never the
prompts, token strings or top-k lists and never a `Trace` object. `score_stored` (what `score_run` does):

1. per task, the *frame* (`read_frame`): the traces' ids, answer texts, stop reasons, entropy kinds and lengths and
   each needed pass's ids (complete? aligned?); the answers are labelled against the task's examples;
2. the blocks, in task × estimator order, by a *runner*: `LocalBlocks` (this process; one task's inputs — the union
   of its estimators' columns — held at a time) or `tracecal.evaluation.rayscore.RayBlocks` (Ray tasks);
3. the merge in that order (`task_parts`, `results_of`): the numbers, tables and draws of `score_tasks` on
   `tracecal.evaluation.run.load_task_stats`, bit for bit (tests/evaluation/test_blockscore.py).

Memory: one task's needed columns in the local path (a 250,000-answer task of 32 tokens on average: 128 MB for s_t
and H_t, as much again for a token-level stat such as TokenSAR's weights), plus every task's frame and outputs
(ids, texts, the rows / scores / predictions tables), which the driver holds until it writes them.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from pyarrow import fs

from tracecal.estimators import REGISTRY, TRACE_STATS, Inputs, needs_of
from tracecal.evaluation.protocol import (
    Block,
    Progress,
    ScoreConfig,
    TaskFrame,
    TaskParts,
    not_run_of,
    results_of,
    score_block,
    split_set,
    task_counts,
    task_parts,
    warn_single_class,
)
from tracecal.evaluation.results import Results
from tracecal.evaluation.runstore import TRACES, DataChangedError, RunStore, RunStoreError
from tracecal.passes import ANSWER, TOKEN, VECTOR, provider_of, stat_kind
from tracecal.traces.io import TraceFileError
from tracecal.traces.segments import check_token_values
from tracecal.traces.trace import TraceBatch

__all__ = [
    "Job",
    "LocalBlocks",
    "Runner",
    "answered",
    "block_inputs",
    "check_pass",
    "read_batch",
    "read_columns",
    "read_frame",
    "read_frames",
    "rows_of",
    "score_frames",
    "score_stored",
    "score_stored_block",
    "stat_array",
]

FRAME_COLUMNS = ["id", "text", "stop_reason", "entropy_kind", "surprisal"]


def read_columns(store: RunStore, pass_name: str, task: str, columns: Sequence[str]) -> pa.Table | None:
    """``columns`` of every shard of a pass for a task, in shard order (None when none is written), through one
    memory-mapped Arrow dataset; a shard that cannot be read is a `RunStoreError` saying what to do."""
    files = [str(f) for f in store.shard_files(pass_name, task)]
    if not files:
        return None
    try:
        data = ds.dataset(files, format="parquet", filesystem=fs.LocalFileSystem(use_mmap=True))
        return data.to_table(columns=list(columns))
    except (OSError, pa.ArrowInvalid) as e:
        raise RunStoreError(
            f"{task}: the {pass_name} shards of {store.path} cannot be read ({e}): delete the damaged shard and run "
            "again to compute it anew"
        ) from e


def stat_array(table: pa.Table, stat: str, kind: str, lengths: np.ndarray, where: str) -> np.ndarray:
    """A stat column as estimators read it: one float per answer (`ANSWER`), an (n, k) matrix (`VECTOR`), or the
    per-token values concatenated (`TOKEN`, checked against the answers' ``lengths``)."""
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


def answered(task: Any, ids: list[str], examples: list[Any]) -> list[Any]:
    """The example each stored answer (by id, in answer order) answers; `RuntimeError` for a run holding another
    number of answers, `DataChangedError` for an answer to a question the task does not have."""
    if len(ids) != len(examples):
        raise RuntimeError(
            f"{task.name}: the run holds {len(ids)} answers for the {len(examples)} questions asked — the run is "
            "incomplete, or --limit / the data differ from the run's (see its config.json)"
        )
    by_id = {ex.id: ex for ex in examples}
    if unknown := [i for i in ids if i not in by_id]:
        raise DataChangedError(
            f"{task.name}: the run holds answers to {len(unknown)} question(s) the task does not have (e.g. "
            f"{unknown[0]!r}): a shard of another task or run? Restore the data, or use a new --run-dir"
        )
    return [by_id[i] for i in ids]


def check_pass(task: str, name: str, pass_ids: list[str] | None, ids: list[str], allow_missing: bool) -> bool:
    """Whether pass ``name`` is complete for the task (its answer ids ``pass_ids``, None when none is stored);
    incomplete is a `RuntimeError` unless ``allow_missing``; misaligned always is."""
    if pass_ids is None or len(pass_ids) != len(ids):
        if not allow_missing:
            got = 0 if pass_ids is None else len(pass_ids)
            raise RuntimeError(f"{task}: the {name} pass is incomplete ({got} of {len(ids)} answers)")
        return False
    if pass_ids != ids:
        raise RuntimeError(f"{task}: the {name} pass is not aligned with the traces")
    return True


def rows_of(examples: list[Any], texts: list[str], stop_reasons: list[str]) -> dict[str, list[Any]]:
    """The ``rows`` table's columns of the answers (question, golds as JSON, answer, stop reason)."""
    return {
        "question": [ex.question for ex in examples],
        "golds": [json.dumps(ex.golds, ensure_ascii=False) for ex in examples],
        "answer": texts,
        "stop_reason": stop_reasons,
    }


def read_frame(
    store: RunStore, task: Any, examples: list[Any], passes: Sequence[str], allow_missing: bool
) -> TaskFrame:
    """The task's `TaskFrame` from the light columns of its traces (and ``passes``' ids), its answers labelled by
    ``task.label(example, text)``; the checks of `tracecal.evaluation.run.load_task_stats`."""
    t = read_columns(store, TRACES, task.name, FRAME_COLUMNS)
    cols = {c: [] for c in FRAME_COLUMNS[:4]} if t is None else {c: t.column(c).to_pylist() for c in FRAME_COLUMNS[:4]}
    lengths = np.zeros(0, np.int64) if t is None else pc.list_value_length(t.column("surprisal")).to_numpy()
    del t
    ids = [str(i) for i in cols["id"]]
    exs = answered(task, ids, examples)
    y = np.array([task.label(ex, text) for ex, text in zip(exs, cols["text"], strict=True)], dtype=np.int64)
    missing = set()
    for name in (p for p in passes if p != TRACES):
        got = read_columns(store, name, task.name, ["id"])
        if not check_pass(task.name, name, None if got is None else got.column("id").to_pylist(), ids, allow_missing):
            missing.add(name)
    rows = rows_of(exs, cols["text"], cols["stop_reason"])
    lengths = lengths.astype(np.int64)
    return TaskFrame(
        task.name, ids, y, lengths, task.label_rule, cols["stop_reason"], cols["entropy_kind"], rows, missing
    )


def read_batch(store: RunStore, task: str) -> TraceBatch:
    """The task's s_t and H_t as one `TraceBatch` (no token ids), checked as `load_traces` checks them."""
    t = read_columns(store, TRACES, task, ["surprisal", "entropy"])
    if t is None:
        return TraceBatch(np.zeros(0), np.zeros(0), np.zeros(1, np.int64))
    lengths = pc.list_value_length(t.column("surprisal")).to_numpy().astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    s = stat_array(t, "surprisal", TOKEN, lengths, f"{task}/{TRACES}")
    h = stat_array(t, "entropy", TOKEN, lengths, f"{task}/{TRACES}")
    del t
    s, h = check_token_values(s, h, offsets, lambda i: f"{task}: answer {i} of the run", TraceFileError)
    return TraceBatch(s, h, offsets, values_checked=True)


def block_inputs(store: RunStore, task: str, stats: Iterable[str], batch: TraceBatch | None = None) -> Inputs:
    """The estimators' `Inputs` of a task with only s_t, H_t (`read_batch`, unless ``batch`` is the task's) and
    ``stats``, each pass's columns read once."""
    inputs = Inputs(read_batch(store, task) if batch is None else batch)
    lengths = inputs.batch.lengths
    by_pass: dict[str, list[str]] = {}
    for stat in sorted(set(stats) - TRACE_STATS):
        by_pass.setdefault(provider_of(stat), []).append(stat)
    for name, cols in by_pass.items():
        table = read_columns(store, name, task, cols)
        if table is None or table.num_rows != len(lengths):
            raise RuntimeError(f"{task}: the {name} pass is incomplete: its estimators cannot be scored")
        for stat in cols:
            inputs.stats[stat] = stat_array(table, stat, stat_kind(stat), lengths, f"{task}/{name}")
    return inputs


@dataclass
class Job:
    """One block to score: estimator ``name`` on task ``task``, whose labels are ``y``."""

    task: str
    name: str
    y: np.ndarray


Runner = Callable[[RunStore, list[Job], ScoreConfig], Iterator[Block]]
"""Scores the jobs' blocks and yields them in the jobs' order (`LocalBlocks`, `tracecal.evaluation.rayscore`)."""


def score_stored_block(
    store: RunStore, job: Job, counts: np.ndarray | None, cfg: ScoreConfig, batch: TraceBatch | None = None
) -> Block:
    """One block read from the run on its own: its estimator's columns only (`block_inputs`; ``batch``: the task's
    s_t and H_t when the caller holds them already)."""
    data = SimpleNamespace(y=job.y, inputs=block_inputs(store, job.task, REGISTRY[job.name].stats, batch))
    return score_block(job.name, data, split_set(job.y, cfg), counts, cfg)


class LocalBlocks:
    """The blocks in this process, in order, one task's inputs (every column its jobs need) held at a time."""

    def __call__(self, store: RunStore, jobs: list[Job], cfg: ScoreConfig) -> Iterator[Block]:
        task, data, sp, counts = None, None, None, None
        for job in jobs:
            if job.task != task:
                data = None  # the last task's columns go before the next task's are read
                stats = set().union(*(REGISTRY[j.name].stats for j in jobs if j.task == job.task))
                task, data = job.task, SimpleNamespace(y=job.y, inputs=block_inputs(store, job.task, stats))
                sp, counts = split_set(job.y, cfg), task_counts(job.y, job.task, cfg)
            assert sp is not None
            yield score_block(job.name, data, sp, counts, cfg)


def read_frames(
    store: RunStore,
    tasks: Sequence[tuple[Any, list[Any]]],
    passes: Sequence[str],
    allow_missing: bool,
    names: list[str],
) -> list[TaskFrame]:
    """`read_frame` of each (task, examples) pair, with a warning naming the estimators of ``names`` not scored on
    a task whose passes are incomplete."""
    frames = [read_frame(store, t, exs, passes, allow_missing) for t, exs in tasks]
    for f in frames:
        if f.missing:
            not_run = [e for e in names if set(needs_of([e])) & f.missing]
            warnings.warn(
                f"{f.task}: {', '.join(sorted(f.missing))} pass incomplete; not scored there: {', '.join(not_run)}",
                UserWarning,
                stacklevel=3,
            )
    return frames


def score_frames(
    store: RunStore,
    frames: Sequence[TaskFrame],
    cfg: ScoreConfig,
    progress: Progress | None = None,
    runner: Runner | None = None,
) -> Results:
    """Every estimator × task × seed of the tasks ``frames`` (`read_frames`), block by block (module docstring);
    an estimator reading a pass in a frame's ``missing`` is not run on that task; ``runner``: where the blocks run
    (default `LocalBlocks`)."""
    progress = progress or (lambda *_: None)
    cfg.validate()
    jobs: list[Job] = []
    for f in frames:
        warn_single_class(f)
        jobs += [Job(f.task, e, f.y) for e in cfg.estimators if e not in not_run_of(f, cfg)]
    blocks = (runner or LocalBlocks())(store, jobs, cfg)
    parts: dict[str, TaskParts] = {}
    names = cfg.estimators
    for f in frames:
        run = {j.name for j in jobs if j.task == f.task}
        got: dict[str, Block] = {}
        for i, name in enumerate(names):
            progress(f"score {f.task}", i, len(names))
            if name in run:
                got[name] = next(blocks)
                assert got[name].name == name, (got[name].name, name)
        progress(f"score {f.task}", len(names), len(names))
        parts[f.task] = task_parts(f, cfg, split_set(f.y, cfg), got)
    return results_of(parts, cfg)


def score_stored(
    store: RunStore,
    tasks: Sequence[tuple[Any, list[Any]]],
    cfg: ScoreConfig,
    progress: Progress | None = None,
    allow_missing: bool = False,
    runner: Runner | None = None,
) -> Results:
    """`score_frames` of `read_frames`: a stored run's (task, examples) pairs scored block by block; ``allow_missing``:
    an estimator whose pass is incomplete for a task is not run there (else `RuntimeError`)."""
    frames = read_frames(store, tasks, needs_of(cfg.estimators), allow_missing, cfg.estimators)
    return score_frames(store, frames, cfg, progress, runner)
