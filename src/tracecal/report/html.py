"""HTML assembly: tables, figure blocks, the example-browser controls and the embedded JSON data.

Every piece of run data that reaches the markup goes through `html.escape`; the example data travels
as JSON inside ``<script type="application/json">`` with ``<``, ``>`` and ``&`` written as ``\\u003c``,
``\\u003e`` and ``\\u0026`` (so neither ``</script>`` nor ``<!--`` can end or confuse the element), and
the page's JavaScript inserts it with ``textContent`` only.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from html import escape
from typing import Any

from tracecal.report.assets import CSP, CSS, ERROR_JS, MAIN_JS
from tracecal.report.informative import uninformative

__all__ = [
    "METRIC_COLUMNS",
    "json_for_script",
    "page",
    "results_tables",
    "figure_block",
    "examples_section",
    "num",
    "verdict_section",
    "collapsed",
]

# (metric key, header, higher is better)
METRIC_COLUMNS: tuple[tuple[str, str, bool], ...] = (
    ("auroc", "AUROC ↑", True),
    ("auprc", "AUPRC ↑", True),
    ("aurc", "AURC ↓", False),
    ("brier", "Brier ↓", False),
    ("ece", "ECE ↓", False),
    ("aece", "AECE ↓", False),
    ("risk@10", "risk@10 ↓", False),
    ("risk@50", "risk@50 ↓", False),
    ("risk@90", "risk@90 ↓", False),
)


def e(x: Any) -> str:
    """HTML-escape any value (quotes too, so the result is safe inside attributes)."""
    return escape(str(x), quote=True)


def json_for_script(obj: Any) -> str:
    """JSON safe to embed in a ``<script type="application/json">`` element (no ``<``, ``>``, ``&``)."""
    s = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return (
        s.replace("&", "\\u0026")
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def num(v: Any) -> float:
    """``float(v)``, NaN for anything that is not a number (None, text)."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return math.nan
    return f


def _fmt(v: float, digits: int = 3, sign: bool = False) -> str:
    return (f"{v:+.{digits}f}" if sign else f"{v:.{digits}f}") if math.isfinite(v) else "—"


def _dv(v: float) -> str:
    """The ``data-v`` sort key of a numeric cell ('' for NaN, sorted last)."""
    return repr(float(v)) if math.isfinite(v) else ""


def _metric_cell(m: dict[str, Any] | None, best: bool) -> str:
    mean = num((m or {}).get("mean"))
    sd = num((m or {}).get("sd"))
    sd_html = f' <span class="sd">±{_fmt(sd)}</span>' if math.isfinite(sd) and math.isfinite(mean) else ""
    cls = ' class="best"' if best else ""
    return f'<td data-v="{_dv(mean)}"{cls}>{_fmt(mean)}{sd_html}</td>'


TEXT_COLUMNS = {"task", "estimator", "family", "entropy", "label rule", "ranked"}
"""Columns sorted as text (left-aligned); every other column sorts as numbers."""
TASK_COLUMNS = [
    "task",
    "examples",
    "correct",
    "ranked",
    "base rate",
    "eval / cal per seed",
    "mean tokens",
    "empty answers",
]
TASK_COLUMNS += ["stopped at length", "entropy", "label rule"]
RESULT_COLUMNS = ["task", "estimator", "family", "n", "base rate"]


def _table_head(table_id: str, heads: list[str]) -> str:
    """The opening of a sortable table up to its body, one header cell per column (`TEXT_COLUMNS` sort as text)."""
    kinds = [("l", "str") if h in TEXT_COLUMNS else ("", "num") for h in heads]
    cells = "".join(f'<th class="{c}" data-type="{t}">{e(h)}</th>' for h, (c, t) in zip(heads, kinds, strict=True))
    return f'<table class="sortable" id="{table_id}"><thead><tr>{cells}</tr></thead><tbody>'


