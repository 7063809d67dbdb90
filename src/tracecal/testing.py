"""A synthetic scored run directory in the format `tracecal.evaluation.run` writes (no model needed).

For tests, benchmarks and demos only: no library module imports it. Everything goes through `RunStore`, as
evaluate writes it: the settings and identity of an `EvalConfig` (`RunStore.open`), the generation pass shard by shard
(`RunStore.write_traces`), the per-answer tables ``rows``, ``scores`` and ``predictions``
(`RunStore.write_table`), and the results with their CSV and Markdown (`RunStore.write_results`,
`tracecal.evaluation.results`). Scores carry a real signal (correct answers score higher on average), probabilities come
from a logistic map of the scores, and the metrics are computed from them with `tracecal.stats.metrics.compute_all`.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tracecal.estimators.baselines import PAPER_BASELINES
from tracecal.evaluation.config import EvalConfig
from tracecal.evaluation.protocol import informative
from tracecal.evaluation.results import Results, results_csv, results_markdown
from tracecal.evaluation.runstore import TRACES, RunStore
from tracecal.stats.metrics import compute_all
from tracecal.traces.trace import Trace, TraceBatch

__all__ = ["write_synthetic_run", "add_synthetic_passes", "add_synthetic_samples", "SYNTHETIC_ESTIMATORS"]

SYNTHETIC_ESTIMATORS = ("trace", "trace_plus", "trace_plus_seqlik", *PAPER_BASELINES, "p_true", "verbalized")
"""The estimators of a synthetic run by default: TRACE, TRACE+ (and its ablation), the 19 baselines, P(True) and
verbalised confidence — the 24 of the paper's tables."""

WORDS = (
    "the",
    "answer",
    "is",
    "a",
    "of",
    "Paris",
    "river",
    "king",
    "1942",
    "seven",
    "apples",
    "in",
    "total",
    "onion",
    "antelope",
    "mammal",
    "because",
    "first",
    "then",
    "so",
    "he",
    "has",
    "left",
    "Dieppe",
    "Edward",
    "III",
    "&",
    "it",
    "was",
    "not",
    "\n",
    "=",
    "+",
    "42",
    "Answer:",
    "approximately",
    "famous",
    "painter",
    "Rome",
    "gold",
)
CAL_FRAC = 0.35
SYNTHETIC_INFO: dict[str, Any] = {"family": "synthetic", "stats": [], "passes": [TRACES], "self_calibrated": False}

Overrides = dict[tuple[str, int], dict[str, Any]]


def _answers(
    rng: np.random.Generator, task: str, y: np.ndarray, max_tokens: int, overrides: Overrides
) -> tuple[list[Trace], dict[str, list[Any]]]:
    """The task's traces and its ``rows`` columns (as `tracecal.evaluation.run` stores them)."""
    traces: list[Trace] = []
    rows: dict[str, list[Any]] = {k: [] for k in ("task", "id", "question", "golds", "answer", "stop_reason")}
    for i in range(len(y)):
        ov = overrides.get((task, i), {})
        toks = list(ov.get("tokens") or [])
        if not toks:
            k = rng.integers(0, len(WORDS), int(rng.integers(1, max_tokens + 1)))
            toks = [(" " if j else "") + str(WORDS[w]) for j, w in enumerate(k)]
        s = rng.exponential(0.6 + 0.8 * (1 - y[i]), len(toks))
        offs = np.concatenate([[0], np.cumsum([len(t) for t in toks])[:-1]]).astype(np.int64)
        text = ov.get("answer", "".join(toks))
        qid = f"{task}-{i}"
        h = s + rng.exponential(1.0, len(toks))
        traces.append(
            Trace(
                text=text,
                token_ids=np.arange(len(toks)),
                surprisal=s,
                entropy=h,
                token_strings=toks,
                offsets=offs,
                stop_reason="eos",
                id=qid,
                meta={"task": task},
            )
        )
        golds = ov.get("golds") or [f"gold {i}"] + [f"alias {k} of {i}" for k in range(int(rng.integers(0, 12)))]
        question = ov.get("question", f"Synthetic question {i} of {task}: what is item {i}?")
        values = (task, qid, question, json.dumps(golds, ensure_ascii=False), text, "eos")
        for col, v in zip(rows, values, strict=True):
            rows[col].append(v)
    return traces, rows | {"correct": y.tolist(), "n_tokens": [len(t.token_ids) for t in traces]}


