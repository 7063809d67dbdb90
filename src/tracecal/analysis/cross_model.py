"""The cross-model view (the TRACE paper's Table 2) from scored runs' ``results.json`` files.

For each model (one run) and task, the *setting*: the best non-TRACE baseline (the protocol's choice, by mean
AUROC over splits; the same estimator for Brier) against TRACE, TRACE+ and ``trace_plus_cv``, with the paired
bootstrap interval of each difference that the run stored (questions resampled, 95 % by default). Averages over
a task set (the paper's three tasks SVAMP + TriviaQA + TruthfulQA, and all four with MLQA) and pooled over models
are unweighted means of the settings; their intervals combine the settings' intervals as independent normal
errors (tasks and models are independent samples): se = sqrt(Σ se_i²) / k with se_i = (hi − lo) / (2 z).
Counted as the paper counts: the settings in which a method's mean is better than the best baseline's (lower
Brier, higher AUROC), and in brackets those where the interval excludes 0.

>>> doc = cross_model_table({"m": _example_results()}, {"one": ("t",)})
>>> won = doc["models"]["m"]["one"]["trace_plus"]["won"]
>>> (won["brier"], won["brier_sig"], won["auroc"], won["auroc_sig"])
(1, 0, 1, 1)
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tracecal._inputs import read_json
from tracecal.errors import ValidationError
from tracecal.evaluation.result_json import nan_for_null
from tracecal.evaluation.runstore import RunStore

__all__ = [
    "CANDIDATES",
    "fmt3",
    "PAPER_TABLE2",
    "TASK_SETS",
    "cross_model_markdown",
    "cross_model_table",
    "read_results",
]

CANDIDATES = ("trace", "trace_plus", "trace_plus_cv")
TASK_SETS: dict[str, tuple[str, ...]] = {
    "SVAMP + TriviaQA + TruthfulQA": ("svamp", "triviaqa", "truthfulqa"),
    "all four": ("svamp", "triviaqa", "truthfulqa", "mlqa"),
}
#: The paper's Table 2 (seven LLMs, SVAMP + TriviaQA + TruthfulQA): Brier, AUROC; TRACE+ won 21/21 (Brier), 17/21.
PAPER_TABLE2 = {"best baseline": (0.136, 0.764), "trace_plus": (0.120, 0.817)}
METRICS = ("brier", "auroc")
Z95 = 1.959963984540054


def read_results(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A run's results: ``path`` is a run directory (its ``results.json``, read by its `RunStore`) or a results.json
    file (e.g. one kept under docs/runs/)."""
    p = Path(path)
    if p.is_dir():
        store = RunStore(p)
        doc, p = store.read_results(), store.artefact_path("results.json")  # null metrics (standard JSON) read as NaN
    else:
        doc = nan_for_null(read_json(p, "results file", ValidationError))  # the one checked opener (tracecal._inputs)
    if not isinstance(doc, dict):
        raise ValidationError(f"results file {p}: not the results.json `tracecal evaluate` writes (not an object)")
    return dict(doc)


def _setting(res: Mapping[str, Any], task: str) -> dict[str, Any] | None:
    """One (model, task): the baseline and each candidate's means and paired differences."""
    comp = res.get("statistics", {}).get("comparisons", {}).get(task)
    per = res.get("metrics", {}).get(task)
    if not comp or not per or comp.get("baseline") not in per:
        return None
    base = comp["baseline"]
    out: dict[str, Any] = {"baseline": base, "level": comp.get("level", 0.95)}
    out["best baseline"] = {m: per[base][m]["mean"] for m in METRICS}
    for c in CANDIDATES:
        if c not in per:
            continue
        row: dict[str, Any] = {m: per[c][m]["mean"] for m in METRICS}
        for m in METRICS:
            d = comp.get("estimators", {}).get(c, {}).get(m, {})
            row[f"{m}_diff"] = (d.get("diff"), d.get("lo"), d.get("hi"))
        out[c] = row
    return out


def _better(metric: str, a: float, b: float) -> bool:
    return a < b if metric == "brier" else a > b


def _combine(settings: list[dict[str, Any]], cand: str, level: float) -> dict[str, Any]:
    """Mean over settings of a candidate, its difference to the baselines with a combined interval, and wins."""
    rows = [s[cand] for s in settings if cand in s]
    out: dict[str, Any] = {m: _mean([r[m] for r in rows]) for m in METRICS}
    won = {m: 0 for m in METRICS} | {f"{m}_sig": 0 for m in METRICS}
    z = _z(level)
    for m in METRICS:
        diffs = [r[f"{m}_diff"] for r in rows if r[f"{m}_diff"][0] is not None]
        d = _mean([x[0] for x in diffs])
        se = math.sqrt(sum(((hi - lo) / (2 * z)) ** 2 for _, lo, hi in diffs)) / max(len(diffs), 1)
        out[f"{m}_diff"] = (d, d - z * se, d + z * se) if diffs else (None, None, None)
        for s in settings:
            if cand in s and _better(m, s[cand][m], s["best baseline"][m]):
                won[m] += 1
                _, lo, hi = s[cand][f"{m}_diff"]
                if lo is not None and (hi < 0 if m == "brier" else lo > 0):
                    won[f"{m}_sig"] += 1
    out["won"] = won
    out["n_settings"] = len(rows)
    return out


