"""Which tasks of a run can rank and calibrate estimators, and the average over those only.

A task is *informative* iff it holds at least `MIN_EACH` correct and `MIN_EACH` wrong answers over the whole task
(min(correct, wrong) ≥ 50): with fewer, an AUROC, an ECE or a "best" estimator is noise. `tracecal evaluate`
writes the verdict per task into ``results.json`` (``tasks[task]["informative"]`` and
``tasks[task]["informative_reason"]``) and leaves such tasks out of the pseudo-task ``average``; for a run written
before those keys, `task_reason` applies the same rule to the task's counts and `with_informative` recomputes the
average over the informative tasks (the mean of their per-task means, as evaluate does). The report then shows an
uninformative task apart, collapsed with its reason, and never in an average or a "best" mark.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any

from tracecal.evaluation.ranking import MIN_PER_CLASS_RANKED

__all__ = ["MIN_EACH", "task_reason", "uninformative", "with_informative"]

MIN_EACH = MIN_PER_CLASS_RANKED
"""Correct answers and wrong answers a task needs, each, to rank or calibrate estimators (the evaluation's rule,
`tracecal.evaluation.ranking.MIN_PER_CLASS_RANKED`)."""


def _count(v: Any) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return math.nan
    return f


def task_reason(info: Mapping[str, Any]) -> str | None:
    """None when a task (its ``results.json`` entry ``tasks[task]``) is informative, else why not, e.g.
    ``"6 correct answers (< 50): too few to rank or calibrate"``.

    The run's own ``informative`` / ``informative_reason`` when it has them; else the rule min(correct, wrong) ≥
    `MIN_EACH` on the whole task, correct = ``n_correct`` (else ``n_correct_cal + n_correct_eval``, else
    round(``accuracy`` × ``n``)), wrong = ``n`` − correct. Counts that cannot be read: informative (no evidence)."""
    if "informative" in info:
        if info["informative"]:
            return None
        return str(info.get("informative_reason") or f"fewer than {MIN_EACH} correct or wrong answers")
    n = _count(info.get("n"))
    correct = _count(info.get("n_correct"))
    if not math.isfinite(correct):
        correct = _count(info.get("n_correct_cal")) + _count(info.get("n_correct_eval"))
    if not math.isfinite(correct):
        correct = round(_count(info.get("accuracy")) * n) if math.isfinite(n) else math.nan
    if not (math.isfinite(n) and math.isfinite(correct)):
        return None
    wrong = n - correct
    if min(correct, wrong) >= MIN_EACH:
        return None
    few, kind = (correct, "correct") if correct <= wrong else (wrong, "wrong")
    return f"{int(few)} {kind} answers (< {MIN_EACH}): too few to rank or calibrate"


def uninformative(results: Mapping[str, Any], tasks: list[str]) -> dict[str, str]:
    """The uninformative ones of ``tasks`` (in order), each with its reason (`task_reason`)."""
    tinfo = results.get("tasks") or {}
    out: dict[str, str] = {}
    for t in tasks:
        why = task_reason(tinfo.get(t) or {})
        if why is not None:
            out[t] = why
    return out


def _average(metrics: Mapping[str, Any], tasks: list[str]) -> dict[str, Any]:
    """Per estimator and metric: the mean over ``tasks`` of the per-task means (finite ones; an estimator missing
    on one of them gets none), sd NaN — what evaluate writes as ``average``."""
    avg: dict[str, Any] = {}
    names = [x for x in (metrics.get(tasks[0]) or {}) if all(x in (metrics.get(t) or {}) for t in tasks)]
    for name in names:
        avg[name] = {}
        for key in metrics[tasks[0]][name]:
            vals = [_count((metrics[t][name].get(key) or {}).get("mean")) for t in tasks]
            fin = [v for v in vals if math.isfinite(v)]
            avg[name][key] = {"mean": sum(fin) / len(fin) if fin else math.nan, "sd": math.nan, "n_seeds": len(fin)}
    return avg


def with_informative(results: dict[str, Any], tasks: list[str]) -> dict[str, Any]:
    """``results`` with every task's ``informative`` / ``informative_reason`` set (`task_reason`) and, for a run
    written before evaluate set them, the ``average`` recomputed over the informative tasks only (none with fewer
    than two) and its paired comparisons dropped (they were drawn over every task). A run that has the keys is
    returned as it is (a copy): its average already leaves those tasks out."""
    out = copy.copy(results)
    tinfo = {t: dict(v) for t, v in (results.get("tasks") or {}).items()}
    old = any("informative" not in tinfo.get(t, {}) for t in tasks)
    for t in tasks:
        why = task_reason(tinfo.setdefault(t, {}))
        tinfo[t]["informative"], tinfo[t]["informative_reason"] = why is None, why
    out["tasks"] = tinfo
    bad = [t for t in tasks if not tinfo[t]["informative"]]
    if not old or not bad:
        return out
    metrics = dict(results.get("metrics") or {})
    metrics.pop("average", None)
    good = [t for t in tasks if tinfo[t]["informative"] and t in metrics]
    if len(good) > 1:
        metrics["average"] = _average(metrics, good)
    out["metrics"] = metrics
    stats = dict(results.get("statistics") or {})
    if "average" in (stats.get("comparisons") or {}):
        stats["comparisons"] = {k: v for k, v in stats["comparisons"].items() if k != "average"}
        out["statistics"] = stats
    return out
