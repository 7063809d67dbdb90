"""The evaluation protocol (docs/method.md §5) as a pure function: stored stats + labels + settings → `Results`.

No model, no files: `score_tasks` takes what the passes computed per task (`TaskStats`) and returns every
estimator × task × seed scored. For each of ``n_seeds`` seeds a stratified ``cal_frac`` calibration /
evaluation split; AUROC, AUPRC, AURC and selective risk on raw scores of the evaluation split; Brier, ECE
and adaptive ECE on probabilities from a calibrator (Platt by default) fitted on the calibration split;
self-calibrated estimators (TRACE+) are their own calibrator. Non-finite scores (zero-token answers) are
mapped to the least confident value and counted. Each estimator is scored on all splits at once
(`tracecal.evaluation.splitscore`: one sort of a label-free score for every split, Platt fitted on every split
together); `one_split` gives one split's numbers alone. The unit is a *block*, one task × estimator (`score_block`),
merged per task (`task_parts`) and over tasks (`results_of`): `tracecal.evaluation.blockscore` scores a stored run block
by block out of core, `tracecal.evaluation.rayscore` on a Ray cluster, with the same numbers.

Statistics beyond the means (`tracecal.stats.bootstrap`, `tracecal.stats.selective`): per task, every
estimator's AUROC and Brier difference to the best non-TRACE estimator with a paired bootstrap interval over
questions (``n_boot`` resamples, ``level``; one resample of the task's questions applied to all splits; tasks
with fewer than `tracecal.stats.bootstrap.MIN_PER_CLASS` answers of a class get none) in ``Results.statistics``;
and per split the Learn-then-Test threshold of the raw score chosen on the calibration split (risk ≤
``sel_alpha`` with probability ≥ 1 − ``sel_delta``; for a fitted estimator on a held-out share ``sel_holdout`` of
it, the estimator refitted on the rest: `selective_threshold`) with its coverage, realised risk and violation
(``sel_coverage``, ``sel_risk``, ``sel_violation``) on the evaluation split, aggregated like every metric.
"""

from __future__ import annotations

import warnings
import zlib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa

from tracecal._validation import SEED, Constraint, Interval, check_params
from tracecal.estimators import REGISTRY, Inputs, get_estimator, passes_of
from tracecal.evaluation.ranking import (
    MIN_PER_CLASS_RANKED,
    average_over,
    informative,
    ranked_tasks,
    ranking_statistics,
)
from tracecal.evaluation.results import METRICS, Results
from tracecal.evaluation.splitscore import (
    Fits,
    SplitSet,
    one_split,
    sanitize,
    score_fitted,
    score_label_free,
    selective_threshold,
)
from tracecal.stats.bootstrap import (
    LEVEL,
    N_BOOT,
    bootstrap_counts,
    enough_per_class,
)
from tracecal.stats.metrics import N_BINS, SingleClassWarning
from tracecal.stats.selective import ALPHA, DELTA, HOLDOUT
from tracecal.stats.splits import SPLITS, stratified_split

__all__ = [
    "ScoreConfig",
    "SCORE_CONSTRAINTS",
    "setting",
    "constraints_of",
    "TaskStats",
    "TaskFrame",
    "Block",
    "score_tasks",
    "one_split",
    "score_block",
    "task_parts",
    "results_of",
    "sanitize",
    "selective_threshold",
    "NOT_RUN_KEYS",
]

SELECTIVE_KEYS = ("sel_coverage", "sel_risk", "sel_violation")
NOT_RUN_KEYS = (*METRICS, "base_rate", "n", "n_correct", "n_correct_cal", "n_cal", *SELECTIVE_KEYS)
Progress = Callable[[str, int, int], None]  # (stage description, done, total); "run" = the whole run, weighted

T = TypeVar("T")


def setting(default: T, constraint: Constraint) -> T:
    """A dataclass field with its default and its constraint (`tracecal._validation`), declared once, beside the
    field; `constraints_of` collects them."""
    return field(default=default, metadata={"constraint": constraint})


def constraints_of(cls: type) -> dict[str, Constraint]:
    """The constraint of every field of dataclass ``cls`` declared with `setting`."""
    return {f.name: f.metadata["constraint"] for f in fields(cls) if "constraint" in f.metadata}


