"""Reading a run for the report: results, per-answer rows, seed-0 predictions and the answers' tokens.

Everything is read through the run's `RunStore` (the only code that knows the run directory's layout),
column-wise with pyarrow (no `Trace` objects), so a 5,000-answer run loads in well under a second. Rows,
predictions and tokens are aligned on ``(task, id)``. A path that is not a scored run, or a run whose stored
results are damaged, raises a `RunStoreError` whose message says what to do (the CLI prints it).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from tracecal.errors import ValidationError
from tracecal.evaluation.runstore import TRACES, NotARunError, RunStore, RunStoreError
from tracecal.report.informative import with_informative
from tracecal.signals.operators import Segments, TraceConfig

__all__ = [
    "RunData",
    "TaskTokens",
    "load_run",
    "open_run",
    "read_results",
    "peak_windows",
    "select_estimators",
    "default_curve_estimators",
]

TRACE_COLUMNS = ("id", "text", "token_strings", "offsets", "surprisal", "entropy")


@dataclass
class TaskTokens:
    """The answer tokens of one task's rows (aligned with the rows of that task, in row order).

    ``offsets`` has one more entry than the task has rows; answer ``i`` owns
    ``strings[offsets[i]:offsets[i+1]]`` (and the same slice of ``surprisal`` / ``entropy``).
    ``present[i]`` is False when no trace was found for the row (its answer then shows no tokens).
    ``texts[i]`` is the trace's ``Trace.text`` ("" without a trace) and ``chars`` the character offset in it where
    each token starts (``Trace.offsets``, concatenated like ``surprisal``; zeros for a run stored without them).
    """

    strings: list[str]
    surprisal: np.ndarray
    entropy: np.ndarray
    offsets: np.ndarray
    present: np.ndarray
    texts: list[str] = field(default_factory=list)
    chars: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


@dataclass
class RunData:
    """A run directory loaded for reporting.

    Attributes:
        path: the run directory.
        results: the run's results (`RunStore.read_results`) as a dict, every task's ``informative`` and
            ``informative_reason`` set (`tracecal.report.informative.with_informative`).
        tasks: task names in the results' order (the pseudo-task ``average`` is not one of them).
        estimators: every estimator in the results' order.
        rows: the ``rows`` table's columns as Python lists (task, id, question, golds, answer, correct, ...).
        correct: the 0/1 labels of the rows, int64.
        split: seed-0 split of each row (``"cal"`` / ``"eval"``; ``""`` when predictions lack the row).
        prob: ``prob:<estimator>`` per row (NaN on calibration rows / when missing), for every estimator.
        raw: ``raw:<estimator>`` per row (NaN on calibration rows / when missing), for every estimator.
        tokens: per task, the answer tokens of its rows.
        task_rows: per task, the row indices that belong to it (ascending).
    """

    path: Path
    results: dict[str, Any]
    tasks: list[str]
    estimators: list[str]
    rows: dict[str, list[Any]]
    correct: np.ndarray
    split: np.ndarray
    prob: dict[str, np.ndarray] = field(default_factory=dict)
    raw: dict[str, np.ndarray] = field(default_factory=dict)
    tokens: dict[str, TaskTokens] = field(default_factory=dict)
    task_rows: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def n(self) -> int:
        """Number of answers (rows) in the run."""
        return len(self.correct)

    def eval_mask(self, task: str, estimator: str) -> np.ndarray:
        """Row indices of ``task`` on the seed-0 evaluation split with a finite probability and raw score."""
        idx = self.task_rows[task]
        p, r = self.prob[estimator][idx], self.raw[estimator][idx]
        ok = (self.split[idx] == "eval") & np.isfinite(p) & np.isfinite(r)
        return idx[ok]


def _key(tasks: list[Any], ids: list[Any]) -> list[tuple[str, str]]:
    return [(str(t), str(i)) for t, i in zip(tasks, ids, strict=True)]


def _flat(col: pa.ChunkedArray) -> tuple[np.ndarray, pa.Array]:
    """Offsets (rebased to 0, int64) and flat values of a list column."""
    arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if isinstance(arr, pa.ChunkedArray):  # pragma: no cover - defensive (pyarrow versions)
        arr = arr.combine_chunks()
    offsets = arr.offsets.to_numpy().astype(np.int64)
    values = arr.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0])) if len(offsets) else arr.values
    return offsets - (offsets[0] if len(offsets) else 0), values


def _task_tokens(store: RunStore, task: str, row_ids: list[str]) -> TaskTokens:
    """Tokens of ``row_ids`` (in that order) from the task's generation pass."""
    n = len(row_ids)
    empty = TaskTokens([], np.zeros(0), np.zeros(0), np.zeros(n + 1, np.int64), np.zeros(n, bool), [""] * n)
    table = _read(
        store,
        f"generated answers of task {task}",
        lambda: store.read_pass(TRACES, task, columns=TRACE_COLUMNS),
        "delete the damaged shard and run `tracecal evaluate` with the run's settings again to regenerate it",
    )
    if table is None or not {"surprisal", "entropy"} <= set(table.column_names):
        return empty
    t_off, s_vals = _flat(table.column("surprisal"))
    _, h_vals = _flat(table.column("entropy"))
    s_all = s_vals.to_numpy(zero_copy_only=False).astype(np.float64)
    h_all = h_vals.to_numpy(zero_copy_only=False).astype(np.float64)
    if "token_strings" in table.column_names:
        _, str_vals = _flat(table.column("token_strings"))
        str_all = str_vals.to_pylist()
    else:  # pragma: no cover - every stored answer has its token strings
        str_all = [""] * len(s_all)
    has_chars = "offsets" in table.column_names
    c_all = _flat(table.column("offsets"))[1].to_numpy(zero_copy_only=False) if has_chars else np.zeros(len(s_all))
    c_all = c_all.astype(np.int64)
    text_all = [str(x or "") for x in table.column("text").to_pylist()] if "text" in table.column_names else []
    tids = [str(x) for x in table.column("id").to_pylist()] if "id" in table.column_names else []
    pos = {tid: k for k, tid in enumerate(tids)}
    src = np.array([pos.get(str(r), -1) for r in row_ids], dtype=np.int64)
    present = src >= 0
    lengths = np.where(present, np.diff(t_off)[np.maximum(src, 0)] if len(t_off) > 1 else 0, 0)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    texts = [text_all[k] if k >= 0 and text_all else "" for k in src.tolist()]
    if len(tids) == n and np.array_equal(src, np.arange(n)):  # already in row order: nothing to gather
        return TaskTokens(str_all, s_all, h_all, offsets, present, texts, c_all)
    starts = np.repeat(t_off[np.maximum(src, 0)], lengths)
    gather = starts + (np.arange(int(offsets[-1])) - np.repeat(offsets[:-1], lengths))
    strings = [str_all[k] for k in gather.tolist()]
    return TaskTokens(strings, s_all[gather], h_all[gather], offsets, present, texts, c_all[gather])


