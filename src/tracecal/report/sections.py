"""The report's figure sections: the overview, then per task the reliability diagrams, risk–coverage curves and
confidence histograms, each drawn by `tracecal.report.svg` / `tracecal.report.overview`.

Two rules keep the page readable and honest:

* a task too small to rank or calibrate (`tracecal.report.informative`: fewer than 50 correct or wrong answers) is
  never drawn as if its figures meant something: each of its figures sits in a collapsed ``<details>`` whose summary
  gives the reason, its overview panel is drawn apart with no "best" mark, and it is in no average;
* the reliability diagrams and histograms show the estimators that matter (`key_estimators`: TRACE, TRACE+, the
  best of each informative task by AUROC, P(True), verbalised confidence; at most `KEY_MAX`) and put every
  estimator's figure — the very document ``--figures`` writes — behind a collapsed ``<details>``.
"""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path
from typing import Any

from tracecal._outputs import InputPaths, atomic_write
from tracecal.report.html import collapsed, e, figure_block, num
from tracecal.report.overview import OVERVIEW_FILE, overview_svg
from tracecal.report.plotdata import TaskPlots
from tracecal.report.svg import XML_PROLOG, histogram_svg, reliability_svg, risk_coverage_svg

__all__ = ["KEY_MAX", "NOT_RANKED_FILE", "key_estimators", "overview_section", "figure_sections"]

KEY_MAX = 6
NOT_RANKED_FILE = "overview_not_ranked.svg"
KEY_FIRST, KEY_LAST = ("trace", "trace_plus"), ("p_true", "verbalized")
RELIABILITY_CAPTION = (
    "{t}: bars are the accuracy of the answers whose calibrated confidence falls in each bin (dots: their mean "
    "confidence), numbers the answers per bin, the dashed line perfect calibration. Hover for exact values."
)
RC_CAPTION = (
    "{t}: error rate among the most confident answers as the share kept grows (lower is better). Oracle: a "
    "perfect ranking; random: the task's error rate."
)
HIST_CAPTION = "{t}: calibrated confidence of correct (green) and incorrect (red) answers, 20 equal bins."
OVERVIEW_CAPTION = (
    "Each estimator's mean AUROC per task (dot); bar: the paired bootstrap interval of its difference to the "
    "task's best non-TRACE estimator (dashed line, ◆) when the run has comparisons, else ± 1 sd over splits. "
    "Ringed: the best of the task. Hover for the numbers."
)


def key_estimators(results: dict[str, Any], tasks: list[str], shown: list[str], k: int = KEY_MAX) -> list[str]:
    """The estimators whose reliability diagrams and histograms the page shows first: TRACE and TRACE+, the one of
    highest mean AUROC on each of ``tasks`` (pass the informative ones), P(True) and verbalised confidence — those
    of ``shown``, in that order, at most ``k``."""
    metrics = results.get("metrics") or {}
    best: list[str] = []
    for t in tasks:
        aurocs = {x: num(((((metrics.get(t) or {}).get(x) or {}).get("auroc")) or {}).get("mean")) for x in shown}
        fin = {x: v for x, v in aurocs.items() if math.isfinite(v)}
        if fin:
            best.append(max(fin, key=lambda x: fin[x]))
    out: list[str] = []
    for x in [*KEY_FIRST, *best, *KEY_LAST]:
        if x in shown and x not in out:
            out.append(x)
    return out[:k]


def _write_svg(figures_dir: str | os.PathLike[str] | None, name: str, svg: str, inputs: InputPaths) -> None:
    if figures_dir is not None and svg:
        text = XML_PROLOG + svg
        atomic_write(
            Path(figures_dir) / name, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"), inputs, "--figures"
        )