@dataclass
class ScoreConfig:
    """The scoring settings (they never change what a run directory stores).

    ``n_boot``: bootstrap resamples of the paired intervals (0: none); ``level``: their confidence level;
    ``sel_alpha`` / ``sel_delta``: the risk bound and failure probability of the selective-answering threshold;
    ``sel_holdout``: the share of the calibration split a fitted estimator's threshold is chosen on (it is refitted
    on the rest; `selective_threshold`), 0 for the split it was fitted on (no guarantee).
    ``min_per_class``: a task is *ranked* (enters the average over tasks, the paired comparisons and every "best"
    mark) only with at least this many correct and this many wrong answers (`informative`); 0 ranks every task.
    """

    estimators: list[str]
    n_seeds: int = setting(20, SPLITS)
    cal_frac: float = setting(0.35, Interval(float, 0, 1, closed="neither"))
    calibrator: str = "platt"
    n_bins: int = setting(10, N_BINS)
    seed: int = setting(0, SEED)
    n_boot: int = setting(1000, N_BOOT)
    level: float = setting(0.95, LEVEL)
    sel_alpha: float = setting(0.1, ALPHA)
    sel_delta: float = setting(0.1, DELTA)
    sel_holdout: float = setting(0.5, HOLDOUT)
    min_per_class: int = setting(MIN_PER_CLASS_RANKED, Interval(int, 0, None))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def validate(self) -> ScoreConfig:
        """`tracecal.errors.ValidationError` (a ``ValueError``) naming the first setting out of range."""
        check_params(self.to_dict(), SCORE_CONSTRAINTS)
        return self


SCORE_CONSTRAINTS = constraints_of(ScoreConfig)
"""The constraint of each scoring setting (`ScoreConfig.validate`; `tracecal.evaluation.config` adds its own)."""


@dataclass
class TaskStats:
    """One task's answers with their stats and labels, aligned by answer.

    ``rows``: per-answer columns for the rows table (question, golds, answer, ...), optional.
    ``missing``: passes that are not (completely) computed for this task: estimators reading their stats are
    reported as not run.
    """

    task: str
    ids: list[str]
    y: np.ndarray
    inputs: Inputs
    label_rule: str
    rows: dict[str, list[Any]] = field(default_factory=dict)
    missing: set[str] = field(default_factory=set)

    def __len__(self) -> int:
        return len(self.ids)

    def frame(self) -> TaskFrame:
        traces = self.inputs.traces or []
        stops, kinds = [t.stop_reason for t in traces], [t.entropy_kind for t in traces]
        lengths = self.inputs.batch.lengths
        return TaskFrame(self.task, self.ids, self.y, lengths, self.label_rule, stops, kinds, self.rows, self.missing)


@dataclass
class TaskFrame:
    """What scoring needs of a task besides its estimators' inputs (`TaskStats.frame`, or read from the shards'
    light columns by `tracecal.evaluation.blockscore`): ids, labels, answer lengths (tokens), each answer's stop reason
    and entropy kind (empty when unknown), the ``rows`` columns and the passes not (completely) computed."""

    task: str
    ids: list[str]
    y: np.ndarray
    lengths: np.ndarray
    label_rule: str
    stop_reasons: list[str]
    entropy_kinds: list[str]
    rows: dict[str, list[Any]] = field(default_factory=dict)
    missing: set[str] = field(default_factory=set)


def _agg(vals: list[float]) -> dict[str, float]:
    a = np.asarray(vals, dtype=np.float64)
    ok = a[np.isfinite(a)]
    return {
        "mean": float(ok.mean()) if ok.size else float("nan"),
        "sd": float(ok.std(ddof=1)) if ok.size > 1 else (0.0 if ok.size else float("nan")),
        "n_seeds": int(ok.size),
    }


def _task_info(frame: TaskFrame, cfg: ScoreConfig, not_run: list[str]) -> dict[str, Any]:
    y, n, lengths = frame.y, len(frame.ids), frame.lengths
    return {
        "n": n,
        "n_correct": int(y.sum()),
        "accuracy": float(y.mean()) if n else float("nan"),
        "n_correct_cal": int(round(cfg.cal_frac * y.sum())),
        "n_correct_eval": int(y.sum() - round(cfg.cal_frac * y.sum())),
        "label_rule": frame.label_rule,
        "zero_token_answers": int((lengths == 0).sum()),
        "stopped_at_length": int(sum(r == "length" for r in frame.stop_reasons)),
        "mean_answer_tokens": float(lengths.mean()) if n else float("nan"),
        "entropy_kind": sorted(set(frame.entropy_kinds)),
        "nan_mapped": {},
        "not_run": not_run,
        "informative": (why := informative(int(y.sum()), n, cfg.min_per_class)) is None,
        "informative_reason": why,
    }


