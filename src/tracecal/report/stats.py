"""The report's statistics section: paired comparisons with the best baseline, selective answering, learning curves.

Everything comes from the run: the comparisons and the held-out selective-answering columns from ``results.json``
(`tracecal.evaluation.protocol`), the smallest certified error rate per estimator from its seed-0 predictions
(`tracecal.report.selective`), the learning curves from the run's ``learning_curve`` artefact when
`tracecal learning-curve` wrote one (drawn by `tracecal.report.learning_curve.learning_curve_svg` with the pieces of
the report's one plotting path). All text is escaped.
"""

from __future__ import annotations

import math
from typing import Any

from tracecal.report.html import collapsed, e, figure_block, num
from tracecal.report.informative import uninformative
from tracecal.report.learning_curve import learning_curve_svg
from tracecal.report.selective import best_of, run_delta
from tracecal.report.svg import safe_name
from tracecal.stats.selective import SelectiveThreshold

__all__ = ["statistics_section"]

VERDICT = {"better": "▲ better", "worse": "▼ worse", "n.s.": "n.s.", "n/a": "n/a"}


def _fmt(v: Any, digits: int = 3, sign: bool = False) -> str:
    f = num(v)
    return (f"{f:+.{digits}f}" if sign else f"{f:.{digits}f}") if math.isfinite(f) else "—"


def _dv(v: Any) -> str:
    f = num(v)
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


def _comparison_tables(comp: dict[str, Any], estimators: list[str], skip: dict[str, str]) -> str:
    """One table per task of each estimator's paired difference to the task's baseline; a task not ranked
    (``skip``: task → why) collapsed with its reason."""
    out: list[str] = []
    for task, c in comp.items():
        if not c.get("baseline"):
            continue
        block = [
            f"<h4>{e(task)}: against {e(c['baseline'])}</h4>",
            f'<div class="tablewrap"><table class="sortable" id="cmp-{e(safe_name(task))}"><thead><tr>'
            '<th class="l" data-type="str">estimator</th><th data-type="num">Δ AUROC</th>'
            '<th class="l" data-type="str">AUROC</th><th data-type="num">Δ Brier</th>'
            '<th class="l" data-type="str">Brier</th></tr></thead><tbody>',
        ]
        for est in (x for x in estimators if x in c["estimators"]):
            d = c["estimators"][est]
            block.append(
                f'<tr><td class="l">{e(est)}</td>{_diff_cells(d.get("auroc"))}{_diff_cells(d.get("brier"))}</tr>'
            )
        block.append("</tbody></table></div>")
        out.append(collapsed(task, skip[task], "".join(block)) if task in skip else "".join(block))
    return "".join(out)


def _certified_cell(c: SelectiveThreshold | None, best: bool) -> str:
    if c is None:
        return '<td data-v="">—</td>'
    tip = (
        f"α* = {c.alpha:.2f}: answer iff raw score ≥ {c.threshold:.4g}; {c.n_answered} of {c.n_cal} answered, "
        f"{c.n_errors} wrong among them"
        if math.isfinite(c.alpha)
        else f"no α ≤ 0.99 is certified on these {c.n_cal} answers"
    )
    cls = ' class="best"' if best else ""
    text = f'{c.alpha:.2f} <span class="sd">({c.coverage:.0%})</span>' if math.isfinite(c.alpha) else "none"
    return f'<td data-v="{_dv(c.alpha)}" title="{e(tip)}"{cls}>{text}</td>'