def overview_section(
    results: dict[str, Any],
    tasks: list[str],
    estimators: list[str],
    skip: dict[str, str],
    figures_dir: str | os.PathLike[str] | None = None,
    inputs: InputPaths = (),
) -> str:
    """The figure the report opens with, of the ranked tasks (not in ``skip``, task → why not ranked); the others'
    panels collapsed under it with their reasons. Both figures also written to ``figures_dir`` (`OVERVIEW_FILE`,
    `NOT_RANKED_FILE`). '' when no estimator has an AUROC anywhere."""
    ranked = [t for t in tasks if t not in skip]
    svg = overview_svg(results, ranked, estimators) if ranked else ""
    apart = overview_svg(results, [t for t in tasks if t in skip], estimators, ranked=False) if skip else ""
    if not (svg or apart):
        return ""
    _write_svg(figures_dir, OVERVIEW_FILE, svg, inputs)
    _write_svg(figures_dir, NOT_RANKED_FILE, apart, inputs)
    body = figure_block("overview", svg, OVERVIEW_CAPTION) if svg else ""
    if not svg:
        body = '<p class="note">No task of this run has enough correct and wrong answers to rank estimators.</p>'
    if apart:
        why = "; ".join(f"{t}: {r}" for t, r in skip.items())
        caption = "Not ranked, not in the average, no best marked: " + why + ". Bars: ± 1 sd over splits."
        summary = f"{len(skip)} task{'s' if len(skip) > 1 else ''} not ranked: {why}"
        body += (
            f'<details class="not-ranked"><summary>{e(summary)}</summary>'
            f"{figure_block('overview-not-ranked', apart, caption)}</details>"
        )
    return f'<section id="overview"><h2>Overview</h2>{body}</section>'


def _task_figures(tp: TaskPlots, kind: str, key: list[str], skip: dict[str, str]) -> str:
    """One task's figure of ``kind`` (reliability / histogram / risk_coverage): collapsed with the reason when the
    task is in ``skip``; for reliability and histograms, the ``key`` estimators' panels first, every estimator's
    figure behind a closed ``<details>``."""
    draw = {"reliability": reliability_svg, "histogram": histogram_svg, "risk_coverage": risk_coverage_svg}[kind]
    caption = {"reliability": RELIABILITY_CAPTION, "histogram": HIST_CAPTION, "risk_coverage": RC_CAPTION}[kind]
    name = f"{kind.replace('_', '-')}-{tp.task}"
    full = figure_block(name, draw(tp), caption.format(t=tp.task))
    if tp.task in skip:
        return f"<h3>{e(tp.task)}</h3>" + collapsed(tp.task, skip[tp.task], full)
    if kind == "risk_coverage" and not tp.curves:
        return f'<h3>{e(tp.task)}</h3><p class="note">No scored answers on the evaluation split: no curve.</p>'
    if kind == "risk_coverage" or not key or len(key) >= len(tp.reliability):
        return f"<h3>{e(tp.task)}</h3>" + full
    order = {x: i for i, x in enumerate(key)}
    sub = dataclasses.replace(
        tp,
        reliability=sorted((r for r in tp.reliability if r.estimator in order), key=lambda r: order[r.estimator]),
        hists=sorted((h for h in tp.hists if h.estimator in order), key=lambda h: order[h.estimator]),
    )
    more = f"All {len(tp.reliability)} estimators"
    return (
        f"<h3>{e(tp.task)}</h3>"
        + figure_block(f"{name}-key", draw(sub), caption.format(t=tp.task))
        + f'<details class="more"><summary>{e(more)}</summary>{full}</details>'
    )


def figure_sections(
    plots: list[TaskPlots], results: dict[str, Any], estimators: list[str], curves: list[str], skip: dict[str, str]
) -> list[str]:
    """The reliability, risk–coverage and histogram sections of ``plots`` (one per task); ``skip``: the tasks not
    ranked, with why; ``curves``: the estimators on the risk–coverage charts."""
    tasks = [tp.task for tp in plots]
    key = key_estimators(results, [t for t in tasks if t not in skip], estimators)
    blocks = {
        k: "".join(_task_figures(tp, k, key, skip) for tp in plots)
        for k in ("reliability", "risk_coverage", "histogram")
    }
    shown = (
        f"Shown first: {', '.join(key)} (TRACE, TRACE+, the best of each ranked task by AUROC, P(True), verbalised"
        "); every estimator's panels under “All … estimators”. "
        if 0 < len(key) < len(estimators)
        else ""
    )
    apart = f"Tasks too small to rank ({', '.join(skip)}) are collapsed with the reason. " if skip else ""
    rel = (
        '<section id="reliability"><h2>Reliability diagrams</h2><p class="note">Calibrated confidence of the '
        "seed-0 evaluation split in equal-width bins; ECE is that split's (the table averages all splits). "
        f"{e(shown + apart)}</p>" + blocks["reliability"] + "</section>"
    )
    rc = (
        '<section id="risk-coverage"><h2>Risk–coverage curves</h2><p class="note">Estimators: '
        + e(", ".join(curves))
        + f". {e(apart)}</p>"
        + blocks["risk_coverage"]
        + "</section>"
    )
    hist = (
        f'<section id="histograms"><h2>Confidence histograms</h2><p class="note">{e(shown + apart)}</p>'
        + blocks["histogram"]
        + "</section>"
    )
    return [rel, rc, hist]