def _task_table(
    tinfo: dict[str, dict[str, Any]], metrics: dict[str, Any], tasks: list[str], skip: dict[str, str]
) -> list[str]:
    """The per-task summary table (examples, correct answers, ranked or why not, base rate, split sizes, ...)."""
    out: list[str] = []
    out.append('<h3>Tasks</h3><div class="tablewrap">')
    out.append(_table_head("task-table", TASK_COLUMNS))
    for task in tasks:
        ti = tinfo.get(task, {})
        first: dict[str, Any] = next(iter((metrics.get(task) or {}).values()), {})
        n_eval = num((first.get("n") or {}).get("mean"))
        n_cal = num((first.get("n_cal") or {}).get("mean"))
        split = f"{_fmt(n_eval, 0)} / {_fmt(n_cal, 0)}"
        acc = num(ti.get("accuracy"))
        ek = ti.get("entropy_kind", "")
        ek = ", ".join(map(str, ek)) if isinstance(ek, list) else str(ek)
        out.append(
            f'<tr data-task="{e(task)}"><td class="l">{e(task)}</td>'
            f'<td data-v="{_dv(num(ti.get("n")))}">{e(ti.get("n", "—"))}</td>'
            f'<td data-v="{_dv(num(ti.get("n_correct")))}">{e(ti.get("n_correct", "—"))}</td>'
            f'<td class="l why">{e("no: " + skip[task] if task in skip else "yes")}</td>'
            f'<td data-v="{_dv(acc)}">{_fmt(acc)}</td>'
            f'<td data-v="{_dv(n_eval)}">{e(split)}</td>'
            f'<td data-v="{_dv(num(ti.get("mean_answer_tokens")))}">{_fmt(num(ti.get("mean_answer_tokens")), 1)}</td>'
            f'<td data-v="{_dv(num(ti.get("zero_token_answers")))}">{e(ti.get("zero_token_answers", "—"))}</td>'
            f'<td data-v="{_dv(num(ti.get("stopped_at_length")))}">{e(ti.get("stopped_at_length", "—"))}</td>'
            f'<td class="l">{e(ek)}</td><td class="rule">{e(ti.get("label_rule", ""))}</td></tr>'
        )
    out.append("</tbody></table></div>")
    return out


def _best(per: dict[str, Any], shown: list[str]) -> dict[str, set[str]]:
    """Per metric, the estimators with the best mean (ties all marked; none when all are equal)."""
    best: dict[str, set[str]] = {}
    for key, _, higher in METRIC_COLUMNS:
        vals = {x: num((per[x].get(key) or {}).get("mean")) for x in shown}
        fin = [v for v in vals.values() if math.isfinite(v)]
        if len(fin) > 1 and max(fin) > min(fin):
            top = max(fin) if higher else min(fin)
            best[key] = {x for x, v in vals.items() if math.isfinite(v) and abs(v - top) <= 1e-12}
    return best


def results_tables(results: dict[str, Any], tasks: list[str], estimators: list[str]) -> str:
    """The per-task summary table and the sortable task × estimator results table."""
    tinfo: dict[str, dict[str, Any]] = results.get("tasks") or {}
    metrics: dict[str, dict[str, dict[str, Any]]] = results.get("metrics") or {}
    n_seeds = (results.get("config") or {}).get("n_seeds", "?")
    skip = uninformative(results, tasks)
    out = _task_table(tinfo, metrics, tasks, skip)
    rows_tasks = list(tasks) + (["average"] if "average" in metrics else [])
    ranked = [t for t in tasks if t not in skip]
    out.append(
        f'<h3>Results</h3><p class="note">Mean <span class="sd">± sd</span> over {e(n_seeds)} calibration / '
        "evaluation splits. AUROC, AUPRC, AURC and risk@k rank the raw scores; Brier and (adaptive) ECE use "
        "calibrated probabilities. Bold: the best estimator of the task for that metric. Click a header to sort."
        ' <label>Task: <select id="results-task"><option value="">all</option>'
        + "".join(f'<option value="{e(t)}">{e(t)}</option>' for t in rows_tasks)
        + "</select></label></p>"
    )
    if skip:
        out.append(
            '<p class="note not-ranked">Not ranked — no best marked, not in the average: '
            + "; ".join(f"<b>{e(t)}</b>: {e(why)}" for t, why in skip.items())
            + ".</p>"
        )
    out.append('<div class="tablewrap">')
    out.append(_table_head("results-table", RESULT_COLUMNS + [h for _, h, _ in METRIC_COLUMNS]))
    est_info: dict[str, dict[str, Any]] = results.get("estimators") or {}
    for task in rows_tasks:
        per = metrics.get(task) or {}
        shown = [x for x in estimators if x in per]
        best = _best(per, shown) if task not in skip else {}
        if task == "average":
            n_all = sum(num(tinfo.get(t, {}).get("n")) for t in ranked)
            accs = [num(tinfo.get(t, {}).get("accuracy")) for t in ranked]
            accs = [a for a in accs if math.isfinite(a)]
            n_val, base = n_all, (sum(accs) / len(accs) if accs else math.nan)
        else:
            n_val, base = num(tinfo.get(task, {}).get("n")), num(tinfo.get(task, {}).get("accuracy"))
        for est in shown:
            info = est_info.get(est, {})
            cls = ' class="avg"' if task == "average" else (' class="not-ranked"' if task in skip else "")
            cells = [
                f'<td class="l">{e(task)}</td>',
                f'<td class="l" title="{e(info.get("description", ""))}">{e(est)}</td>',
                f'<td class="l">{e(info.get("family", ""))}</td>',
                f'<td data-v="{_dv(n_val)}">{_fmt(n_val, 0)}</td>',
                f'<td data-v="{_dv(base)}">{_fmt(base)}</td>',
            ]
            cells += [_metric_cell(per[est].get(key), est in best.get(key, ())) for key, _, _ in METRIC_COLUMNS]
            out.append(f'<tr data-task="{e(task)}"{cls}>' + "".join(cells) + "</tr>")
    out.append("</tbody></table></div>")
    return "".join(out)