def _z(level: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(0.5 + level / 2) if level != 0.95 else Z95


def _mean(xs: Sequence[float | None]) -> float:
    vals = [float(x) for x in xs if x is not None and math.isfinite(float(x))]
    return sum(vals) / len(vals) if vals else float("nan")


def _summary(settings: list[dict[str, Any]]) -> dict[str, Any]:
    level = settings[0]["level"] if settings else 0.95
    out: dict[str, Any] = {
        "n_settings": len(settings),
        "best baseline": {m: _mean([s["best baseline"][m] for s in settings]) for m in METRICS},
        "baselines": [s["baseline"] for s in settings],
    }
    for c in CANDIDATES:
        out[c] = _combine(settings, c, level)
    return out


def _informative(res: Mapping[str, Any], task: str, min_correct: int) -> bool:
    n = res.get("tasks", {}).get(task, {}).get("n_correct")
    return n is not None and int(n) >= min_correct


def cross_model_table(
    runs: Mapping[str, Mapping[str, Any]],
    task_sets: Mapping[str, Sequence[str]] | None = None,
    min_correct: int = 0,
) -> dict[str, Any]:
    """The cross-model document: ``runs`` maps a model label to its results; per model and pooled, per task set,
    the best-baseline / candidate means, differences with intervals and settings won; plus every setting.
    ``min_correct`` > 0 keeps only the settings whose task has at least that many correct answers in the run
    (a task a model almost never answers right says nothing about its confidence)."""
    sets = dict(task_sets or TASK_SETS)
    settings = {
        label: {
            t: _setting(res, t)
            for t in res.get("metrics", {})
            if t != "average" and (min_correct <= 0 or _informative(res, t, min_correct))
        }
        for label, res in runs.items()
    }
    doc: dict[str, Any] = {"task_sets": sets, "settings": settings, "models": {}, "pooled": {}}
    doc["min_correct"] = min_correct
    for label in runs:
        doc["models"][label] = {
            name: _summary([s for t in tasks if (s := settings[label].get(t)) is not None])
            for name, tasks in sets.items()
        }
    for name, tasks in sets.items():
        pooled = [s for label in runs for t in tasks if (s := settings[label].get(t)) is not None]
        doc["pooled"][name] = _summary(pooled)
    doc["paper"] = PAPER_TABLE2
    return doc


def fmt3(x: Any) -> str:
    """A value with 3 decimals, "—" for a missing or non-finite one."""
    return "—" if x is None or not math.isfinite(float(x)) else f"{float(x):.3f}"


def _diff(d: tuple[Any, Any, Any]) -> str:
    return "—" if d[0] is None else f"{d[0]:+.3f} [{d[1]:+.3f}, {d[2]:+.3f}]"


def _rows(label: str, s: dict[str, Any]) -> list[str]:
    b = s["best baseline"]
    lines = [f"| {label} | best baseline | {fmt3(b['brier'])} | | {fmt3(b['auroc'])} | | |"]
    for c in CANDIDATES:
        r = s[c]
        w = r["won"]
        won = f"{w['brier']} ({w['brier_sig']}) / {w['auroc']} ({w['auroc_sig']}) of {r['n_settings']}"
        lines.append(
            f"| | {c} | {fmt3(r['brier'])} | {_diff(r['brier_diff'])} | {fmt3(r['auroc'])} | {_diff(r['auroc_diff'])} "
            f"| {won} |"
        )
    return lines


def cross_model_markdown(doc: Mapping[str, Any]) -> str:
    """The Table-2 view as Markdown: a table per task set (models, then pooled), the paper's row beside it."""
    head = "| model | method | Brier | Δ Brier [95 %] | AUROC | Δ AUROC [95 %] | settings won Brier / AUROC (sig.) |"
    out: list[str] = []
    for name in doc["task_sets"]:
        out += [f"### {name}", "", head, "|---|---|---|---|---|---|---|"]
        for label, per in doc["models"].items():
            out += _rows(label, per[name])
        out += _rows("**pooled**", doc["pooled"][name])
        pb, pt = doc["paper"]["best baseline"], doc["paper"]["trace_plus"]
        paper = f"| paper (7 LLMs, 3 tasks) | best baseline → TRACE+ | {pb[0]} → {pt[0]} | | {pb[1]} → {pt[1]} |"
        out += [paper + " | 21 / 17 of 21 |", ""]
    return "\n".join(out)


def _example_results() -> dict[str, Any]:
    """A one-task results document for the docstring example."""
    m = {"brier": {"mean": 0.2}, "auroc": {"mean": 0.7}}
    tp = {"brier": {"mean": 0.18}, "auroc": {"mean": 0.8}}
    cmp = {"brier": {"diff": -0.02, "lo": -0.05, "hi": 0.01}, "auroc": {"diff": 0.1, "lo": 0.02, "hi": 0.18}}
    return {
        "metrics": {"t": {"min_prob": m, "trace_plus": tp}},
        "statistics": {
            "comparisons": {"t": {"baseline": "min_prob", "level": 0.95, "estimators": {"trace_plus": cmp}}}
        },
    }
