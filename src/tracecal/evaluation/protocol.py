"""The evaluation protocol (METHOD §5) as a pure function: stored stats + labels + settings → `Results`.

No model, no files: `score_tasks` takes what the passes computed per task (`TaskStats`) and returns every
estimator × task × seed scored. For each of ``n_seeds`` seeds a stratified ``cal_frac`` calibration /
evaluation split; AUROC, AUPRC, AURC and selective risk on raw scores of the evaluation split; Brier, ECE
and adaptive ECE on probabilities from a calibrator (Platt by default) fitted on the calibration split;
self-calibrated estimators (TRACE+) are their own calibrator. Non-finite scores (zero-token answers) are
mapped to the least confident value and counted. Each estimator is scored on all splits at once
(`tracecal.evaluation.splitscore`: one sort of a label-free score for every split, Platt fitted on every split
together); `one_split` gives one split's numbers alone.

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

import math
import warnings
import zlib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa

from tracecal._validation import Constraint, Interval, check_params
from tracecal.estimators import REGISTRY, Inputs, get_estimator, passes_of
from tracecal.evaluation.results import METRICS, Results
from tracecal.evaluation.splitscore import (
    Fits,
    SplitSet,
    calibrate_rows,
    sanitize,
    score_fitted,
    score_label_free,
    selective_threshold,
)
from tracecal.stats.bootstrap import (
    BOOT_METRICS,
    LEVEL,
    N_BOOT,
    blocked_split_draws,
    bootstrap_counts,
    comparisons,
    enough_per_class,
)
from tracecal.stats.metrics import N_BINS, SingleClassWarning, compute_all
from tracecal.stats.selective import ALPHA, DELTA, HOLDOUT, selective_outcome
from tracecal.stats.splits import stratified_split

__all__ = [
    "ScoreConfig",
    "SCORE_CONSTRAINTS",
    "setting",
    "constraints_of",
    "TaskStats",
    "score_tasks",
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
    """

    estimators: list[str]
    n_seeds: int = setting(20, Interval(int, 1, None))
    cal_frac: float = setting(0.35, Interval(float, 0, 1, closed="neither"))
    calibrator: str = "platt"
    n_bins: int = setting(10, N_BINS)
    seed: int = 0
    n_boot: int = setting(1000, N_BOOT)
    level: float = setting(0.95, LEVEL)
    sel_alpha: float = setting(0.1, ALPHA)
    sel_delta: float = setting(0.1, DELTA)
    sel_holdout: float = setting(0.5, HOLDOUT)

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


def one_split(
    name: str, data: TaskStats, raw_all: np.ndarray | None, cal: np.ndarray, ev: np.ndarray, cfg: ScoreConfig
) -> tuple[dict[str, float], np.ndarray, np.ndarray]:
    """Metrics of one estimator on one split, the protocol's numbers for that split (`score_tasks` scores all
    splits at once, `tracecal.evaluation.splitscore`); returns (metrics, raw eval scores, eval probabilities)."""
    y, est, fits = data.y, None, Fits(name, data, features=False)
    if raw_all is None:  # an estimator that fits something on the calibration split
        est = fits.fit(cal)
        raw_cal, raw_ev = fits.score(est, cal), fits.score(est, ev)
    else:
        raw_cal, raw_ev = raw_all[cal], raw_all[ev]
    prob = calibrate_rows(name, cfg.calibrator, raw_cal[None], y[cal][None], raw_ev[None])[0]
    m = compute_all(y[ev], raw_ev, prob, n_bins=cfg.n_bins)
    m["n_correct_cal"] = int(y[cal].sum())
    m["n_cal"] = len(cal)
    t, sel_est = selective_threshold(name, data, cal, cfg, raw_cal, est, fits)  # answer iff raw score ≥ t
    sel_ev = raw_ev if sel_est is est else fits.score(sel_est, ev)
    m.update(selective_outcome(sel_ev, y[ev], t, cfg.sel_alpha))
    return m, raw_ev, prob