def collapsed(task: str, reason: str, body: str) -> str:
    """``body`` (a task's figures) in a closed ``<details>`` whose summary names the task and why it is not ranked."""
    return (
        f'<details class="not-ranked" data-task="{e(task)}"><summary><b>{e(task)}</b>: not ranked — {e(reason)}'
        f"</summary>{body}</details>"
    )


def figure_block(name: str, svg: str, caption: str) -> str:
    """One figure: a trusted SVG document (built with escaped text by `tracecal.report.svg`) and a caption."""
    return f'<figure id="fig-{e(name)}">{svg}<figcaption>{e(caption)}</figcaption></figure>'


def _select(id_: str, label: str, options: Iterable[tuple[str, str]]) -> str:
    opts = "".join(f'<option value="{e(v)}">{e(t)}</option>' for v, t in options)
    return f'<label>{e(label)} <select id="{e(id_)}">{opts}</select></label>'


def examples_section(tasks: Sequence[str], n_examples: int, n_total: int, primary: str | None, window: int) -> str:
    """Controls and containers of the example browser (rendered client-side from ``#report-data``)."""
    sort_opts = [("order", "run order")]
    if primary:
        sort_opts += [("asc", f"{primary} confidence, lowest first"), ("desc", f"{primary} confidence, highest first")]
    limited = (
        f" Showing {n_examples:,} of the run's {n_total:,} answers (<code>max_examples</code>)."
        if n_examples < n_total
        else ""
    )
    controls = "".join(
        [
            _select("ex-task", "Task", [("", "all")] + [(str(i), t) for i, t in enumerate(tasks)]),
            _select("ex-correct", "Correctness", [("", "all"), ("1", "correct"), ("0", "incorrect")]),
            '<label>Search <input type="search" id="ex-search" placeholder="question, answer, gold or id"></label>',
            _select("ex-sort", "Order", sort_opts),
            _select("ex-mode", "Colour tokens by", [("s", "surprisal −log p"), ("h", "entropy H")]),
        ]
    )
    legend = (
        '<span class="legend">0 <span class="grad"></span> <span id="ex-legend-max"></span> of '
        '<span id="ex-legend-name"></span> (darker = more surprising / uncertain) · '
        f'<span class="pkbox"></span> TRACE peak window (w = {window}, the highest mean entropy) · '
        '<mark class="risk">span</mark> risky span of the answer (hover: risk, operator)</span>'
    )
    pager = (
        '<div class="pager"><button type="button" id="ex-prev{s}">◀ previous</button>'
        '<span id="ex-page{s}"></span><button type="button" id="ex-next{s}">next ▶</button></div>'
    )
    return (
        '<section id="examples"><h2>Examples</h2>'
        '<p class="note">Each answer with its question, gold answers, its risky spans highlighted '
        "(<code>tracecal.risk_spans</code>: darker = riskier; hover one for its risk and operator) and the model's "
        "tokens coloured by surprisal or entropy: the view that explains why an answer got low confidence. "
        "Confidences are the "
        f"calibrated probabilities of the seed-0 evaluation split.{limited}</p>"
        f'<div class="controls">{controls}{legend}</div>'
        + pager.format(s="")
        + '<div id="ex-list"></div>'
        + pager.format(s="-bottom")
        + "</section>"
    )


