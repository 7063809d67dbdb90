"""Evaluation results and their writers: JSON, CSV, Markdown, the terminal and a pandas frame.

`Results` is what `tracecal.evaluation.protocol.score_tasks` returns: ``metrics[task][estimator][metric]`` is
``{"mean", "sd", "n_seeds"}`` over the splits (the pseudo-task ``average`` holds the mean over tasks), plus per
task information (accuracy, correct answers per split, zero-token answers, label rule) and the per-answer
tables (rows, raw scores, seed-0 predictions) that the run store writes as Parquet. ``statistics`` holds the
paired bootstrap comparisons with the best non-TRACE estimator (`tracecal.stats.bootstrap`) and the settings of the
selective-answering columns ``sel_coverage`` / ``sel_risk`` / ``sel_violation`` (`tracecal.stats.selective`); the
tables mark an estimator significantly better (▲) or worse (▼) than that baseline (◆).
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "METRICS",
    "LOWER_IS_BETTER",
    "Results",
    "results_csv",
    "results_markdown",
    "results_tables",
    "marker",
    "ranked_split",
]

METRICS = ("auroc", "brier", "ece", "aece", "auprc", "aurc", "risk@10", "risk@50", "risk@90")
LOWER_IS_BETTER = frozenset({"brier", "ece", "aece", "aurc", "risk@10", "risk@50", "risk@90"})
CSV_FIELDS = ("task", "estimator", "metric", "mean", "sd", "n_seeds")


@dataclass
class Results:
    """Metrics per task × estimator (see the module docstring)."""

    config: dict[str, Any]
    tasks: dict[str, dict[str, Any]]
    metrics: dict[str, dict[str, dict[str, dict[str, float]]]]
    estimators: dict[str, dict[str, Any]]
    substitutes: list[str]
    timings: dict[str, float] = field(default_factory=dict)
    answers: dict[str, Any] = field(default_factory=dict, repr=False)  # rows / scores / predictions (pyarrow)
    statistics: dict[str, Any] = field(default_factory=dict)  # comparisons with intervals, selective settings
    draws: dict[str, Any] = field(default_factory=dict, repr=False)  # bootstrap draws {task: {est: {metric: (B,)}}}

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (the per-answer tables are not in it: they are Parquet files; nor are the draws)."""
        keys = ("config", "tasks", "metrics", "estimators", "substitutes", "timings")
        return {k: getattr(self, k) for k in keys} | ({"statistics": self.statistics} if self.statistics else {})

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Results:
        return cls(
            d["config"],
            d["tasks"],
            d["metrics"],
            d["estimators"],
            d.get("substitutes", []),
            d.get("timings", {}),
            statistics=d.get("statistics", {}),
        )

    def to_rows(self) -> list[dict[str, Any]]:
        """One dict per task × estimator × metric."""
        return [
            {"task": task, "estimator": est, "metric": metric, **v}
            for task, per in self.metrics.items()
            for est, ms in per.items()
            for metric, v in ms.items()
        ]

    def to_frame(self) -> Any:
        """The metrics as a long pandas DataFrame (task, estimator, metric, mean, sd, n_seeds)."""
        import pandas as pd

        return pd.DataFrame(self.to_rows(), columns=list(CSV_FIELDS))

    def table(self, metric: str = "auroc") -> dict[str, dict[str, tuple[float, float]]]:
        """``{estimator: {task: (mean, sd)}}`` for one metric."""
        return {
            est: {
                task: (self.metrics[task][est][metric]["mean"], self.metrics[task][est][metric]["sd"])
                for task in self.metrics
                if est in self.metrics[task]
            }
            for est in self.estimators
        }


def _as_dict(res: Results | dict[str, Any]) -> dict[str, Any]:
    return res.to_json() if isinstance(res, Results) else res


def results_csv(res: Results | dict[str, Any]) -> str:
    """CSV text: one row per task × estimator × metric."""
    r = res if isinstance(res, Results) else Results.from_json(res)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(CSV_FIELDS), lineterminator="\n")
    w.writeheader()
    w.writerows(r.to_rows())
    return buf.getvalue()


