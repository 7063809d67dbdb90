"""The evaluation protocol (METHOD §5) as a pure function: stored stats + labels + settings → `Results`.

No model, no files: `score_tasks` takes what the passes computed per task (`TaskStats`) and returns every
estimator × task × seed scored. For each of ``n_seeds`` seeds a stratified ``cal_frac`` calibration /
evaluation split; AUROC, AUPRC, AURC and selective risk on raw scores of the evaluation split; Brier, ECE
and adaptive ECE on probabilities from a calibrator (Platt by default) fitted on the calibration split;
self-calibrated estimators (TRACE+) are their own calibrator. Non-finite scores (zero-token answers) are
mapped to the least confident value and counted.

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
from tracecal.calibrators import make_calibrator
from tracecal.estimators import REGISTRY, Inputs, get_estimator, passes_of
from tracecal.evaluation.results import METRICS, Results
from tracecal.stats.bootstrap import (
    BOOT_METRICS,
    LEVEL,
    N_BOOT,
    bootstrap_counts,
    comparisons,
    enough_per_class,
    split_draws,
)
from tracecal.stats.metrics import N_BINS, SingleClassWarning, compute_all
from tracecal.stats.selective import ALPHA, DELTA, HOLDOUT, ltt_threshold, selective_outcome
from tracecal.stats.splits import stratified_split, threshold_split

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


def sanitize(x: np.ndarray) -> tuple[np.ndarray, int]:
    """Map NaN/−inf to just below the least confident finite score and +inf to the most confident one."""
    x = np.asarray(x, dtype=np.float64).copy()
    bad = ~np.isfinite(x)
    if not bad.any():
        return x, 0
    fin = x[~bad]
    lo = fin.min() if fin.size else 0.0
    hi = fin.max() if fin.size else 0.0
    span = max(hi - lo, 1e-12)
    x[np.isnan(x) | (x == -np.inf)] = lo - 1e-6 * span
    x[x == np.inf] = hi
    return x, int(bad.sum())


def _calibrated(name: str, cfg: ScoreConfig, raw_cal: np.ndarray, y_cal: np.ndarray, raw_ev: np.ndarray) -> np.ndarray:
    """Probabilities on the evaluation split from the calibrator fitted on the calibration split."""
    if REGISTRY[name].self_calibrated:
        return np.clip(raw_ev, 0.0, 1.0)
    calib = make_calibrator(cfg.calibrator)
    if cfg.calibrator == "temperature":  # temperature scaling expects scores in [0, 1]: min-max on the cal split
        lo, hi = raw_cal.min(), raw_cal.max()
        span = hi - lo if hi > lo else 1.0
        raw_cal, raw_ev = np.clip((raw_cal - lo) / span, 0, 1), np.clip((raw_ev - lo) / span, 0, 1)
    calib.fit(raw_cal, y_cal)
    return calib.predict_proba(raw_ev)


def one_split(
    name: str, data: TaskStats, raw_all: np.ndarray | None, cal: np.ndarray, ev: np.ndarray, cfg: ScoreConfig
) -> tuple[dict[str, float], np.ndarray, np.ndarray]:
    """Metrics on the evaluation split; returns (metrics, raw eval scores, eval probabilities)."""
    y, est = data.y, None
    if raw_all is None:  # an estimator that fits something on the calibration split
        est = get_estimator(name).fit(data.inputs.select(cal), y[cal])
        raw_cal, _ = sanitize(est.score(data.inputs.select(cal)))
        raw_ev, _ = sanitize(est.score(data.inputs.select(ev)))
    else:
        raw_cal, raw_ev = raw_all[cal], raw_all[ev]
    prob = _calibrated(name, cfg, raw_cal, y[cal], raw_ev)
    m = compute_all(y[ev], raw_ev, prob, n_bins=cfg.n_bins)
    m["n_correct_cal"] = int(y[cal].sum())
    m["n_cal"] = len(cal)
    t, sel_est = selective_threshold(name, data, cal, cfg, raw_cal, est)  # answer iff raw score ≥ t
    sel_ev = raw_ev if sel_est is est else sanitize(sel_est.score(data.inputs.select(ev)))[0]
    m.update(selective_outcome(sel_ev, y[ev], t, cfg.sel_alpha))
    return m, raw_ev, prob


def selective_threshold(
    name: str, data: TaskStats, cal: np.ndarray, cfg: ScoreConfig, raw_cal: np.ndarray, fitted: Any = None
) -> tuple[float, Any]:
    """The Learn-then-Test threshold t of estimator ``name``'s raw score (`tracecal.stats.selective`) on
    calibration split ``cal``, and the fitted estimator whose score it applies to (None: the label-free score
    ``raw_cal``).

    A label-free score: t on the whole calibration split. A fitted one (``needs_fit``): with ``cfg.sel_holdout`` =
    h > 0, refitted on a random 1 − h of the split and t chosen on the other h (`threshold_split`), so that the
    guarantee is strict; with h = 0, t on the split ``fitted`` was fitted on (no guarantee: the old behaviour).
    """
    y = data.y
    if not REGISTRY[name].needs_fit:
        return ltt_threshold(raw_cal, y[cal], cfg.sel_alpha, cfg.sel_delta).threshold, None
    if cfg.sel_holdout == 0:
        est = fitted if fitted is not None else get_estimator(name).fit(data.inputs.select(cal), y[cal])
        raw, thr = sanitize(est.score(data.inputs.select(cal)))[0], np.arange(len(cal))
    else:
        fit, thr = threshold_split(y[cal], cfg.sel_holdout, seed=(cfg.seed, zlib.crc32(cal.tobytes())))
        est = get_estimator(name).fit(data.inputs.select(cal[fit]), y[cal[fit]])
        raw = sanitize(est.score(data.inputs.select(cal[thr])))[0]
    return ltt_threshold(raw, y[cal[thr]], cfg.sel_alpha, cfg.sel_delta).threshold, est


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
    return bootstrap_counts(data.y, cfg.n_boot, seed=(cfg.seed, zlib.crc32(data.task.encode())))


def _draws(
    y: np.ndarray, evals: list[np.ndarray], vals: dict[str, list[np.ndarray]], counts: np.ndarray | None
) -> dict:
    """Bootstrap draws of the split-mean AUROC (raw scores) and Brier (probabilities) of one estimator."""
    if counts is None:
        return {}
    return {m: split_draws(m, y, evals, vals[m], counts) for m in BOOT_METRICS}


def _score_task(data: TaskStats, cfg: ScoreConfig, progress: Progress) -> tuple[dict, dict, dict[str, pa.Table], dict]:
    """(task info, metrics per estimator, per-answer tables, bootstrap draws per estimator) of one task."""
    names, y, n = cfg.estimators, data.y, len(data)
    not_run = [e for e in names if passes_of(REGISTRY[e]) & data.missing]
    info = _task_info(data, cfg, not_run)
    raw = _raw_scores(data, names, not_run, info)
    splits = [stratified_split(y, cfg.cal_frac, cfg.seed + s) for s in range(cfg.n_seeds)]
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
            vals: dict[str, list[np.ndarray]] = {"auroc": [], "brier": []}
            for s, (cal, ev) in enumerate(splits):
                m, raw_ev, prob = one_split(name, data, raw[name], cal, ev, cfg)
                vals["auroc"].append(raw_ev)
                vals["brier"].append(prob)
                for k, v in m.items():
                    per_est[name].setdefault(k, []).append(v)
                if s == 0:  # seed-0 predictions for reports: raw scores and probabilities on the evaluation split
                    pred_cols[f"raw:{name}"] = np.full(n, np.nan)
                    pred_cols[f"prob:{name}"] = np.full(n, np.nan)
                    pred_cols[f"raw:{name}"][ev], pred_cols[f"prob:{name}"][ev] = raw_ev, prob
            draws[name] = _draws(y, [ev for _, ev in splits], vals, counts)
    progress(f"score {data.task}", len(names), len(names))
    split0 = np.array(["eval"] * n, dtype=object)
    split0[splits[0][0]] = "cal"
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
