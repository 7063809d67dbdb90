"""Learning curves of the calibrated methods: AUROC and Brier against the number of labelled answers.

For each calibration-set size m and each of ``n_splits`` random splits, m answers of the task are drawn,
stratified (round(m·n₁/n) correct ones, at least 1, and never all of a class), every method is fitted / calibrated
on them exactly as the protocol does (`tracecal.evaluation.protocol.one_split`: Platt on a label-free score, a
self-calibrated method such as TRACE+ fitted on them) and scored on all the other answers. Reported per size:
the mean over splits and sd, and a percentile bootstrap interval of that mean from resampling the task's
questions (`tracecal.stats.bootstrap.split_draws`: one resample applied to every split; none — NaN bounds — for a task
with fewer than `tracecal.stats.bootstrap.MIN_PER_CLASS` answers of a class).

`run_learning_curve` reads a scored run with the labels it was scored with
(`tracecal.evaluation.stored_tasks.load_stored_tasks`: no data files needed) and writes ``RUN/learning_curve.json``
(merged by task) and ``learning_curve.csv``; it returns the document, which `tracecal.report.learning_curve`
draws (``learning_curve_<task>.svg``).
"""

from __future__ import annotations

import csv
import io
import math
import os
import warnings
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from tracecal._validation import SEED, check_param
from tracecal.errors import ValidationError
from tracecal.estimators import REGISTRY, get_estimator, needs_of, resolve_estimators
from tracecal.evaluation.protocol import Progress, ScoreConfig, TaskStats, one_split, sanitize
from tracecal.evaluation.result_json import plain_json
from tracecal.evaluation.runstore import RunStore
from tracecal.evaluation.stored_tasks import load_stored_tasks
from tracecal.stats.bootstrap import (
    bootstrap_counts,
    check_boot_params,
    compare,
    enough_per_class,
    percentile_interval,
    split_draws,
)
from tracecal.stats.metrics import SingleClassWarning
from tracecal.stats.splits import SPLITS, stratified_draw

__all__ = [
    "learning_curve",
    "run_learning_curve",
    "curves_csv",
    "DEFAULT_ESTIMATORS",
    "LC_METRICS",
    "ARTEFACT",
]

DEFAULT_ESTIMATORS = ("trace", "trace_plus", "trace_plus_prior")
LC_METRICS = ("auroc", "brier")
ARTEFACT = "learning_curve"


def _check_sizes(data: TaskStats, sizes: Sequence[int]) -> list[int]:
    if isinstance(sizes, str | bytes) or not len(sizes):
        raise ValidationError(
            f"sizes: give at least one calibration-set size (whole numbers ≥ 2, e.g. 100,200): {sizes!r}"
        )
    n, n1 = len(data), int(data.y.sum())
    if n1 < 2 or n - n1 < 2:
        raise ValidationError(f"{data.task}: {n1} correct of {n} answers: a learning curve needs ≥ 2 of each class")
    ms = np.arange(2, n + 1)
    ks = np.clip(np.round(ms * n1 / n), 1, n1 - 1)
    largest = int(ms[ms - ks <= n - n1 - 1].max())  # at least one answer of each class left to evaluate on
    for m in sizes:
        if isinstance(m, bool) or not isinstance(m, int | np.integer) or m < 2:
            raise ValidationError(f"calibration-set sizes must be whole numbers ≥ 2, got {m!r}")
        if m > largest:
            raise ValidationError(
                f"size {m} leaves too few answers to evaluate on in {data.task} ({n} answers, {n1} "
                f"correct): use sizes ≤ {largest}"
            )
    return sorted({int(m) for m in sizes})


def _summary(vals: list[float], draws: np.ndarray | None, level: float) -> dict[str, Any]:
    a = np.asarray(vals, dtype=np.float64)
    ok = a[np.isfinite(a)]
    lo, hi = percentile_interval(draws, level) if draws is not None else (math.nan, math.nan)
    return {
        "mean": float(ok.mean()) if ok.size else math.nan,
        "sd": float(ok.std(ddof=1)) if ok.size > 1 else 0.0,
        "lo": lo,
        "hi": hi,
        "n_splits": int(ok.size),
    }


