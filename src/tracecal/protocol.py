"""The evaluation protocol (METHOD §5) as a pure function: stored stats + labels + settings → `Results`.

No model, no files: `score_tasks` takes what the passes computed per task (`TaskStats`) and returns every
estimator × task × seed scored. For each of ``n_seeds`` seeds a stratified ``cal_frac`` calibration /
evaluation split; AUROC, AUPRC, AURC and selective risk on raw scores of the evaluation split; Brier, ECE
and adaptive ECE on probabilities from a calibrator (Platt by default) fitted on the calibration split;
self-calibrated estimators (TRACE+) are their own calibrator. Non-finite scores (zero-token answers) are
mapped to the least confident value and counted.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from tracecal.calibration import make_calibrator
from tracecal.estimators import REGISTRY, Inputs, get_estimator, passes_of
from tracecal.metrics import SingleClassWarning, compute_all
from tracecal.results import METRICS, Results

__all__ = ["ScoreConfig", "TaskStats", "score_tasks", "stratified_split", "sanitize", "NOT_RUN_KEYS"]

NOT_RUN_KEYS = (*METRICS, "base_rate", "n", "n_correct", "n_correct_cal", "n_cal")
Progress = Callable[[str, int, int], None]


@dataclass
class ScoreConfig:
    """The scoring settings (they never change what a run directory stores)."""

    estimators: list[str]
    n_seeds: int = 20
    cal_frac: float = 0.35
    calibrator: str = "platt"
    n_bins: int = 10
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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


def stratified_split(y: np.ndarray, cal_frac: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices of a stratified calibration / evaluation split (random when a class has < 2 members)."""
    rng = np.random.default_rng(seed)
    cal: list[np.ndarray] = []
    ev: list[np.ndarray] = []
    classes = [np.flatnonzero(y == c) for c in (0, 1)]
    if min(len(c) for c in classes) < 2:
        idx = rng.permutation(len(y))
        k = int(round(cal_frac * len(y)))
        return np.sort(idx[:k]), np.sort(idx[k:])
    for c in classes:
        p = rng.permutation(c)
        k = int(round(cal_frac * len(c)))
        cal.append(p[:k])
        ev.append(p[k:])
    return np.sort(np.concatenate(cal)), np.sort(np.concatenate(ev))


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
    y = data.y
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


def _score_task(data: TaskStats, cfg: ScoreConfig, progress: Progress) -> tuple[dict, dict, dict[str, pa.Table]]:
    """(task info, metrics per estimator, per-answer tables) of one task."""
    names, y, n = cfg.estimators, data.y, len(data)
    not_run = [e for e in names if passes_of(REGISTRY[e]) & data.missing]
    info = _task_info(data, cfg, not_run)
    raw = _raw_scores(data, names, not_run, info)
    splits = [stratified_split(y, cfg.cal_frac, cfg.seed + s) for s in range(cfg.n_seeds)]
    per_est: dict[str, dict[str, list[float]]] = {e: {} for e in names}
    pred_cols: dict[str, np.ndarray] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SingleClassWarning)
        warnings.simplefilter("ignore", UserWarning)
        for i, name in enumerate(names):
            progress(f"score {data.task}", i, len(names))
            if name in not_run:
                per_est[name] = {k: [float("nan")] for k in NOT_RUN_KEYS}
                continue
            for s, (cal, ev) in enumerate(splits):
                m, raw_ev, prob = one_split(name, data, raw[name], cal, ev, cfg)
                for k, v in m.items():
                    per_est[name].setdefault(k, []).append(v)
                if s == 0:  # seed-0 predictions for reports: raw scores and probabilities on the evaluation split
                    pred_cols[f"raw:{name}"] = np.full(n, np.nan)
                    pred_cols[f"prob:{name}"] = np.full(n, np.nan)
                    pred_cols[f"raw:{name}"][ev], pred_cols[f"prob:{name}"][ev] = raw_ev, prob
    progress(f"score {data.task}", len(names), len(names))
    split0 = np.array(["eval"] * n, dtype=object)
    split0[splits[0][0]] = "cal"
    key = {"task": [data.task] * n, "id": list(data.ids)}
    tables = {
        "rows": pa.table(key | data.rows | {"correct": y, "n_tokens": data.inputs.batch.lengths}),
        "scores": pa.table(key | {k: v for k, v in raw.items() if v is not None}),
        "predictions": pa.table(key | {"split": split0.tolist(), "correct": y} | pred_cols),
    }
    return info, {e: {k: _agg(v) for k, v in per_est[e].items()} for e in names}, tables


def _average(metrics: dict[str, Any], names: list[str], info: dict[str, Any]) -> dict[str, Any]:
    """Mean over tasks of the per-task means; an estimator not run on some task gets no average."""
    avg: dict[str, dict[str, dict[str, float]]] = {}
    for name in names:
        complete = not any(name in info[t]["not_run"] for t in metrics)
        avg[name] = {}
        for metric in METRICS:
            vals = [metrics[t][name][metric]["mean"] for t in metrics]
            fin = [v for v in vals if math.isfinite(v)] if complete else []
            avg[name][metric] = {"mean": float(np.mean(fin)) if fin else float("nan"), "sd": float("nan"),
                                 "n_seeds": len(fin)}  # fmt: skip
    return avg


def score_tasks(data: Sequence[TaskStats], cfg: ScoreConfig, progress: Progress | None = None) -> Results:
    """Every estimator × task × seed (see the module docstring); the average over tasks when there are several."""
    progress = progress or (lambda *_: None)
    metrics: dict[str, Any] = {}
    info: dict[str, Any] = {}
    tables: dict[str, list[pa.Table]] = {"rows": [], "scores": [], "predictions": []}
    for d in data:
        if len(np.unique(d.y)) < 2:
            warnings.warn(f"{d.task}: all {len(d)} answers are {'correct' if len(d) and d.y[0] else 'incorrect'}: "
                          "AUROC is undefined (NaN)", SingleClassWarning, stacklevel=2)  # fmt: skip
        info[d.task], metrics[d.task], t = _score_task(d, cfg, progress)
        for k in tables:
            tables[k].append(t[k])
    if len(metrics) > 1:
        metrics["average"] = _average(metrics, cfg.estimators, info)
    est_info = {
        n: {"family": REGISTRY[n].family, "stats": sorted(REGISTRY[n].stats), "passes": sorted(passes_of(REGISTRY[n])),
            "description": REGISTRY[n].description, "self_calibrated": REGISTRY[n].self_calibrated}
        for n in cfg.estimators
    }  # fmt: skip
    return Results(
        config=cfg.to_dict(),
        tasks=info,
        metrics=metrics,
        estimators=est_info,
        substitutes=sorted({REGISTRY[n].substitute for n in cfg.estimators if REGISTRY[n].substitute}),
        answers={k: pa.concat_tables(v, promote_options="default") for k, v in tables.items() if v},
    )
