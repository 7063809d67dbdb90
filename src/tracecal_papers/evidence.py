"""The evidence across models that docs/results.md shows, built from stored run files (never typed by hand).

Three views, each a Markdown string from documents the repository's commands wrote:

* `headline_markdown`: per model (one scored run's ``results.json``), per task and averaged over tasks, the
  accuracy and AUROC / Brier of TRACE, TRACE+, ``trace_plus_cv``, the protocol's best non-TRACE baseline of each
  task (named), P(True) and verbalised confidence; ▲ / ▼ mark a difference to the best baseline whose paired
  bootstrap interval excludes 0 (better / worse), as the run stored it.
* `ablation_markdown`: per model (one ``ablations.json`` of `tracecal ablate`), the TRACE paper's ladder, each
  operator alone, the within-trace shuffle and the TRACE+ feature removals as AUROC / ECE means over the run's
  tasks, beside the paper's Qwen2.5-7B numbers, and the operator-sweep band (min–max over its settings).
* the cross-model table itself is `tracecal.analysis.cross_model` (the paper's Table 2).

A mean over tasks is unweighted; a cell is "—" where the run lacks the estimator, task or variant. Tasks on
which a model is almost never right say nothing (12 correct answers of 1,000 leave 4 in a calibration split), so
both views also average over the *informative* tasks only: those with at least ``min_correct`` (default
`MIN_CORRECT` = 50) correct answers in the run; the ablation view averages over those alone.

>>> res = {"tasks": {"t": {"n": 200, "n_correct": 60, "accuracy": 0.3}}, "metrics": {"t": {
...     "trace": {"auroc": {"mean": 0.8}, "brier": {"mean": 0.15}},
...     "min_prob": {"auroc": {"mean": 0.7}, "brier": {"mean": 0.2}}}},
...     "statistics": {"comparisons": {"t": {"baseline": "min_prob", "estimators": {
...     "trace": {"auroc": {"verdict": "better"}, "brier": {"verdict": "n.s."}}}}}}}
>>> print(headline_markdown({"M": res}).splitlines()[5])
| TRACE | 0.800 ▲ / 0.150 | 0.800 / 0.150 | 0.800 / 0.150 |
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from tracecal.analysis.cross_model import fmt3

__all__ = ["ABLATION_ROWS", "HEADLINE", "MIN_CORRECT", "ablation_markdown", "headline_markdown", "informative_tasks"]

#: The rows of the headline table: (label, estimator); ``None`` stands for each task's best baseline.
HEADLINE: tuple[tuple[str, str | None], ...] = (
    ("TRACE", "trace"),
    ("TRACE+", "trace_plus"),
    ("`trace_plus_cv`", "trace_plus_cv"),
    ("best baseline", None),
    ("P(True)", "p_true"),
    ("verbalised", "verbalized"),
)
#: The ablation variants shown side by side (the names `tracecal.analysis.ablations` gives them).
ABLATION_ROWS = (
    "TRACE raw",
    "TRACE, Platt",
    "learned operator weights",
    "TRACE+",
    "D only",
    "M only",
    "L only",
    "TRACE, shuffled",
    "TRACE+, shuffled",
    "without length",
    "entropy-local only",
    "likelihood-local only",
    "+ sequence likelihood",
    "without slope",
    "MARS + TRACE",
)
MARK = {"better": " ▲", "worse": " ▼"}
MIN_CORRECT = 50
"""Correct answers a task needs in a run to count as informative (≈ 17 in each 35 % calibration split)."""


def _mean(xs: Sequence[Any]) -> float:
    vals = [float(x) for x in xs if x is not None and math.isfinite(float(x))]
    return sum(vals) / len(vals) if len(vals) == len(xs) and vals else float("nan")


def _metric(res: Mapping[str, Any], task: str, est: str | None, metric: str) -> float:
    if est is None:
        est = res.get("statistics", {}).get("comparisons", {}).get(task, {}).get("baseline")
    cell = res.get("metrics", {}).get(task, {}).get(est or "", {}).get(metric)
    return float("nan") if not cell or cell.get("mean") is None else float(cell["mean"])


def _verdict(res: Mapping[str, Any], task: str, est: str | None, metric: str) -> str:
    comp = res.get("statistics", {}).get("comparisons", {}).get(task, {})
    v = comp.get("estimators", {}).get(est or "", {}).get(metric, {}).get("verdict", "")
    return MARK.get(v, "")


def _tasks(res: Mapping[str, Any]) -> list[str]:
    return [t for t in res.get("tasks", {}) if t != "average"]


def informative_tasks(n_correct: Mapping[str, Any], min_correct: int = MIN_CORRECT) -> list[str]:
    """The tasks (``n_correct``: task → correct answers in the run) with at least ``min_correct`` correct."""
    return [t for t, k in n_correct.items() if k is not None and int(k) >= min_correct]


def _means(res: Mapping[str, Any], tasks: Sequence[str], est: str | None) -> str:
    if not tasks:
        return "—"
    a = _mean([_metric(res, t, est, "auroc") for t in tasks])
    return f"{fmt3(a)} / {fmt3(_mean([_metric(res, t, est, 'brier') for t in tasks]))}"


def _model_headline(label: str, res: Mapping[str, Any], min_correct: int) -> list[str]:
    tasks = _tasks(res)
    info = res.get("tasks", {})
    sizes = ", ".join(f"{t} {info[t].get('n_correct', '?')} of {info[t].get('n', '?')}" for t in tasks)
    useful = informative_tasks({t: info[t].get("n_correct") for t in tasks}, min_correct)
    acc = [info[t].get("accuracy") for t in tasks]
    lines = [
        f"**{label}** (AUROC / Brier; correct answers: {sizes})",
        "",
        "| | " + " | ".join(tasks) + f" | mean | mean, ≥ {min_correct} correct |",
        "|---|" + "---:|" * (len(tasks) + 2),
        "| accuracy | "
        + " | ".join(fmt3(a) for a in acc)
        + f" | {fmt3(_mean(acc))} | {fmt3(_mean([info[t].get('accuracy') for t in useful]))} |",
    ]
    for name, est in HEADLINE:
        cells = []
        for t in tasks:
            a, b = _metric(res, t, est, "auroc"), _metric(res, t, est, "brier")
            cells.append(f"{fmt3(a)}{_verdict(res, t, est, 'auroc')} / {fmt3(b)}{_verdict(res, t, est, 'brier')}")
        lines.append(
            f"| {name} | " + " | ".join(cells) + f" | {_means(res, tasks, est)} | {_means(res, useful, est)} |"
        )
    base = res.get("statistics", {}).get("comparisons", {})
    names = ", ".join(f"{t} `{base[t]['baseline']}`" for t in tasks if t in base and base[t].get("baseline"))
    return lines + ["", f"Best baseline per task: {names or '—'}.", ""]


def headline_markdown(runs: Mapping[str, Mapping[str, Any]], min_correct: int = MIN_CORRECT) -> str:
    """Per model (``runs``: label → results document), accuracy and AUROC / Brier of the key estimators, per
    task, averaged over all tasks and over the informative ones (≥ ``min_correct`` correct answers)."""
    out: list[str] = []
    for label, res in runs.items():
        out += _model_headline(label, res, min_correct)
    return "\n".join(out)


def _task_mean(doc: Mapping[str, Any], name: str, tasks: Sequence[str]) -> dict[str, float] | None:
    """A variant's metrics averaged over ``tasks`` (None: the run lacks the variant or one of the tasks)."""
    row = doc.get("variants", {}).get(name)
    per = row.get("tasks", {}) if row else {}
    if not tasks or any(not per.get(t) for t in tasks):
        return None
    return {m: _mean([per[t].get(m) for t in tasks]) for m in ("auroc", "brier", "ece")}