def verdict_section(verdict: dict[str, Any] | None) -> str:
    """The section the page opens with, ``<section id="verdict">``: which confidence to use, in plain words.
    ``verdict``: ``headline`` (str), ``lines`` (list of str) and ``table`` (rows with ``estimator``, ``auroc``,
    ``brier``, ``ece``, ``delta``, ``lo``, ``hi`` — Δ AUROC to the best and its paired interval — and ``level``:
    level with the best); every key optional, every text escaped. '' when there is no verdict."""
    if not verdict:
        return ""
    lines = "".join(f"<li>{e(x)}</li>" for x in verdict.get("lines") or [])
    rows = []
    for r in verdict.get("table") or []:
        d, lo, hi = (num(r.get(k)) for k in ("delta", "lo", "hi"))
        cells = "".join(f"<td>{_fmt(num(r.get(k)))}</td>" for k in ("auroc", "brier", "ece"))
        level = "yes" if r.get("level") else "no"
        rows.append(
            f'<tr><td class="l">{e(r.get("estimator", ""))}</td>{cells}<td>{_fmt(d, sign=True)} '
            f'<span class="sd">[{_fmt(lo, sign=True)}, {_fmt(hi, sign=True)}]</span></td>'
            f'<td class="l">{level}</td></tr>'
        )
    table = (
        '<table id="verdict-table"><thead><tr><th class="l">estimator</th><th>AUROC ↑</th><th>Brier ↓</th>'
        '<th>ECE ↓</th><th>Δ AUROC to the best [interval]</th><th class="l">level with the best</th></tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
        if rows
        else ""
    )
    headline = f'<p class="headline">{e(verdict["headline"])}</p>' if verdict.get("headline") else ""
    cmds = "\n".join(e(c) for c in verdict.get("commands") or [])
    serve = f"<p>To serve it:</p><pre>{cmds}</pre>" if cmds else ""
    body = f"{headline}{f'<ul>{lines}</ul>' if lines else ''}{table}{serve}"
    return f'<section id="verdict"><h2>Verdict</h2>{body}</section>'


def page(title: str, meta_lines: list[str], body_sections: list[str], data_json: str) -> str:
    """The whole self-contained document."""
    names = ("verdict", "overview", "statistics", "localisation")
    present = {a: any(f'<section id="{a}">' in b for b in body_sections) for a in names}
    verdict = [("verdict", "Verdict")] if present["verdict"] else []
    stats = [("statistics", "Statistics")] if present["statistics"] else []
    overview = [("overview", "Overview")] if present["overview"] else []
    where = [("localisation", "Where answers go wrong")] if present["localisation"] else []
    nav = "".join(
        f'<a href="#{a}">{e(t)}</a>'
        for a, t in (
            *verdict,
            *overview,
            ("results", "Results"),
            *stats,
            ("reliability", "Reliability"),
            ("risk-coverage", "Risk–coverage"),
            ("histograms", "Histograms"),
            *where,
            ("examples", "Examples"),
        )
    )
    meta = "".join(f'<p class="meta">{line}</p>' for line in meta_lines)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{e(CSP)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{e(title)}</title><style>{CSS}</style></head>\n<body>"
        '<ul id="js-errors" hidden></ul>'
        f"<script>{ERROR_JS}</script>"
        f'<header class="top"><h1>{e(title)}</h1>{meta}</header><nav>{nav}</nav><main>'
        + "".join(body_sections)
        + "</main>\n"
        f'<script type="application/json" id="report-data">{data_json}</script>\n'
        f"<script>{MAIN_JS}</script></body></html>\n"
    )