def _scores(
    rng: np.random.Generator, y: np.ndarray, cal: np.ndarray, estimators: Sequence[str], n_seeds: int
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Raw scores (``scores`` columns), seed-0 ``raw:`` / ``prob:`` predictions and metrics per estimator."""
    scores: dict[str, Any] = {}
    preds: dict[str, Any] = {}
    metrics: dict[str, Any] = {}
    ev = ~cal
    for ei, est in enumerate(estimators):
        raw = (0.3 + 2.0 * rng.random()) * y + rng.normal(0, 1, len(y)) + 0.01 * ei
        prob = np.clip(1.0 / (1.0 + np.exp(-(1.2 * raw - 1.0 + 0.3 * rng.normal()))), 0.0, 1.0)
        scores[est] = raw
        preds[f"raw:{est}"], preds[f"prob:{est}"] = np.where(cal, np.nan, raw), np.where(cal, np.nan, prob)
        m = compute_all(y[ev], raw[ev], prob[ev]) if len(np.unique(y[ev])) == 2 else {}
        m |= {
            "n": float(ev.sum()),
            "n_correct": float(y[ev].sum()),
            "n_cal": float(cal.sum()),
            "n_correct_cal": float(y[cal].sum()),
        }
        metrics[est] = {
            k: {"mean": float(v), "sd": float(0.02 * rng.random()), "n_seeds": n_seeds} for k, v in m.items()
        }
    return scores, preds, metrics


def _task_info(task: str, y: np.ndarray, cal: np.ndarray, lengths: list[int], min_per_class: int) -> dict[str, Any]:
    why = informative(int(y.sum()), len(y), min_per_class)
    return {
        "n": len(y),
        "n_correct": int(y.sum()),
        "accuracy": float(y.mean()),
        "n_correct_cal": int(y[cal].sum()),
        "n_correct_eval": int(y[~cal].sum()),
        "label_rule": f"synthetic labels for {task}",
        "zero_token_answers": 0,
        "stopped_at_length": 0,
        "mean_answer_tokens": float(np.mean(lengths)),
        "entropy_kind": ["exact"],
        "nan_mapped": {},
        "not_run": [],
        "informative": why is None,
        "informative_reason": why,
    }


def _average(metrics: dict[str, Any], tasks: Sequence[str], estimators: Sequence[str]) -> dict[str, Any]:
    """The mean over tasks of the per-task means (the pseudo-task ``average``)."""
    return {
        est: {
            k: {
                "mean": float(np.mean([metrics[t][est][k]["mean"] for t in tasks if k in metrics[t][est]])),
                "sd": float("nan"),
                "n_seeds": len(tasks),
            }
            for k in metrics[tasks[0]][est]
        }
        for est in estimators
    }


def write_synthetic_run(
    path: str | os.PathLike[str],
    tasks: Sequence[str] = ("triviaqa", "svamp", "truthfulqa", "mlqa"),
    n_per_task: int = 100,
    estimators: Sequence[str] = SYNTHETIC_ESTIMATORS,
    max_tokens: int = 64,
    shard_size: int = 64,
    n_seeds: int = 20,
    seed: int = 0,
    overrides: Overrides | None = None,
    accuracy: Mapping[str, float] | None = None,
    min_per_class: int = 50,
) -> Path:
    """Write a synthetic scored run directory (through its `RunStore`) and return its path.

    Args:
        path: the run directory to create.
        tasks: task names.
        n_per_task: answers per task.
        estimators: estimator names (any strings; the built-in 24 by default).
        max_tokens: answers get 1 … ``max_tokens`` tokens (uniform).
        shard_size: answers per shard of the generation pass.
        n_seeds: recorded in the config (the metrics are computed once, their sd is synthetic).
        seed: random seed.
        overrides: ``{(task, row index): {"question": ..., "answer": ..., "tokens": [...], "golds": [...]}}``
            to plant specific content (e.g. markup for escaping tests); ``tokens`` sets the answer's tokens.
        accuracy: ``{task: share correct}`` (default: uniform in 0.2 … 0.8 per task).
        min_per_class: the run's `ScoreConfig.min_per_class` (a task with fewer correct or wrong answers is not
            ranked: left out of the average, marked ``informative: false`` with its reason).
    """
    rng = np.random.default_rng(seed)
    cfg = EvalConfig(
        tasks=list(tasks),
        limit=n_per_task,
        model="synthetic",
        dtype="float32",
        estimators=list(estimators),
        n_seeds=n_seeds,
        cal_frac=CAL_FRAC,
        shard_size=shard_size,
        min_per_class=min_per_class,
    )
    store = RunStore(path)
    store.open(cfg.to_dict(), cfg.identity())
    tables: dict[str, list[pa.Table]] = {"rows": [], "scores": [], "predictions": []}
    info: dict[str, Any] = {}
    metrics: dict[str, Any] = {}
    for task in tasks:
        acc = (accuracy or {}).get(task)
        parts, info[task], metrics[task] = _task(store, rng, task, cfg, max_tokens, overrides or {}, acc)
        for name, table in parts.items():
            tables[name].append(table)
    if len(tasks) > 1 and len(ranked := [t for t in tasks if info[t]["informative"]]) > 1:
        metrics["average"] = _average(metrics, ranked, estimators)
    for name, parts_of in tables.items():
        store.write_table(name, pa.concat_tables(parts_of, promote_options="default"))
    est_info = {e: dict(SYNTHETIC_INFO, description=f"synthetic {e}") for e in estimators}
    res = Results(cfg.to_dict(), info, metrics, est_info, [], store.timings())
    store.write_results(res.to_json(), results_csv(res), results_markdown(res))
    return store.path


def _task(
    store: RunStore,
    rng: np.random.Generator,
    task: str,
    cfg: EvalConfig,
    max_tokens: int,
    overrides: Overrides,
    accuracy: float | None = None,
) -> tuple[dict[str, pa.Table], dict[str, Any], dict[str, Any]]:
    """One synthetic task: its traces written shard by shard, and its (rows / scores / predictions tables, task
    info, metrics per estimator); ``accuracy``: the share of correct answers (default: uniform in [0.2, 0.8])."""
    n, size = int(cfg.limit or 0), cfg.shard_size
    t0 = time.perf_counter()
    rate = 0.2 + 0.6 * rng.random()
    y = (rng.random(n) < (rate if accuracy is None else accuracy)).astype(np.int64)
    traces, rows = _answers(rng, task, y, max_tokens, overrides)
    for k in range(0, n, size):
        store.write_traces(task, k // size, traces[k : k + size])
    store.add_time(f"generate/{task}", time.perf_counter() - t0)
    cal = np.zeros(n, dtype=bool)
    cal[rng.permutation(n)[: int(round(CAL_FRAC * n))]] = True
    scores, preds, metrics = _scores(rng, y, cal, cfg.estimators, cfg.n_seeds)
    key = {"task": rows["task"], "id": rows["id"]}
    split = {"split": np.where(cal, "cal", "eval").tolist(), "correct": y}
    tables = {"rows": pa.table(rows), "scores": pa.table(key | scores), "predictions": pa.table(key | split | preds)}
    return tables, _task_info(task, y, cal, rows["n_tokens"], cfg.min_per_class), metrics


def add_synthetic_passes(store: RunStore, tasks: Sequence[str], shard_size: int = 64, seed: int = 1) -> None:
    """Synthetic shards of the ``extra`` (P(True), verbalised, digit mass), ``semantic`` (TokenSAR / MARS token
    weights) and ``beam`` (5 beam scores) passes of ``tasks`` in a run `write_synthetic_run` wrote, aligned with its
    traces shard by shard, so that every built-in estimator can be scored on it (`RunStore.write_shard`)."""
    rng = np.random.default_rng(seed)
    for task in tasks:
        t = store.read_pass(TRACES, task, columns=["id", "surprisal"])
        assert t is not None, f"{task}: no traces"
        ids = t.column("id").to_pylist()
        n = len(ids)
        lengths = pc.list_value_length(t.column("surprisal")).to_numpy(zero_copy_only=False)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        rel, u = rng.random(offsets[-1]), rng.random(offsets[-1])
        extra = {"p_true": rng.random(n), "verbalized": rng.random(n), "digit_mass": rng.random(n)}
        beam = np.sort(-rng.exponential(1.0, (n, 5)), axis=1)[:, ::-1]
        for k, a in enumerate(range(0, n, shard_size)):
            b = min(a + shard_size, n)
            key = {"id": ids[a:b]}
            store.write_shard("extra", task, k, pa.table(key | {c: v[a:b] for c, v in extra.items()}))
            sem = {"tokensar_rel": _ragged(rel, offsets, a, b), "mars_u": _ragged(u, offsets, a, b)}
            store.write_shard("semantic", task, k, pa.table(key | sem))
            five = np.arange(0, 5 * (b - a) + 1, 5, dtype=np.int32)
            store.write_shard("beam", task, k, pa.table(key | {"beam": _ragged(beam[a:b].ravel(), five, 0, b - a)}))


def add_synthetic_samples(
    store: RunStore,
    task: str,
    k: int = 10,
    shard_size: int = 64,
    seed: int = 2,
    cost: Mapping[str, float] | None = None,
) -> None:
    """Synthetic shards of the ``samples`` pass (stats only: agreement, clusters, sample TRACE and the cost columns,
    each cost column = ``cost[name]``, default 1.0) for ``task`` of a run `write_synthetic_run` wrote; samples of
    a correct answer agree with it more often (p 0.8 against 0.3)."""
    from tracecal.passes.sampling import COST_STATS

    rng = np.random.default_rng(seed)
    rows = store.read_table("rows", ["task", "id", "correct"])
    assert rows is not None, "no rows table"
    label_cols = [rows.column(c).to_pylist() for c in ("task", "id", "correct")]
    correct = {i: c for t, i, c in zip(*label_cols, strict=True) if t == task}
    ids = store.read_pass(TRACES, task, columns=["id"]).column("id").to_pylist()  # type: ignore[union-attr]
    agree = rng.random((len(ids), k)) < np.where([correct[i] for i in ids], 0.8, 0.3)[:, None]
    first = np.argmax(agree, axis=1)
    cluster = np.where(agree, first[:, None], np.arange(k)[None, :])
    for j, a in enumerate(range(0, len(ids), shard_size)):
        b = min(a + shard_size, len(ids))
        cols: dict[str, Any] = {"id": ids[a:b], "sample_agree": agree[a:b].astype(float).tolist()}
        cols |= {"sample_cluster": cluster[a:b].tolist(), "sample_trace": rng.random((b - a, k)).tolist()}
        cols |= {c: [float((cost or {}).get(c, 1.0))] * (b - a) for c in COST_STATS}
        store.write_shard("samples", task, j, pa.table(cols))


def _ragged(flat: np.ndarray, offsets: np.ndarray, a: int, b: int) -> pa.Array:
    """Rows ``a:b`` of a ragged array (``flat`` split at ``offsets``) as an Arrow list<double> column."""
    return pa.ListArray.from_arrays(pa.array(offsets[a : b + 1] - offsets[a]), pa.array(flat[offsets[a] : offsets[b]]))


def scored_synthetic_run(
    path: str | os.PathLike[str],
    tasks: Mapping[str, tuple[int, float]],
    estimators: Sequence[str] = ("trace", "trace_plus", "trace_plus_cv", "neg_mean_entropy", "mean_prob"),
    n_seeds: int = 5,
    n_boot: int = 200,
    seed: int = 0,
    model: str = "synthetic",
    dtype: str | None = "float32",
) -> Path:
    """A run directory scored by the real protocol (`tracecal.evaluation.protocol.score_tasks`) on synthetic
    traces: ``tasks`` maps a name to (answers, share correct); wrong answers have larger entropies and
    surprisals, so TRACE ranks above chance. Its traces are stored as the generation pass, so everything that
    reads a run (the report, the verdict, `tracecal fit-calibrator RUN`) works on it; ``model`` and ``dtype`` are
    what the run and its traces record (a calibrator fitted on it is then one of that model's; ``dtype=None``: none,
    as llama.cpp's traces)."""
    from tracecal.estimators import Inputs
    from tracecal.evaluation.protocol import TaskStats, score_tasks
    from tracecal.evaluation.run import write_results

    rng = np.random.default_rng(seed)
    cfg = EvalConfig(tasks=list(tasks), model=model, dtype=dtype or "auto", estimators=list(estimators))
    cfg.n_seeds, cfg.n_boot = n_seeds, n_boot
    store = RunStore(path)
    store.open(cfg.to_dict(), cfg.identity())
    data = []
    for task, (n, acc) in tasks.items():
        y = (rng.random(n) < acc).astype(np.int64)
        lengths = rng.integers(1, 12, n)
        traces = [
            Trace(
                text=f"answer {i}",
                token_ids=np.arange(lengths[i]),
                surprisal=rng.gamma(1.5, 0.3 if y[i] else 0.7, lengths[i]),
                entropy=rng.gamma(2.0, 0.5 if y[i] else 1.1, lengths[i]),
                id=f"{task}-{i}",
                model_id=model,
                decoding={"dtype": dtype} if dtype else {},
            )
            for i in range(n)
        ]
        store.write_traces(task, 0, traces)
        inputs = Inputs(TraceBatch.from_traces(traces), traces)
        rows = {
            "question": [f"Synthetic question {i} of {task}?" for i in range(n)],
            "golds": [json.dumps([f"gold {i}"]) for i in range(n)],
            "answer": [t.text for t in traces],
        }
        data.append(TaskStats(task, [t.id for t in traces], y, inputs, f"synthetic labels for {task}", rows))
    res = score_tasks(data, cfg.score)
    res.config = cfg.to_dict()
    write_results(store, res)
    return store.path