def peak_windows(entropy: np.ndarray, offsets: np.ndarray, w: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Start and length of each answer's TRACE peak window: the argmax of the w-token mean entropy.

    This is the window behind M^(w)(H) (`tracecal.signals.operators.window_peak`): among the windows
    ``H[t:t+w]`` that fit inside the answer, the first one with the largest sum. When T < w the whole
    answer is the window (start 0, length T); an empty answer gets start 0, length 0. Vectorised over
    the whole batch (no per-answer loop).

    Args:
        entropy: per-token entropy of all answers concatenated, shape ``(N,)``.
        offsets: answer boundaries, shape ``(B+1,)``, ``offsets[0] == 0``.
        w: window length (default: `TraceConfig().window`, 4).

    Returns:
        ``(start, length)``: int64 arrays of shape ``(B,)``; ``start`` is relative to the answer.
    """
    w = TraceConfig().window if w is None else int(w)
    if w < 1:
        raise ValidationError(f"window w must be ≥ 1, got {w}")
    seg = Segments(np.asarray(offsets, dtype=np.int64))
    h = np.asarray(entropy, dtype=np.float64)
    lengths = seg.lengths
    start = np.zeros(len(seg), dtype=np.int64)
    length = np.minimum(lengths, w).astype(np.int64)
    n = seg.n_tokens
    long = lengths >= w
    if n == 0 or not long.any():
        return start, length
    # window sums starting at every position, summed the same way as `window_peak` does for small w
    sums = h.copy()
    for j in range(1, min(w, n)):
        sums[: n - j] += h[j:]
    valid = seg.pos <= seg.broadcast(lengths - w)  # the window fits inside the answer
    sums[~valid] = -np.inf
    best = seg.reduce(np.maximum, sums, empty=-np.inf)
    big = np.iinfo(np.int64).max
    cand = np.where(valid & (sums == seg.broadcast(best)), seg.pos, big)
    first = seg.reduce(np.minimum, cand, empty=0)
    first = np.asarray(first)
    start[long] = np.where(first[long] <= (lengths - w)[long], first[long], 0).astype(np.int64)  # NaN H: 0
    return start, length


def select_estimators(available: list[str], spec: str | list[str] | tuple[str, ...] | None) -> list[str]:
    """Estimators to show: ``None`` → all of the run's; else names or groups (``trace-only`` ...) in the run.

    Raises ``ValueError`` naming the unknown entries and the run's estimators.
    """
    if spec is None:
        return list(available)
    names = [x.strip() for x in (spec.split(",") if isinstance(spec, str) else spec) if x and x.strip()]
    if not names or names == ["all"]:
        return list(available)
    out: list[str] = []
    bad: list[str] = []
    for name in names:
        if name in available:
            group = [name]
        else:
            try:
                from tracecal.estimators import resolve_estimators

                group = [g for g in resolve_estimators(name) if g in available]
            except (ValueError, KeyError, LookupError):
                group = []
        if not group:
            bad.append(name)
        out += [g for g in group if g not in out]
    if bad:
        raise ValidationError(f"estimator(s) not in this run: {', '.join(bad)}; the run has: {', '.join(available)}")
    return out


def default_curve_estimators(run: RunData, shown: list[str], k: int = 8) -> list[str]:
    """The estimators drawn on the risk–coverage charts when none are chosen: TRACE / TRACE+ first, then
    the rest by mean AUROC (macro average over tasks), at most ``k`` in all."""
    metrics = run.results.get("metrics", {})
    ref = metrics.get("average") or (metrics.get(run.tasks[0]) if run.tasks else {}) or {}

    def auroc(name: str) -> float:
        v = ref.get(name, {}).get("auroc", {}).get("mean", math.nan)
        return float(v) if v is not None and math.isfinite(float(v)) else -math.inf

    first = [e for e in ("trace", "trace_plus") if e in shown]
    rest = sorted((e for e in shown if e not in first), key=lambda e: -auroc(e))
    return (first + rest)[:k]


# ------------------------------------------------------------------------------------------- reading the run
RESCORE = "re-score it with `tracecal evaluate --score-only` and the run's settings"


def open_run(run_dir: str | os.PathLike[str] | RunStore) -> RunStore:
    """The store of an existing run directory (`NotARunError` / `RunStoreError` with a message otherwise)."""
    if isinstance(run_dir, RunStore):
        return run_dir
    path = Path(run_dir)
    if path.is_file():
        raise RunStoreError(
            f"{path} is a file, not a run directory: pass the folder given to `tracecal evaluate --run-dir`"
        )
    if not path.is_dir():
        raise NotARunError(f"run directory not found: {path}")
    return RunStore(path)


def read_results(store: RunStore) -> dict[str, Any]:
    """The run's results, checked to have the shape `tracecal evaluate` writes."""
    try:
        doc = store.read_results()  # RunStoreError when it is not JSON
    except NotARunError as e:
        if not store.exists():
            raise
        raise NotARunError(
            f"{store.path} holds a run that has not been scored yet: finish it with `tracecal evaluate` "
            "(same settings), or score what it holds with `tracecal evaluate --score-only`"
        ) from e
    except RunStoreError as e:  # damaged: not JSON
        raise RunStoreError(f"{e} To repair the run, {RESCORE}.") from e
    if not isinstance(doc, dict) or not all(isinstance(doc.get(k), dict) for k in ("tasks", "metrics")):
        raise RunStoreError(f"the stored results of {store.path} are damaged (no tasks and metrics): {RESCORE}")
    if not isinstance(doc.get("estimators") or {}, dict) or not isinstance(doc.get("config") or {}, dict):
        raise RunStoreError(f"the stored results of {store.path} are damaged (estimators, config): {RESCORE}")
    return doc


def _read(store: RunStore, what: str, read: Callable[[], Any], fix: str = RESCORE) -> Any:
    """``read()``, with a damaged file reported as a `RunStoreError` naming ``what`` and the ``fix``."""
    try:
        return read()
    except (pa.ArrowException, OSError) as e:
        raise RunStoreError(f"cannot read the {what} in {store.path} ({e}): {fix}") from e


def _rows(store: RunStore) -> tuple[dict[str, list[Any]], int]:
    table = _read(store, "per-answer rows", lambda: store.read_table("rows"))
    if table is None:
        raise NotARunError(f"{store.path} has results but no per-answer rows: {RESCORE}")
    rows = {c: table.column(c).to_pylist() for c in table.column_names}
    n = table.num_rows
    for c, default in (("question", ""), ("golds", "[]"), ("answer", ""), ("stop_reason", ""), ("n_tokens", 0)):
        rows.setdefault(c, [default] * n)
    if "task" not in rows or "id" not in rows:
        raise RunStoreError(f"the per-answer rows of {store.path} have no task / id columns: {RESCORE}")
    return rows, n


def _predictions(
    store: RunStore, keys: list[tuple[str, str]], want: Sequence[str]
) -> tuple[np.ndarray, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Seed-0 split, ``prob:`` and ``raw:`` columns aligned with the rows' ``keys`` (NaN / "" where missing)."""
    n = len(keys)
    split = np.full(n, "", dtype=object)
    prob = {e: np.full(n, np.nan) for e in want}
    raw = {e: np.full(n, np.nan) for e in want}
    cols = ["task", "id", "split"] + [f"{k}:{e}" for e in want for k in ("raw", "prob")]
    pt = _read(store, "predictions", lambda: store.read_table("predictions", columns=cols))
    if pt is None or pt.num_rows == 0 or not {"task", "id"} <= set(pt.column_names):
        return split, prob, raw
    pkeys = _key(pt.column("task").to_pylist(), pt.column("id").to_pylist())
    if pkeys == keys:
        order, hit = np.arange(n), np.ones(n, bool)
    else:
        ppos = {k: i for i, k in enumerate(pkeys)}
        src = np.array([ppos.get(k, -1) for k in keys], dtype=np.int64)
        hit, order = src >= 0, np.maximum(src, 0)
    if "split" in pt.column_names:
        split[hit] = np.asarray(pt.column("split").to_pylist(), dtype=object)[order[hit]]
    for e in want:
        for kind, dst in (("raw", raw), ("prob", prob)):
            if f"{kind}:{e}" in pt.column_names:
                v = pt.column(f"{kind}:{e}").to_numpy(zero_copy_only=False).astype(np.float64)
                dst[e][hit] = v[order[hit]]
    return split, prob, raw


def load_run(run_dir: str | os.PathLike[str] | RunStore, estimators: list[str] | None = None) -> RunData:
    """Load a scored run through its `RunStore`: results, rows, seed-0 predictions and the answers' tokens.

    ``estimators`` limits which ``raw:`` / ``prob:`` prediction columns are read (default: all of them).
    Raises `NotARunError` (a `FileNotFoundError`) when ``run_dir`` holds no scored run, `RunStoreError` when
    what it holds is damaged.
    """
    store = open_run(run_dir)
    results = read_results(store)
    all_est = list(results.get("estimators") or {})
    tasks = list(results["tasks"])
    rows, n = _rows(store)
    correct = np.asarray(rows.get("correct", [0] * n), dtype=np.int64)
    keys = _key(rows["task"], rows["id"])
    tasks += [t for t in dict.fromkeys(str(x) for x in rows["task"]) if t not in tasks]
    split, prob, raw = _predictions(store, keys, all_est if estimators is None else estimators)
    task_arr = np.asarray([str(t) for t in rows["task"]], dtype=object)
    task_rows = {t: np.flatnonzero(task_arr == t) for t in tasks}
    tokens = {t: _task_tokens(store, t, [str(rows["id"][i]) for i in idx]) for t, idx in task_rows.items()}
    results = with_informative(results, tasks)  # every task marked; an older run's average over the ranked ones
    return RunData(store.path, results, tasks, all_est, rows, correct, split, prob, raw, tokens, task_rows)
