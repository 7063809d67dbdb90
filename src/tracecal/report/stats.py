"""The report's statistics section: paired comparisons with the best baseline, selective answering, learning curves.

Everything comes from the run: the comparisons and the selective-answering columns from ``results.json``
(`tracecal.evaluation.protocol`), the learning curves from the run's ``learning_curve`` artefact when
`tracecal learning-curve` wrote one (drawn by `tracecal.report.svg.learning_curve_svg`, the report's one plotting
path). All text is escaped.
"""

from __future__ import annotations

import math
from typing import Any

from tracecal.report.html import e, figure_block
from tracecal.report.svg import learning_curve_svg, safe_name

__all__ = ["statistics_section"]

VERDICT = {"better": "▲ better", "worse": "▼ worse", "n.s.": "n.s.", "n/a": "n/a"}


def _num(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def _fmt(v: Any, digits: int = 3, sign: bool = False) -> str:
    f = _num(v)
    return (f"{f:+.{digits}f}" if sign else f"{f:.{digits}f}") if math.isfinite(f) else "—"


def _dv(v: Any) -> str:
    f = _num(v)
    return repr(f) if math.isfinite(f) else ""


def _diff_cells(c: dict[str, Any] | None) -> str:
    c = c or {}
    interval = f"[{_fmt(c.get('lo'), sign=True)}, {_fmt(c.get('hi'), sign=True)}]"
    verdict = str(c.get("verdict", "n/a"))
    cls = {"better": ' class="best"', "worse": ' class="worse"'}.get(verdict, "")
    return (
        f'<td data-v="{_dv(c.get("diff"))}">{_fmt(c.get("diff"), sign=True)} <span class="sd">{e(interval)}</span>'
        f'</td><td class="l"{cls}>{e(VERDICT.get(verdict, verdict))}</td>'
    )


def _comparison_tables(comp: dict[str, Any], estimators: list[str]) -> str:
    out: list[str] = []
    for task, c in comp.items():
        if not c.get("baseline"):
            continue
        out.append(f"<h4>{e(task)}: against {e(c['baseline'])}</h4>")
        out.append(
            f'<div class="tablewrap"><table class="sortable" id="cmp-{e(safe_name(task))}"><thead><tr>'
            '<th class="l" data-type="str">estimator</th><th data-type="num">Δ AUROC</th>'
            '<th class="l" data-type="str">AUROC</th><th data-type="num">Δ Brier</th>'
            '<th class="l" data-type="str">Brier</th></tr></thead><tbody>'
        )
        for est in (x for x in estimators if x in c["estimators"]):
            d = c["estimators"][est]
            out.append(
                f'<tr><td class="l">{e(est)}</td>{_diff_cells(d.get("auroc"))}{_diff_cells(d.get("brier"))}</tr>'
            )
        out.append("</tbody></table></div>")
    return "".join(out)


def _selective_table(results: dict[str, Any], tasks: list[str], estimators: list[str]) -> str:
    sel = (results.get("statistics") or {}).get("selective")
    metrics = results.get("metrics") or {}
    if not sel or not any("sel_coverage" in (metrics.get(t, {}).get(x) or {}) for t in tasks for x in estimators):
        return ""
    out = [
        f'<h3>Selective answering</h3><p class="note">Answer iff the raw score ≥ the Learn-then-Test threshold '
        f"chosen on each calibration split so that the error rate among answered questions is ≤ {e(sel['alpha'])} "
        f"with probability ≥ {e(round(1 - sel['delta'], 6))}. Cells: coverage on the evaluation split, mean over "
        "splits, and (in grey) the share of splits whose realised risk exceeds α — at most δ up to the noise of a "
        "finite evaluation split. Coverage 0: no threshold can be certified.</p>",
        '<div class="tablewrap"><table class="sortable" id="selective-table"><thead><tr>'
        '<th class="l" data-type="str">estimator</th>',
    ]
    out += [f'<th data-type="num">{e(t)}</th>' for t in tasks]
    out.append("</tr></thead><tbody>")
    for est in estimators:
        cells = []
        for t in tasks:
            m = metrics.get(t, {}).get(est) or {}
            cov, vio = (m.get("sel_coverage") or {}).get("mean"), (m.get("sel_violation") or {}).get("mean")
            cells.append(f'<td data-v="{_dv(cov)}">{_fmt(cov)} <span class="sd">({_fmt(vio, 2)})</span></td>')
        out.append(f'<tr><td class="l">{e(est)}</td>{"".join(cells)}</tr>')
    out.append("</tbody></table></div>")
    return "".join(out)


def _learning_curves(learning: dict[str, Any] | None) -> str:
    tasks = (learning or {}).get("tasks") or {}
    if not tasks:
        return ""
    out = [
        '<h3>Learning curves</h3><p class="note">Written by <code>tracecal learning-curve</code>: each method '
        "fitted on calibration sets of each size (drawn stratified from the task) and scored on the rest.</p>"
    ]
    for task, lc in tasks.items():
        caption = (
            f"{task}: AUROC (raw scores) and Brier (calibrated) against the number of calibration "
            f"answers; dots: mean over {lc.get('n_splits')} splits, bars: bootstrap interval over "
            "questions."
        )
        out.append(figure_block(f"learning-curve-{safe_name(task)}", learning_curve_svg(lc), caption))
    return "".join(out)


def statistics_section(
    results: dict[str, Any], tasks: list[str], estimators: list[str], learning: dict[str, Any] | None = None
) -> str:
    """The ``#statistics`` section ('' when the run has neither comparisons, selective columns nor curves)."""
    comp = (results.get("statistics") or {}).get("comparisons") or {}
    body = ""
    if comp:
        first = next(iter(comp.values()))
        body += (
            f'<h3>Paired comparisons</h3><p class="note">Each estimator minus the best non-TRACE estimator of '
            f"the task (highest mean AUROC): the difference of the means over splits and its "
            f"{_num(first.get('level')):.0%} percentile interval from {e(first.get('n_boot'))} paired bootstrap "
            "resamples of the questions (one resample applied to every split; the calibrators fitted on each "
            "calibration split held fixed). ▲ / ▼: the interval excludes 0. For Brier, lower is better.</p>"
            + _comparison_tables(comp, estimators)
        )
    body += _selective_table(results, tasks, estimators) + _learning_curves(learning)
    if not body:
        return ""
    return f'<section id="statistics"><h2>Statistics</h2>{body}</section>'