def not_run_of(frame: TaskFrame | TaskStats, cfg: ScoreConfig) -> list[str]:
    """The estimators of ``cfg`` reading a pass that is not (completely) computed for the task."""
    return [e for e in cfg.estimators if passes_of(REGISTRY[e]) & frame.missing]


def split_set(y: np.ndarray, cfg: ScoreConfig) -> SplitSet:
    """The task's ``n_seeds`` stratified calibration / evaluation splits (seeds ``seed`` … ``seed + n_seeds − 1``)."""
    return SplitSet([stratified_split(y, cfg.cal_frac, cfg.seed + s) for s in range(cfg.n_seeds)], len(y))


def task_counts(y: np.ndarray, task: str, cfg: ScoreConfig) -> np.ndarray | None:
    """The task's bootstrap resamples (`tracecal.stats.bootstrap.bootstrap_counts`), seeded by the seed and the
    task name; None without resamples or with fewer than `MIN_PER_CLASS` answers of a class (no interval is given
    there)."""
    if cfg.n_boot == 0 or not enough_per_class(y):
        return None
    return bootstrap_counts(y, cfg.n_boot, seed=(cfg.seed, zlib.crc32(task.encode())), dtype=np.uint8, order="F")


@dataclass
class Block:
    """One estimator on one task, every split (`score_block`): its metrics aggregated over the splits
    (``{metric: {"mean", "sd", "n_seeds"}}``), its raw scores over the task (None for a fitted estimator), seed 0's
    raw scores and probabilities (NaN off seed 0's evaluation split), the bootstrap draws (``{}`` without
    resamples) and how many of its raw scores were non-finite (`sanitize`)."""

    name: str
    metrics: dict[str, dict[str, float]]
    raw: np.ndarray | None
    raw0: np.ndarray
    prob0: np.ndarray
    draws: dict[str, np.ndarray]
    nan_mapped: int = 0


def score_block(name: str, data: Any, sp: SplitSet, counts: np.ndarray | None, cfg: ScoreConfig) -> Block:
    """Estimator ``name`` on every split ``sp`` of one task: ``data`` holds its labels ``y`` and the estimator's
    ``inputs`` (a `TaskStats`, or only those two); ``counts``: the task's `task_counts`."""
    y, n = data.y, sp.n
    raw, n_bad = (None, 0) if REGISTRY[name].needs_fit else sanitize(get_estimator(name).score(data.inputs))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SingleClassWarning)
        warnings.simplefilter("ignore", UserWarning)
        sc = (
            score_label_free(name, raw, y, sp, cfg)
            if raw is not None
            else score_fitted(name, data, sp, cfg, Fits(name, data))
        )
        # seed-0 predictions for reports: raw scores and probabilities on the evaluation split
        raw0, prob0 = np.full(n, np.nan), np.full(n, np.nan)
        raw0[sp.ev[0]], prob0[sp.ev[0]] = sc.raw0, sc.prob0
        draws = {} if counts is None else sc.boot(counts)
    return Block(name, {k: _agg(v) for k, v in sc.metrics.items()}, raw, raw0, prob0, draws, n_bad)


TaskParts = tuple[dict[str, Any], dict[str, Any], dict[str, pa.Table], dict[str, Any]]