def _paired(
    out: dict[str, dict[str, Any]], draws: dict[str, dict[str, np.ndarray]], focus: Sequence[str], level: float
) -> None:
    """Adds ``out[f]["vs"][other][metric]`` = `tracecal.stats.bootstrap.compare` of f − other (paired: the same splits
    and resamples) for every focus method f; Brier differences are better when negative."""
    for f in focus:
        out[f]["vs"] = {
            other: {
                m: compare(
                    draws[f][m],
                    draws[other][m],
                    out[f][m]["mean"] - out[other][m]["mean"],
                    level,
                    lower_is_better=(m == "brier"),
                )
                for m in LC_METRICS
            }
            for other in out
            if other != f and draws.get(f) and draws.get(other)
        }


def _one_size(
    data: TaskStats,
    names: list[str],
    raw: dict[str, Any],
    size: int,
    cfg: ScoreConfig,
    counts: np.ndarray | None,
    focus: Sequence[str] = (),
) -> dict[str, dict[str, Any]]:
    """Every method at one calibration-set size: {estimator: {"auroc": summary, "brier": summary, ...}}, and for
    the ``focus`` methods paired differences against every other one (``"vs"``, `_paired`)."""
    rng = np.random.default_rng((cfg.seed, size, zlib.crc32(data.task.encode())))
    splits = [stratified_draw(data.y, size, rng) for _ in range(cfg.n_seeds)]
    out: dict[str, dict[str, Any]] = {}
    draws: dict[str, dict[str, np.ndarray]] = {}
    for name in names:
        vals: dict[str, list[Any]] = {m: [] for m in LC_METRICS}
        preds: dict[str, list[np.ndarray]] = {m: [] for m in LC_METRICS}
        for cal, ev in splits:
            m, raw_ev, prob = one_split(name, data, raw[name], cal, ev, cfg)
            for k in LC_METRICS:
                vals[k].append(m[k])
            preds["auroc"].append(raw_ev)
            preds["brier"].append(prob)
        evals = [ev for _, ev in splits]
        if counts is not None:
            draws[name] = {k: split_draws(k, data.y, evals, preds[k], counts) for k in LC_METRICS}
        out[name] = {
            k: _summary(vals[k], draws[name][k] if counts is not None else None, cfg.level) for k in LC_METRICS
        }
        out[name]["n_correct_cal"] = float(np.mean([data.y[c].sum() for c, _ in splits]))
    _paired(out, draws, [f for f in focus if f in out], cfg.level)
    return out


def _check_methods(data: TaskStats, estimators: Sequence[str], focus: Sequence[str]) -> list[str]:
    """The estimators' registered names; `ValidationError` for one whose pass the run lacks or a focus method that
    is not among them."""
    names = resolve_estimators(list(estimators))
    missing = [e for e in names if any(p in data.missing for p in needs_of([e]))]
    if missing:
        raise ValidationError(
            f"{data.task}: the run lacks the stats of {', '.join(missing)} (their pass is incomplete)"
        )
    if unknown := [f for f in focus if f not in names]:
        raise ValidationError(f"focus methods {', '.join(unknown)} are not among the estimators ({', '.join(names)})")
    return names


