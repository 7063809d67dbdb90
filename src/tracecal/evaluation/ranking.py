"""Which tasks rank estimators, and the comparisons made over them (pure, no files).

A task is *informative* (`informative`) when it has at least ``min_per_class`` correct and as many wrong answers
(our choice, 50: `MIN_PER_CLASS_RANKED`); the others are shown apart, never silently in the average over tasks, in
a paired comparison or in a "best" mark. Over the informative (ranked) tasks, `ranking_statistics` gives

* per task, every estimator against that task's best non-TRACE estimator (`tracecal.stats.bootstrap.comparisons`),
  and the same for the average over the ranked tasks (tasks are independent samples: the average's bootstrap
  draws are the mean of the tasks' draws);
* the *leader*: the estimator with the highest mean AUROC over the ranked tasks, and every other estimator against
  it (`leader_comparisons`): Δ = estimator − leader with its paired percentile interval. An estimator whose AUROC
  interval holds 0 is *level with the leader* — what a verdict may recommend in its place.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from tracecal.evaluation.results import METRICS
from tracecal.stats.bootstrap import BOOT_METRICS, LOWER_IS_BETTER_BOOT, compare, comparisons

__all__ = [
    "MIN_PER_CLASS_RANKED",
    "informative",
    "ranked_tasks",
    "average_over",
    "leader_comparisons",
    "ranking_statistics",
]

MIN_PER_CLASS_RANKED = 50
"""Our choice: with fewer than 50 correct (or 50 wrong) answers a task's calibration split holds ≈ 17 of them, too
few to rank estimators or fit a calibrator that means anything (docs/results.md: the informative tasks)."""

Draws = dict[str, dict[str, dict[str, np.ndarray]]]  # task → estimator → metric → (B,) bootstrap draws


def informative(n_correct: int, n: int, min_per_class: int = MIN_PER_CLASS_RANKED) -> str | None:
    """None when a task with ``n`` answers, ``n_correct`` of them correct, is informative (at least
    ``min_per_class`` answers of each class); else the reason, in words.

    >>> informative(120, 300) is None
    True
    >>> informative(6, 200)
    '6 correct answers of 200 (fewer than 50): too few to rank or calibrate'
    """
    for count, what in ((n_correct, "correct"), (n - n_correct, "wrong")):
        if count < min_per_class:
            return f"{count} {what} answers of {n} (fewer than {min_per_class}): too few to rank or calibrate"
    return None


def ranked_tasks(info: dict[str, dict[str, Any]]) -> list[str]:
    """The informative tasks of a results' ``tasks`` (``informative`` missing: a run scored before the rule)."""
    return [t for t, i in info.items() if i.get("informative", True)]


def average_over(
    metrics: dict[str, Any], names: list[str], not_run: dict[str, list[str]], ranked: list[str]
) -> dict[str, Any]:
    """Mean over the ``ranked`` tasks of the per-task means; an estimator not run on one of them gets no average."""
    avg: dict[str, dict[str, dict[str, float]]] = {}
    for name in names:
        complete = not any(name in not_run.get(t, []) for t in ranked)
        avg[name] = {}
        for metric in METRICS:
            vals = [metrics[t][name][metric]["mean"] for t in ranked]
            fin = [v for v in vals if math.isfinite(v)] if complete else []
            avg[name][metric] = {
                "mean": float(np.mean(fin)) if fin else float("nan"),
                "sd": float("nan"),
                "n_seeds": len(fin),
            }
    return avg


def leader_comparisons(
    draws: dict[str, dict[str, np.ndarray]], means: dict[str, Any], level: float
) -> dict[str, Any] | None:
    """Every estimator against the *leader* (the highest mean AUROC among those with draws), per metric of
    `BOOT_METRICS`: ``{"estimator", "level", "estimators": {est: {metric: compare(...)}}}``. None without draws.

    >>> rng = np.random.default_rng(0)
    >>> d = {e: {"auroc": rng.normal(mu, 0.01, 200), "brier": rng.normal(0.2, 0.01, 200)} for e, mu in
    ...      [("a", 0.80), ("b", 0.70)]}
    >>> means = {"a": {"auroc": {"mean": 0.80}, "brier": {"mean": 0.2}}, "b": {"auroc": {"mean": 0.70},
    ...          "brier": {"mean": 0.2}}}
    >>> lead = leader_comparisons(d, means, 0.95)
    >>> lead["estimator"], lead["estimators"]["b"]["auroc"]["verdict"]
    ('a', 'worse')
    """
    ok = {e: means[e]["auroc"]["mean"] for e in draws if e in means and math.isfinite(means[e]["auroc"]["mean"])}
    if not ok:
        return None
    lead = max(ok, key=lambda e: (ok[e], e))
    out: dict[str, Any] = {"estimator": lead, "level": float(level), "estimators": {}}
    for est in ok:
        if est == lead:
            continue
        out["estimators"][est] = {
            m: compare(
                draws[est][m],
                draws[lead][m],
                means[est][m]["mean"] - means[lead][m]["mean"],
                level,
                m in LOWER_IS_BETTER_BOOT,
            )
            for m in BOOT_METRICS
            if m in draws[est] and m in draws[lead]
        }
    return out


def _average_draws(draws: Draws, ranked: list[str], names: list[str]) -> dict[str, dict[str, np.ndarray]]:
    tasks = [t for t in draws if t in ranked]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a resample undefined on every task: NaN
        return {
            e: {m: np.nanmean([draws[t][e][m] for t in tasks], axis=0) for m in BOOT_METRICS}
            for e in names
            if tasks and all(draws[t].get(e) for t in tasks)
        }


def ranking_statistics(
    metrics: dict[str, Any], draws: Draws, families: dict[str, str], level: float, ranked: list[str]
) -> dict[str, Any]:
    """``{"comparisons": {task: ...}, "ranked": {"tasks", "over"}, "leader": ...}`` (see the module docstring);
    ``families``: estimator → family (the best baseline is the best estimator outside the TRACE family); ``over``
    is what the leader is chosen on: ``average``, the one ranked task, or None (no ranked task)."""
    comp: dict[str, Any] = {}
    per_task: dict[str, dict[str, dict[str, np.ndarray]]] = {}
    for task, per in metrics.items():
        if task == "average":
            d = _average_draws(draws, ranked, list(families))
        elif task in ranked:
            d = {e: v for e, v in draws.get(task, {}).items() if v}
        else:
            continue
        per_task[task] = d
        if d:
            means = {e: {m: per[e][m]["mean"] for m in BOOT_METRICS} for e in d}
            comp[task] = comparisons(d, means, families, level)
    ref = "average" if "average" in metrics else (ranked[0] if len(ranked) == 1 else None)
    leader = leader_comparisons(per_task.get(ref, {}), metrics[ref], level) if ref else None
    return {"comparisons": comp, "ranked": {"tasks": ranked, "over": ref}} | ({"leader": leader} if leader else {})