def _agg(vals: list[float]) -> dict[str, float]:
    a = np.asarray(vals, dtype=np.float64)
    ok = a[np.isfinite(a)]
    return {
        "mean": float(ok.mean()) if ok.size else float("nan"),
        "sd": float(ok.std(ddof=1)) if ok.size > 1 else (0.0 if ok.size else float("nan")),
        "n_seeds": int(ok.size),
    }


def _task_info(data: TaskStats, cfg: ScoreConfig, not_run: list[str]) -> dict[str, Any]:
    y, n = data.y, len(data)
    lengths = data.inputs.batch.lengths
    traces = data.inputs.traces or []
    return {
        "n": n,
        "n_correct": int(y.sum()),
        "accuracy": float(y.mean()) if n else float("nan"),
        "n_correct_cal": int(round(cfg.cal_frac * y.sum())),
        "n_correct_eval": int(y.sum() - round(cfg.cal_frac * y.sum())),
        "label_rule": data.label_rule,
        "zero_token_answers": int((lengths == 0).sum()),
        "stopped_at_length": int(sum(t.stop_reason == "length" for t in traces)),
        "mean_answer_tokens": float(lengths.mean()) if n else float("nan"),
        "entropy_kind": sorted({t.entropy_kind for t in traces}),
        "nan_mapped": {},
        "not_run": not_run,
    }


def _raw_scores(data: TaskStats, names: list[str], not_run: list[str], info: dict[str, Any]) -> dict[str, Any]:
    """Label-free raw scores over the whole task (None for estimators that fit on the calibration split)."""
    raw: dict[str, np.ndarray | None] = {}
    for name in names:
        if REGISTRY[name].needs_fit or name in not_run:
            raw[name] = None
            continue
        raw[name], n_bad = sanitize(get_estimator(name).score(data.inputs))
        if n_bad:
            info["nan_mapped"][name] = n_bad
    return raw


def _counts(data: TaskStats, cfg: ScoreConfig) -> np.ndarray | None:
    """The task's bootstrap resamples (`tracecal.stats.bootstrap.bootstrap_counts`), seeded by the seed and the
    task name; None without resamples or with fewer than `MIN_PER_CLASS` answers of a class (no interval is given
    there)."""
    if cfg.n_boot == 0 or not enough_per_class(data.y):
        return None
    return bootstrap_counts(data.y, cfg.n_boot, seed=(cfg.seed, zlib.crc32(data.task.encode())), dtype=np.uint8)


def _score_task(data: TaskStats, cfg: ScoreConfig, progress: Progress) -> tuple[dict, dict, dict[str, pa.Table], dict]:
    """(task info, metrics per estimator, per-answer tables, bootstrap draws per estimator) of one task."""
    names, y, n = cfg.estimators, data.y, len(data)
    not_run = [e for e in names if passes_of(REGISTRY[e]) & data.missing]
    info = _task_info(data, cfg, not_run)
    raw = _raw_scores(data, names, not_run, info)
    sp = SplitSet([stratified_split(y, cfg.cal_frac, cfg.seed + s) for s in range(cfg.n_seeds)], n)
    per_est: dict[str, dict[str, list[float]]] = {e: {} for e in names}
    pred_cols: dict[str, np.ndarray] = {}
    counts, draws = _counts(data, cfg), {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SingleClassWarning)
        warnings.simplefilter("ignore", UserWarning)
        for i, name in enumerate(names):
            progress(f"score {data.task}", i, len(names))
            if name in not_run:
                per_est[name] = {k: [float("nan")] for k in NOT_RUN_KEYS}
                continue
            r = raw[name]
            sc = (
                score_label_free(name, r, y, sp, cfg)
                if r is not None
                else score_fitted(name, data, sp, cfg, Fits(name, data))
            )
            per_est[name] = sc.metrics
            # seed-0 predictions for reports: raw scores and probabilities on the evaluation split
            pred_cols[f"raw:{name}"], pred_cols[f"prob:{name}"] = np.full(n, np.nan), np.full(n, np.nan)
            pred_cols[f"raw:{name}"][sp.ev[0]], pred_cols[f"prob:{name}"][sp.ev[0]] = sc.raw0, sc.prob0
            draws[name] = {} if counts is None else blocked_split_draws(sc.plan(), sc.evals, sc.sq_err, counts)
    progress(f"score {data.task}", len(names), len(names))
    split0 = np.array(["eval"] * n, dtype=object)
    split0[sp.cal[0]] = "cal"
    key = {"task": [data.task] * n, "id": list(data.ids)}
    tables = {
        "rows": pa.table(key | data.rows | {"correct": y, "n_tokens": data.inputs.batch.lengths}),
        "scores": pa.table(key | {k: v for k, v in raw.items() if v is not None}),
        "predictions": pa.table(key | {"split": split0.tolist(), "correct": y} | pred_cols),
    }
    return info, {e: {k: _agg(v) for k, v in per_est[e].items()} for e in names}, tables, draws