def learning_curve(
    data: TaskStats,
    estimators: Sequence[str] = DEFAULT_ESTIMATORS,
    sizes: Sequence[int] = (100, 200, 400, 800, 1600),
    n_splits: int = 20,
    n_boot: int = 1000,
    level: float = 0.95,
    calibrator: str = "platt",
    seed: int = 0,
    progress: Progress | None = None,
    focus: Sequence[str] = (),
) -> dict[str, Any]:
    """The learning curve of one task (module docstring) as a JSON-ready dict::

        {"task", "n", "n_correct", "sizes", "n_splits", "n_boot", "level", "calibrator",
         "estimators": {name: [{"size", "n_correct_cal", "auroc": {"mean", "sd", "lo", "hi", "n_splits"},
                                "brier": {...}}, ...]}}

    ``focus``: methods (among ``estimators``) whose entries also get ``"vs": {other: {"auroc": {"diff", "lo",
    "hi", "verdict"}, "brier": {...}}}`` — the paired bootstrap comparison with every other method at that size
    (the same calibration sets and question resamples on both sides; no entry without bootstrap).

    Raises ``ValueError`` for a size that leaves too few answers to evaluate on, a task with < 2 answers of a
    class, or an unknown estimator.
    """
    progress = progress or (lambda *_: None)
    names = _check_methods(data, estimators, focus)
    check_boot_params(n_boot, level)
    sizes = _check_sizes(data, sizes)
    check_param("splits", n_splits, SPLITS)
    check_param("seed", seed, SEED)
    cfg = ScoreConfig(names, n_seeds=n_splits, calibrator=calibrator, seed=seed, n_boot=n_boot, level=level)
    enough = n_boot > 0 and enough_per_class(data.y)  # else no interval (NaN bounds)
    counts = bootstrap_counts(data.y, n_boot, seed=(seed, zlib.crc32(data.task.encode()))) if enough else None
    raw = {e: None if REGISTRY[e].needs_fit else sanitize(get_estimator(e).score(data.inputs))[0] for e in names}
    per_size = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SingleClassWarning)
        warnings.simplefilter("ignore", UserWarning)
        for i, size in enumerate(sizes):
            progress(f"learning curve {data.task}", i, len(sizes))
            per_size.append(_one_size(data, names, raw, size, cfg, counts, focus))
    progress(f"learning curve {data.task}", len(sizes), len(sizes))
    return {
        "task": data.task,
        "n": len(data),
        "n_correct": int(data.y.sum()),
        "sizes": sizes,
        "n_splits": n_splits,
        "n_boot": n_boot,
        "level": level,
        "calibrator": calibrator,
        "estimators": {e: [{"size": s} | p[e] for s, p in zip(sizes, per_size, strict=True)] for e in names},
    }


def curves_csv(doc: dict[str, Any]) -> str:
    """CSV text: task, estimator, size, metric, mean, sd, lo, hi, n_splits — one row per point."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["task", "estimator", "size", "n_correct_cal", "metric", "mean", "sd", "lo", "hi", "n_splits"])
    for task, lc in doc.get("tasks", {}).items():
        for est, points in lc["estimators"].items():
            for p in points:
                for m in LC_METRICS:
                    v = p[m]
                    w.writerow(
                        [
                            task,
                            est,
                            p["size"],
                            p["n_correct_cal"],
                            m,
                            v["mean"],
                            v["sd"],
                            v["lo"],
                            v["hi"],
                            v["n_splits"],
                        ]
                    )
    return buf.getvalue()


def run_learning_curve(
    run_dir: str | os.PathLike[str] | RunStore,
    tasks: Sequence[str] | None = None,
    estimators: Sequence[str] | None = None,
    progress: Progress | None = None,
    **kw: Any,
) -> dict[str, Any]:
    """Learning curves of a scored run's tasks, written into the run (``learning_curve.json`` merged by task,
    ``learning_curve.csv``); returns the whole JSON document (`tracecal.report.learning_curve` draws its
    figures). ``kw``: the settings of `learning_curve` (sizes, n_splits, n_boot, level, calibrator, seed)."""
    store = run_dir if isinstance(run_dir, RunStore) else RunStore(run_dir)
    names = list(estimators or DEFAULT_ESTIMATORS)
    data = load_stored_tasks(store, resolve_estimators(names), tasks)
    doc = store.read_artefact(ARTEFACT) or {"tasks": {}}
    for d in data:
        doc["tasks"][d.task] = plain_json(learning_curve(d, names, progress=progress, **kw))
    store.write_artefact(ARTEFACT, doc)
    store.write_text("learning_curve.csv", curves_csv(doc))
    return doc