def _variant_cell(doc: Mapping[str, Any], name: str, tasks: Sequence[str]) -> str:
    mean = _task_mean(doc, name, tasks)
    return "—" if mean is None else f"{fmt3(mean['auroc'])} / {fmt3(mean['ece'])}"


def _paper_cell(docs: Mapping[str, Mapping[str, Any]], name: str) -> str:
    paper = next((d["paper"][name] for d in docs.values() if name in d.get("paper", {})), None)
    if not paper:
        return ""
    return f"{fmt3(paper.get('auroc'))} / {fmt3(paper.get('ece'))}"


def _sweep_band(doc: Mapping[str, Any], tasks: Sequence[str]) -> str:
    names = [n for n, r in doc.get("variants", {}).items() if r.get("group") == "sweep"]
    rows = [m for n in names if (m := _task_mean(doc, n, tasks)) is not None]
    if not rows:
        return "—"
    a = [r["auroc"] for r in rows]
    b = [r["brier"] for r in rows]
    return f"AUROC {min(a):.3f}–{max(a):.3f}, Brier {min(b):.3f}–{max(b):.3f}"


def ablation_markdown(docs: Mapping[str, Mapping[str, Any]], min_correct: int = MIN_CORRECT) -> str:
    """The TRACE paper's ablations side by side (``docs``: label → ``ablations.json`` document), each model's
    AUROC / ECE averaged over its informative tasks (≥ ``min_correct`` correct answers, named in the header)."""
    labels = list(docs)
    useful = {lb: informative_tasks(docs[lb].get("n_correct", {}), min_correct) for lb in labels}
    head = "| variant | " + " | ".join(f"{lb} ({', '.join(useful[lb]) or 'no task'})" for lb in labels)
    lines = [head + " | paper (Qwen2.5-7B) |", "|---|" + "---:|" * (len(labels) + 1)]
    for name in ABLATION_ROWS:
        if all(name not in d.get("variants", {}) for d in docs.values()):
            continue
        cells = [_variant_cell(docs[lb], name, useful[lb]) for lb in labels]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {_paper_cell(docs, name)} |")
    paper_band = next((d.get("paper_sweep_band") for d in docs.values() if d.get("paper_sweep_band")), None)
    band = (
        ""
        if not paper_band
        else (
            f"AUROC {paper_band['auroc'][0]:.3f}–{paper_band['auroc'][1]:.3f}, "
            f"Brier {paper_band['brier'][0]:.3f}–{paper_band['brier'][1]:.3f}"
        )
    )
    bands = " | ".join(_sweep_band(docs[lb], useful[lb]) for lb in labels)
    lines.append(f"| operator sweep band | {bands} | {band} |")
    return "\n".join(lines)