def _statistics(metrics: dict[str, Any], draws: dict[str, dict], cfg: ScoreConfig) -> dict[str, Any]:
    """Paired comparisons with the best baseline per task and for the average over tasks (tasks are independent
    samples: the average's draws are the mean of the tasks' draws), and the selective-answering settings."""
    fam = {n: REGISTRY[n].family for n in cfg.estimators}
    comp: dict[str, Any] = {}
    for task, per in metrics.items():
        if task == "average":
            tasks = list(draws)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # a resample undefined on every task: NaN
                d = {
                    e: {m: np.nanmean([draws[t][e][m] for t in tasks], axis=0) for m in BOOT_METRICS}
                    for e in cfg.estimators
                    if all(draws[t].get(e) for t in tasks)
                }
        else:
            d = {e: v for e, v in draws.get(task, {}).items() if v}
        if d:
            means = {e: {m: per[e][m]["mean"] for m in BOOT_METRICS} for e in d}
            comp[task] = comparisons(d, means, fam, cfg.level)
    selective = {
        "alpha": cfg.sel_alpha,
        "delta": cfg.sel_delta,
        "holdout": cfg.sel_holdout,
        "score": "raw",
        "rule": "learn-then-test",
    }
    return {"comparisons": comp, "selective": selective}


def _average(metrics: dict[str, Any], names: list[str], info: dict[str, Any]) -> dict[str, Any]:
    """Mean over tasks of the per-task means; an estimator not run on some task gets no average."""
    avg: dict[str, dict[str, dict[str, float]]] = {}
    for name in names:
        complete = not any(name in info[t]["not_run"] for t in metrics)
        avg[name] = {}
        for metric in METRICS:
            vals = [metrics[t][name][metric]["mean"] for t in metrics]
            fin = [v for v in vals if math.isfinite(v)] if complete else []
            avg[name][metric] = {
                "mean": float(np.mean(fin)) if fin else float("nan"),
                "sd": float("nan"),
                "n_seeds": len(fin),
            }
    return avg


def score_tasks(data: Sequence[TaskStats], cfg: ScoreConfig, progress: Progress | None = None) -> Results:
    """Every estimator × task × seed (see the module docstring); the average over tasks when there are several."""
    progress = progress or (lambda *_: None)
    metrics: dict[str, Any] = {}
    info: dict[str, Any] = {}
    tables: dict[str, list[pa.Table]] = {"rows": [], "scores": [], "predictions": []}
    cfg.validate()
    draws: dict[str, dict] = {}
    for d in data:
        if len(np.unique(d.y)) < 2:
            warnings.warn(
                f"{d.task}: all {len(d)} answers are {'correct' if len(d) and d.y[0] else 'incorrect'}: "
                "AUROC is undefined (NaN)",
                SingleClassWarning,
                stacklevel=2,
            )
        info[d.task], metrics[d.task], t, draws[d.task] = _score_task(d, cfg, progress)
        for k in tables:
            tables[k].append(t[k])
    if len(metrics) > 1:
        metrics["average"] = _average(metrics, cfg.estimators, info)
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
        statistics=_statistics(metrics, draws, cfg),
        draws=draws,
    )