def task_parts(frame: TaskFrame, cfg: ScoreConfig, sp: SplitSet, blocks: dict[str, Block]) -> TaskParts:
    """(task info, metrics per estimator, per-answer tables, bootstrap draws per estimator) of one task from its
    estimators' blocks; an estimator without a block is not run there (NaN metrics)."""
    names, y, n = cfg.estimators, frame.y, len(frame.ids)
    info = _task_info(frame, cfg, [e for e in names if e not in blocks])
    metrics, draws, scores, pred_cols = {}, {}, {}, {}
    for name in names:
        b = blocks.get(name)
        if b is None:
            metrics[name] = {k: _agg([float("nan")]) for k in NOT_RUN_KEYS}
            continue
        if b.nan_mapped:
            info["nan_mapped"][name] = b.nan_mapped
        if b.raw is not None:
            scores[name] = b.raw
        metrics[name], draws[name] = b.metrics, b.draws
        pred_cols[f"raw:{name}"], pred_cols[f"prob:{name}"] = b.raw0, b.prob0
    split0 = np.array(["eval"] * n, dtype=object)
    split0[sp.cal[0]] = "cal"
    key = {"task": [frame.task] * n, "id": list(frame.ids)}
    tables = {
        "rows": pa.table(key | frame.rows | {"correct": y, "n_tokens": frame.lengths}),
        "scores": pa.table(key | scores),
        "predictions": pa.table(key | {"split": split0.tolist(), "correct": y} | pred_cols),
    }
    return info, metrics, tables, draws


def _statistics(metrics: dict[str, Any], draws: dict[str, dict], cfg: ScoreConfig, ranked: list[str]) -> dict[str, Any]:
    """`ranking_statistics` (paired comparisons over the ranked tasks, the leader) and the selective settings."""
    fam = {n: REGISTRY[n].family for n in cfg.estimators}
    selective = {
        "alpha": cfg.sel_alpha,
        "delta": cfg.sel_delta,
        "holdout": cfg.sel_holdout,
        "score": "raw",
        "rule": "learn-then-test",
    }
    return ranking_statistics(metrics, draws, fam, cfg.level, ranked) | {"selective": selective}


def warn_single_class(frame: TaskFrame) -> None:
    """A `SingleClassWarning` for a task whose answers are all correct or all wrong (AUROC undefined)."""
    if len(np.unique(frame.y)) < 2:
        n = len(frame.y)
        warnings.warn(
            f"{frame.task}: all {n} answers are {'correct' if n and frame.y[0] else 'incorrect'}: "
            "AUROC is undefined (NaN)",
            SingleClassWarning,
            stacklevel=3,
        )


def score_tasks(data: Sequence[TaskStats], cfg: ScoreConfig, progress: Progress | None = None) -> Results:
    """Every estimator × task × seed (see the module docstring); the average over tasks when there are several."""
    progress = progress or (lambda *_: None)
    cfg.validate()
    parts: dict[str, TaskParts] = {}
    names = cfg.estimators
    for d in data:
        frame = d.frame()
        warn_single_class(frame)
        not_run = not_run_of(d, cfg)
        sp, counts = split_set(d.y, cfg), task_counts(d.y, d.task, cfg)
        blocks = {}
        for i, name in enumerate(names):
            progress(f"score {d.task}", i, len(names))
            if name not in not_run:
                blocks[name] = score_block(name, d, sp, counts, cfg)
        progress(f"score {d.task}", len(names), len(names))
        parts[d.task] = task_parts(frame, cfg, sp, blocks)
    return results_of(parts, cfg)


def results_of(parts: dict[str, TaskParts], cfg: ScoreConfig) -> Results:
    """The `Results` of every task's `task_parts` (in task order): the average over tasks when there are several,
    the paired comparisons, the estimators' descriptions and the per-answer tables."""
    info = {t: p[0] for t, p in parts.items()}
    metrics: dict[str, Any] = {t: p[1] for t, p in parts.items()}
    draws = {t: p[3] for t, p in parts.items()}
    tables = {k: [p[2][k] for p in parts.values()] for k in ("rows", "scores", "predictions")}
    ranked = ranked_tasks(info)
    if len(metrics) > 1 and len(ranked) > 1:
        metrics["average"] = average_over(metrics, cfg.estimators, {t: i["not_run"] for t, i in info.items()}, ranked)
    est_info = {
        n: {
            "family": REGISTRY[n].family,
            "stats": sorted(REGISTRY[n].stats),
            "passes": sorted(passes_of(REGISTRY[n])),
            "description": REGISTRY[n].description,
            "self_calibrated": REGISTRY[n].self_calibrated,
        }
        for n in cfg.estimators
    }
    return Results(
        config=cfg.to_dict(),
        tasks=info,
        metrics=metrics,
        estimators=est_info,
        substitutes=sorted({s for n in cfg.estimators if (s := REGISTRY[n].substitute)}),
        answers={k: pa.concat_tables(v, promote_options="default") for k, v in tables.items() if v},
        statistics=_statistics(metrics, draws, cfg, ranked),
        draws=draws,
    )