MARKERS = {"better": " ▲", "worse": " ▼"}
MARKER_NOTE = (
    "▲ / ▼: the {level:.0%} paired bootstrap interval ({n_boot} resamples of the questions) of the "
    "difference to the best non-TRACE estimator (◆) lies above / below 0 (better / worse)"
)


def marker(d: dict[str, Any], task: str, est: str, metric: str) -> str:
    """`` ◆`` for the task's best baseline, `` ▲`` / `` ▼`` when significantly better / worse than it, else ''."""
    comp = (d.get("statistics") or {}).get("comparisons", {}).get(task)
    if not comp:
        return ""
    if comp.get("baseline") == est:
        return " ◆"
    return MARKERS.get(comp["estimators"].get(est, {}).get(metric, {}).get("verdict", ""), "")


def _note(d: dict[str, Any]) -> str:
    comp = next(iter((d.get("statistics") or {}).get("comparisons", {}).values()), None)
    return MARKER_NOTE.format(level=comp["level"], n_boot=comp["n_boot"]) if comp else ""


def _selective_cell(m: dict[str, Any] | None) -> str:
    if not m or "sel_coverage" not in m or m["sel_coverage"]["mean"] != m["sel_coverage"]["mean"]:
        return "n/a"
    return f"{m['sel_coverage']['mean']:.3f} ({m['sel_violation']['mean']:.2f})"


def _selective_title(d: dict[str, Any]) -> str | None:
    sel = (d.get("statistics") or {}).get("selective")
    if not sel:
        return None
    held = (
        f"; fitted estimators: refitted on {1 - sel['holdout']:.0%} of the calibration split, the threshold chosen "
        f"on the other {sel['holdout']:.0%}"
        if sel.get("holdout")
        else ""
    )
    return (
        f"Selective answering: coverage of the Learn-then-Test threshold (risk ≤ {sel['alpha']:g} with "
        f"probability ≥ {1 - sel['delta']:g}{held}), mean over splits (share of splits whose realised risk > "
        f"{sel['alpha']:g})"
    )


def _cell(m: dict[str, float] | None, sep: str = " ± ") -> str:
    if m is None or m["mean"] != m["mean"]:
        return "n/a"
    if m["sd"] != m["sd"]:
        return f"{m['mean']:.3f}"
    return f"{m['mean']:.3f}{sep}{m['sd']:.3f}"


