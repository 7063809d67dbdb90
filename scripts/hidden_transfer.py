"""Transfer of the fitted methods across tasks: fit on all of one task's labelled answers, evaluate on each other.

    python scripts/hidden_transfer.py RUN [--estimators hidden_probe,hidden_probe_trace_plus,trace_plus]
        [--tasks triviaqa,svamp,...] [--out RUN/hidden_transfer.json]

RUN is a scored run directory that holds the hidden pass (``tracecal evaluate --estimators ...,hidden_probe``, then
scored: its rows table holds the labels). For every fitted estimator e and every ordered pair of tasks (a, b), e is
fitted on all of task a's answers and scored on all of task b's (a = b: the in-task number, by 5-fold
cross-fitting, so no answer is scored by a model fitted on it); TRACE (label-free) is given for reference. Writes a
JSON document {"auroc": {estimator: {fit_task: {eval_task: AUROC}}}} and beside it (``.md``) one Markdown table per
estimator, which it also prints.
"""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import StratifiedKFold

from tracecal.estimators import get_estimator
from tracecal.evaluation.protocol import TaskStats
from tracecal.evaluation.stored_tasks import load_stored_tasks


def _auroc(y: np.ndarray, s: np.ndarray) -> float:
    ok = np.isfinite(s)
    return float(roc_auc_score(y[ok], s[ok])) if len(set(y[ok].tolist())) == 2 else float("nan")


def _in_task(name: str, d: TaskStats) -> float:
    scores = np.full(len(d.y), np.nan)
    for tr, te in StratifiedKFold(5, shuffle=True, random_state=0).split(d.y, d.y):
        est = get_estimator(name).fit(d.inputs.select(tr), d.y[tr])
        scores[te] = est.score(d.inputs.select(te))
    return _auroc(d.y, scores)


def transfer(data: list[TaskStats], names: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"trace": {d.task: _auroc(d.y, get_estimator("trace").score(d.inputs)) for d in data}}
    for name in names:
        table: dict[str, dict[str, float]] = {}
        for a in data:
            est = get_estimator(name).fit(a.inputs, a.y)
            table[a.task] = {b.task: _in_task(name, b) if b is a else _auroc(b.y, est.score(b.inputs)) for b in data}
        out[name] = table
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("run")
    ap.add_argument("--estimators", default="hidden_probe,hidden_probe_trace_plus,trace_plus")
    ap.add_argument("--tasks", default=None)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    names = a.estimators.split(",")
    data = load_stored_tasks(a.run, ["trace", *names], a.tasks.split(",") if a.tasks else None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        doc: dict[str, Any] = {"run": str(a.run), "auroc": transfer(data, names)}
    md = markdown(doc, [d.task for d in data], names, {d.task: (len(d.y), int(d.y.sum())) for d in data})
    print(md)
    out = Path(a.out) if a.out else Path(a.run) / "hidden_transfer.json"
    out.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    out.with_suffix(".md").write_text(md + "\n", encoding="utf-8")


def markdown(doc: dict[str, Any], tasks: list[str], names: list[str], sizes: dict[str, tuple[int, int]]) -> str:
    """One Markdown table per fitted estimator (rows: fitted on, columns: evaluated on), TRACE's row first."""
    head = "| fit \\ eval | " + " | ".join(f"{t} ({sizes[t][1]}/{sizes[t][0]} right)" for t in tasks) + " |"
    rule = "|---|" + "--:|" * len(tasks)
    lines = [f"TRACE (label-free, nothing fitted)\n\n{head}\n{rule}"]
    lines[0] += "\n| — | " + " | ".join(f"{doc['auroc']['trace'][t]:.3f}" for t in tasks) + " |"
    for name in names:
        rows = [f"| {t} | " + " | ".join(_cell(doc["auroc"][name][t][u], t == u) for u in tasks) + " |" for t in tasks]
        lines.append(f"`{name}`: AUROC (diagonal: 5-fold cross-fitted in-task)\n\n{head}\n{rule}\n" + "\n".join(rows))
    return "\n\n".join(lines)


def _cell(x: float, diagonal: bool) -> str:
    return "—" if not np.isfinite(x) else f"*{x:.3f}*" if diagonal else f"{x:.3f}"


if __name__ == "__main__":
    main()
