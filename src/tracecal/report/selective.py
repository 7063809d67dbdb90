"""Selective answering as a user reads it: per task and estimator, the smallest error rate α its Learn-then-Test
threshold certifies at the run's δ, and the share of answers it still answers there.

For each task × estimator, on the run's seed-0 evaluation split (the answers that split's calibration never saw:
a fitted estimator such as TRACE+ scores them with the model fitted on the calibration split, so its score is a
fixed function of independent answers), with the raw scores and labels stored in the run's predictions:

* for each α of the grid 0.01, 0.02, …, 0.99 (`ALPHAS`), t̂(α) = `tracecal.stats.selective.ltt_threshold` (answer
  iff raw score ≥ t̂; P(error rate among answered ≤ α) ≥ 1 − δ for an α fixed in advance);
* α* = the smallest α of the grid with a finite t̂(α) (something is answered); its coverage = n_answered / n, the
  share of the split's n answers with a score ≥ t̂(α*), and the errors among them;
* no α on the grid: α* = NaN, coverage 0 ("none": the fixed sequence of thresholds starts at the most confident
  answers and stops at the first that fails, so errors among those certify nothing, whatever the α).

α* summarises what the estimator can offer on this run; reading it off and then deploying α = α* on the same
answers is a data-dependent choice (the guarantee is for an α fixed in advance): fix α, then
`tracecal selective RUN --alpha α` gives the threshold to deploy. The held-out check at the run's own α
(coverage and violations over every split, ``sel_coverage`` / ``sel_violation`` in ``results.json``) is
rendered beside it by `tracecal.report.stats`. `certified_tables` prints the same numbers in the terminal
(the end of `tracecal evaluate`).
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from tracecal.evaluation.runstore import RunStore
from tracecal.report.data import RunData, load_run
from tracecal.report.informative import uninformative
from tracecal.stats.selective import SelectiveThreshold, ltt_threshold

__all__ = [
    "ALPHAS",
    "certified",
    "certified_summary",
    "run_delta",
    "best_of",
    "cell_text",
    "certified_tables",
]

ALPHAS: tuple[float, ...] = tuple(round(0.01 * k, 2) for k in range(1, 100))
"""The error rates α tried, smallest first: 0.01, 0.02, …, 0.99."""
DEFAULT_DELTA = 0.1


def certified(
    confidence: np.ndarray, correct: np.ndarray, delta: float, alphas: tuple[float, ...] = ALPHAS
) -> SelectiveThreshold:
    """α*: the Learn-then-Test threshold (`ltt_threshold`) on (``confidence``, ``correct``) at failure
    probability ``delta`` for the smallest α of ``alphas`` (ascending) that answers something; its ``alpha`` is
    α*, its ``coverage`` the share answered. None on the grid: ``alpha`` NaN, threshold +inf, nothing answered."""
    y = np.asarray(correct, dtype=np.int64)
    for a in alphas:
        t = ltt_threshold(confidence, y, a, delta)
        if math.isfinite(t.threshold):
            return t
    return SelectiveThreshold(math.inf, 0, 0, math.nan, math.nan, float(delta), "ltt", int(y.size))


def run_delta(results: dict[str, Any]) -> float:
    """The δ the run's selective answering was scored with (``statistics.selective.delta``), else 0.1."""
    sel = (results.get("statistics") or {}).get("selective") or {}
    try:
        d = float(sel.get("delta", DEFAULT_DELTA))
    except (TypeError, ValueError):
        return DEFAULT_DELTA
    return d if 0 < d < 1 else DEFAULT_DELTA


def certified_summary(run: RunData, estimators: list[str]) -> dict[str, dict[str, SelectiveThreshold]]:
    """Per task (the run's order) and estimator: `certified` on the seed-0 evaluation split's finite raw scores.
    An estimator without scores on a task (not run, or missing from the predictions) is left out of it."""
    delta = run_delta(run.results)
    out: dict[str, dict[str, SelectiveThreshold]] = {}
    for task in run.tasks:
        idx = run.task_rows.get(task, np.zeros(0, np.int64))
        ev = idx[run.split[idx] == "eval"]
        per: dict[str, SelectiveThreshold] = {}
        for est in estimators:
            raw = run.raw.get(est)
            if raw is None:
                continue
            ok = ev[np.isfinite(raw[ev])]
            if ok.size:
                per[est] = certified(raw[ok], run.correct[ok], delta)
        out[task] = per
    return out


def best_of(per: dict[str, SelectiveThreshold]) -> set[str]:
    """The estimators with the smallest α* of a task (ties: the largest coverage there); none when no α* exists."""
    fin = {e: c for e, c in per.items() if math.isfinite(c.alpha)}
    if not fin:
        return set()
    key = min((c.alpha, -c.coverage) for c in fin.values())
    return {e for e, c in fin.items() if (c.alpha, -c.coverage) == key}


def cell_text(c: SelectiveThreshold | None) -> str:
    """``α* · coverage`` as the tables show it: ``0.62 · 18%``; ``—`` for no scores, ``none`` for no α*."""
    if c is None:
        return "—"
    if not math.isfinite(c.alpha):
        return "none"
    return f"{c.alpha:.2f} · {c.coverage:.0%}"


def certified_tables(run_dir: str | os.PathLike[str] | RunStore, estimators: list[str] | None = None) -> list[Any]:
    """The terminal table (rich) of `certified_summary` of a scored run: estimators × tasks, ``α* · coverage``,
    the smallest α of each task in bold green (none on a task too small to rank, `tracecal.report.informative`,
    whose column says so); [] when the run stores no predictions."""
    from rich.markup import escape
    from rich.table import Table

    run = load_run(run_dir, estimators)
    names = [e for e in (estimators or run.estimators) if e in run.raw]
    summary = certified_summary(run, names)
    if not any(summary.values()):
        return []
    delta = run_delta(run.results)
    table = Table(
        title=f"Selective answering: the smallest error rate α (grid 0.01) whose Learn-then-Test threshold is "
        f"certified with probability ≥ {1 - delta:g}, and the share of answers kept there (seed-0 evaluation split)",
        caption="none: no α ≤ 0.99 is certified (errors among the most confident answers end the test sequence). "
        "To deploy, fix α and run `tracecal selective RUN --alpha α`.",
    )
    table.add_column("estimator", style="bold", no_wrap=True)
    skip = uninformative(run.results, run.tasks)
    for t in run.tasks:
        first = next(iter(summary[t].values()), None)
        wrong = (
            f"{first.n_cal} answers, {1 - run.correct[run.task_rows[t]].mean():.0%} wrong" if first else "no answers"
        )
        apart = "\n[dim]not ranked: too few answers[/]" if t in skip else ""
        table.add_column(f"{escape(t)}\n[dim]{wrong}[/]{apart}", justify="right")
    best = {t: best_of(summary[t]) if t not in skip else set() for t in run.tasks}
    for est in names:
        cells = [cell_text(summary[t].get(est)) for t in run.tasks]
        cells = [f"[bold green]{s}[/]" if est in best[t] else s for s, t in zip(cells, run.tasks, strict=True)]
        table.add_row(escape(est), *cells)
    return [table]