def ranked_split(d: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    """The columns of the ranked view (the informative tasks, then ``average``) and the tasks left out of it,
    with the reason (``tasks[task]["informative_reason"]``; a run scored before the rule ranks every task)."""
    info = d.get("tasks", {})
    apart = {t: str(info[t].get("informative_reason") or "") for t in info if not info[t].get("informative", True)}
    return [t for t in d["metrics"] if t not in apart], apart


def _md_metric(d: dict[str, Any], metric: str, tasks: list[str], ranked: bool) -> list[str]:
    lines = ["| estimator | " + " | ".join(tasks) + " |", "|---|" + "---:|" * len(tasks)]
    for est in d["estimators"]:
        cells = [
            _cell(d["metrics"][t].get(est, {}).get(metric)) + (marker(d, t, est, metric) if ranked else "")
            for t in tasks
        ]
        lines.append(f"| {est} | " + " | ".join(cells) + " |")
    return lines


def results_markdown(res: Results | dict[str, Any], metrics: tuple[str, ...] = ("auroc", "brier", "ece")) -> str:
    """Markdown tables (estimators × tasks, mean ± sd) and a task summary, for docs and papers. Tasks that are
    not informative (`tracecal.evaluation.protocol.informative`) are shown apart, after the ranked tables, with
    their reason; the average and the ▲ / ▼ marks leave them out."""
    d = _as_dict(res)
    tasks, apart = ranked_split(d)
    lines = [
        "| task | n | accuracy | correct answers (cal / eval per split) | zero-token | label rule | ranked |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    for t, info in d["tasks"].items():
        lines.append(
            f"| {t} | {info['n']} | {info['accuracy']:.3f} | {info['n_correct_cal']} / "
            f"{info['n_correct_eval']} | {info['zero_token_answers']} | {info['label_rule']} | "
            f"{'no: ' + apart[t] if t in apart else 'yes'} |"
        )
    for metric in metrics:
        lines += ["", f"**{metric.upper()}** (mean ± sd over {d['config']['n_seeds']} splits)", ""]
        lines += _md_metric(d, metric, tasks, True)
    if _note(d):
        lines += ["", _note(d) + "."]
    if apart:
        lines += ["", "**Not ranked** (too few correct or wrong answers; left out of the average and the marks):", ""]
        lines += [f"- {t}: {why}" for t, why in apart.items()]
        for metric in metrics:
            lines += ["", f"{metric.upper()}, not ranked:", ""] + _md_metric(d, metric, list(apart), False)
    title = _selective_title(d)
    if title:
        real = [t for t in d["metrics"] if t != "average"]
        lines += ["", f"**{title}**", "", "| estimator | " + " | ".join(real) + " |", "|---|" + "---:|" * len(real)]
        for est in d["estimators"]:
            lines.append(f"| {est} | " + " | ".join(_selective_cell(d["metrics"][t].get(est)) for t in real) + " |")
    return "\n".join(lines) + "\n"


def _summary_table(d: dict[str, Any], apart: dict[str, str]) -> Any:
    from rich.markup import escape
    from rich.table import Table

    head = Table(title="tasks (label rules: results.md, the report)")
    for c in ("task", "n", "accuracy", "correct cal/eval", "0-token", "at limit", "ranked"):
        head.add_column(c, no_wrap=c != "ranked")
    for t, i in d["tasks"].items():
        head.add_row(
            escape(t),
            str(i["n"]),
            f"{i['accuracy']:.3f}",
            f"{i['n_correct_cal']}/{i['n_correct_eval']}",
            str(i["zero_token_answers"]),
            str(i["stopped_at_length"]),
            f"[yellow]no: {escape(apart[t])}[/]" if t in apart else "yes",
        )
    return head


def _metric_table(d: dict[str, Any], metric: str, tasks: list[str], ranked: bool) -> Any:
    """Estimators × ``tasks`` for one metric; ``ranked``: the best of each column in bold green, with the marks."""
    from rich.markup import escape
    from rich.table import Table

    lower = metric in LOWER_IS_BETTER
    better = "lower" if lower else "higher"
    what = f"{metric.upper()} ({better} is better; mean±sd over {d['config']['n_seeds']} splits)"
    table = Table(title=what if ranked else f"{what}: NOT RANKED (too few correct or wrong answers)")
    table.add_column("estimator", style="bold", no_wrap=True, min_width=max(map(len, d["estimators"]), default=9))
    best: dict[str, float] = {}
    for t in tasks:
        table.add_column(escape(t), justify="right", style="" if ranked else "dim")
        vals = [m[metric]["mean"] for m in d["metrics"][t].values() if m[metric]["mean"] == m[metric]["mean"]]
        if vals and ranked:
            best[t] = min(vals) if lower else max(vals)
    for e in d["estimators"]:
        cells = []
        for t in tasks:
            m = d["metrics"][t].get(e, {}).get(metric)
            s = _cell(m, "±") + (marker(d, t, e, metric) if ranked else "")
            cells.append(f"[bold green]{s}[/]" if m is not None and best.get(t) == m["mean"] else s)
        table.add_row(e, *cells)
    if ranked and metric in ("auroc", "brier") and _note(d):
        table.caption = _note(d)
    return table


def results_tables(res: Results | dict[str, Any], metrics: list[str]) -> list[Any]:
    """Rich tables for the terminal: the task summary, then estimators × ranked tasks per metric (best in bold),
    then the tasks that are not ranked, apart, without marks (their reason is in the summary's last column)."""
    d = _as_dict(res)
    tasks, apart = ranked_split(d)
    out = [_summary_table(d, apart)]
    out += [_metric_table(d, metric, tasks, True) for metric in metrics if tasks]
    if apart:
        out += [_metric_table(d, metric, list(apart), False) for metric in metrics[:1]]
    return out  # selective answering: `tracecal.report.selective.certified_tables` (the smallest certified α)