def _held_out_table(results: dict[str, Any], tasks: list[str], estimators: list[str]) -> str:
    """The run's own check at its α over every split: coverage (share of splits whose risk exceeds α)."""
    sel = (results.get("statistics") or {}).get("selective")
    metrics = results.get("metrics") or {}
    if not sel or not any("sel_coverage" in (metrics.get(t, {}).get(x) or {}) for t in tasks for x in estimators):
        return ""
    out = [
        f'<details><summary>Held-out check at α = {e(sel["alpha"])}</summary><p class="note">The threshold '
        f"chosen on each calibration split at α = {e(sel['alpha'])}, δ = {e(sel['delta'])}; cells: its coverage on "
        "the evaluation split, mean over splits, and (in grey) the share of splits whose realised risk exceeds α "
        "— at most δ up to the noise of a finite split. Coverage 0: no threshold can be certified at this α.</p>",
        '<div class="tablewrap"><table class="sortable" id="selective-held-out"><thead><tr>'
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
    out.append("</tbody></table></div></details>")
    return "".join(out)


def _certified_table(
    tasks: list[str], estimators: list[str], certified: dict[str, dict[str, SelectiveThreshold]], table_id: str
) -> str:
    """Estimators × ``tasks``: α* and the share answered there, the smallest α* of each task in bold unless the
    table is of tasks not ranked (``table_id`` ``selective-not-ranked``: nothing marked)."""
    out = [
        f'<div class="tablewrap"><table class="sortable" id="{table_id}"><thead><tr>'
        '<th class="l" data-type="str">estimator</th>'
    ]
    for t in tasks:
        first = next(iter(certified.get(t, {}).values()), None)
        n = f' <span class="sd">(n={first.n_cal})</span>' if first else ""
        out.append(f'<th data-type="num">{e(t)}{n}</th>')
    out.append("</tr></thead><tbody>")
    ranked = table_id != "selective-not-ranked"
    best = {t: best_of(certified.get(t, {})) if ranked else set() for t in tasks}
    for est in estimators:
        cells = "".join(_certified_cell(certified.get(t, {}).get(est), est in best[t]) for t in tasks)
        out.append(f'<tr><td class="l">{e(est)}</td>{cells}</tr>')
    out.append("</tbody></table></div>")
    return "".join(out)


def _selective_table(
    results: dict[str, Any],
    tasks: list[str],
    estimators: list[str],
    certified: dict[str, dict[str, SelectiveThreshold]],
) -> str:
    """Per estimator and task: α*, the smallest certified error rate, and the share answered there
    (`tracecal.report.selective`), the tasks not ranked (`tracecal.report.informative`) collapsed apart; then the
    held-out check at the run's α."""
    if not any(certified.get(t) for t in tasks):
        return _held_out_table(results, tasks, estimators)
    skip = uninformative(results, tasks)
    delta = run_delta(results)
    out = [
        '<h3>Selective answering</h3><p class="note">What each estimator can offer: α*, the smallest error rate '
        "among answered questions (grid 0.01, 0.02, …) that the Learn-then-Test threshold certifies with "
        f"probability ≥ {e(round(1 - delta, 6))}, and (in grey) the share of answers still answered there, on the "
        "seed-0 evaluation split (fitted estimators: the model fitted on its calibration split). Bold: the "
        "smallest α* of the task. <i>none</i>: no α can be certified. α* is read off these answers; to deploy, "
        "fix α in advance and run <code>tracecal selective RUN --alpha α</code>.</p>",
    ]
    if ranked := [t for t in tasks if t not in skip]:
        out.append(_certified_table(ranked, estimators, certified, "selective-table"))
    if skip:
        why = "; ".join(f"{t}: {r}" for t, r in skip.items())
        out.append(
            f'<details class="not-ranked"><summary>Tasks not ranked — {e(why)}</summary>'
            + _certified_table(list(skip), estimators, certified, "selective-not-ranked")
            + "</details>"
        )
    return "".join(out) + _held_out_table(results, tasks, estimators)


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
    results: dict[str, Any],
    tasks: list[str],
    estimators: list[str],
    learning: dict[str, Any] | None = None,
    certified: dict[str, dict[str, SelectiveThreshold]] | None = None,
) -> str:
    """The ``#statistics`` section ('' when the run has neither comparisons, selective answers nor curves);
    ``certified``: `tracecal.report.selective.certified_summary` of the run."""
    comp = (results.get("statistics") or {}).get("comparisons") or {}
    body = ""
    if comp:
        first = next(iter(comp.values()))
        body += (
            f'<h3>Paired comparisons</h3><p class="note">Each estimator minus the best non-TRACE estimator of '
            f"the task (highest mean AUROC): the difference of the means over splits and its "
            f"{num(first.get('level')):.0%} percentile interval from {e(first.get('n_boot'))} paired bootstrap "
            "resamples of the questions (one resample applied to every split; the calibrators fitted on each "
            "calibration split held fixed). ▲ / ▼: the interval excludes 0. For Brier, lower is better.</p>"
            + _comparison_tables(comp, estimators, uninformative(results, tasks))
        )
    body += _selective_table(results, tasks, estimators, certified or {}) + _learning_curves(learning)
    if not body:
        return ""
    return f'<section id="statistics"><h2>Statistics</h2>{body}</section>'
