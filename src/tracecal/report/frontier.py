"""The cost–quality frontier figure and report section: `tracecal.analysis.frontier` computes the document,
this module draws it.

`frontier_svg` draws one task: AUROC (mean over the splits, a bar of ± one split sd) against CPU-seconds per
answer on a log axis, one point per estimator coloured by the passes it reads, the frontier (`frontier_set` on
CPU-seconds) as a staircase through its points. `run_frontier` is the analysis followed by ``frontier_<task>.svg``
in the run directory; `frontier_section` is the report's section (the table and the figure of each task).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

from tracecal.analysis import frontier as analysis
from tracecal.evaluation.runstore import RunStore
from tracecal.report.svg import PALETTE, TITLE_H, esc, keep_apart, px, safe_name, svg_document

__all__ = ["run_frontier", "frontier_svg", "figure_file", "frontier_section"]

GROUP_ORDER = ("single pass", "extra", "beam", "semantic", "samples")
X0, Y0, W, H = 64, TITLE_H + 24, 560, 330


def figure_file(task: str) -> str:
    """The file name of a task's frontier figure in the run directory."""
    return f"frontier_{safe_name(task)}.svg"


def _colors(points: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    groups = sorted(
        {p["group"] for p in points},
        key=lambda g: (g not in GROUP_ORDER, GROUP_ORDER.index(g) if g in GROUP_ORDER else 0, g),
    )
    return {g: PALETTE[i % len(PALETTE)] for i, g in enumerate(groups)}


def _scales(points: Sequence[Mapping[str, Any]]) -> tuple[Any, Any, list[float], tuple[float, float]]:
    xs = [p["cpu_seconds"] for p in points if math.isfinite(p["cpu_seconds"]) and p["cpu_seconds"] > 0]
    ys = [v for p in points for v in (p["auroc"]["mean"] - p["auroc"]["sd"], p["auroc"]["mean"] + p["auroc"]["sd"])]
    ys = [v for v in ys if math.isfinite(v)] or [0.0, 1.0]
    lx0, lx1 = (math.log10(min(xs)), math.log10(max(xs))) if xs else (0.0, 1.0)
    lx0, lx1 = math.floor(lx0 * 2) / 2 - 0.1, math.ceil(lx1 * 2) / 2 + 0.1
    pad = max((max(ys) - min(ys)) * 0.08, 0.005)
    lo, hi = min(ys) - pad, max(ys) + pad

    def sx(v: float) -> float:
        return X0 + (math.log10(v) - lx0) / (lx1 - lx0) * W

    def sy(v: float) -> float:
        return Y0 + (1 - (v - lo) / (hi - lo)) * H

    decades = [10.0**e for e in range(math.ceil(lx0), math.floor(lx1) + 1)]
    return sx, sy, decades, (lo, hi)


def _axes(sx: Any, sy: Any, decades: list[float], yr: tuple[float, float]) -> list[str]:
    parts = [
        f'<rect x="{X0}" y="{Y0}" width="{W}" height="{H}" class="frame"/>',
        f'<text x="{X0 + W / 2}" y="{Y0 + H + 32}" text-anchor="middle" class="ax">'
        "CPU-seconds per answer (log scale)</text>",
        f'<text x="14" y="{Y0 + H / 2}" text-anchor="middle" class="ax" transform="rotate(-90 14 {Y0 + H / 2})">'
        "AUROC (mean over splits ± sd)</text>",
    ]
    for x, lab in keep_apart([(sx(d), f"{d:g}") for d in decades], 11):
        parts.append(f'<line x1="{px(x)}" y1="{Y0}" x2="{px(x)}" y2="{Y0 + H}" class="grid"/>')
        parts.append(f'<text x="{px(x)}" y="{Y0 + H + 14}" text-anchor="middle" class="tk2">{esc(lab)}</text>')
    for frac in (0.0, 0.25, 0.5, 0.75, 1.0):
        v = yr[0] + frac * (yr[1] - yr[0])
        parts.append(f'<line x1="{X0}" y1="{px(sy(v))}" x2="{X0 + W}" y2="{px(sy(v))}" class="grid"/>')
        parts.append(f'<text x="{X0 - 4}" y="{px(sy(v) + 4)}" text-anchor="end" class="tk2">{v:.3f}</text>')
    return parts


def _staircase(d: Mapping[str, Any], sx: Any, sy: Any) -> str:
    by = {p["estimator"]: p for p in d["points"]}
    on = [by[n] for n in d["frontier"]["cpu_seconds"] if by[n]["cpu_seconds"] > 0]
    pts: list[str] = []
    for i, p in enumerate(on):
        x, y = sx(p["cpu_seconds"]), sy(p["auroc"]["mean"])
        if i:
            pts.append(f"{px(x)},{px(sy(on[i - 1]['auroc']['mean']))}")
        pts.append(f"{px(x)},{px(y)}")
    if on:
        pts.append(f"{px(X0 + W)},{px(sy(on[-1]['auroc']['mean']))}")
    return (
        f'<polyline points="{" ".join(pts)}" fill="none" stroke="#444" stroke-width="1.2" stroke-dasharray="5 3">'
        "<title>frontier: no other estimator is cheaper and better</title></polyline>"
    )


def frontier_svg(d: Mapping[str, Any]) -> str:
    """AUROC against CPU-seconds per answer for one task of a `tracecal.analysis.frontier` document."""
    d = analysis.with_nan(d)
    points = [p for p in d["points"] if math.isfinite(p["auroc"]["mean"]) and p["cpu_seconds"] > 0]
    sx, sy, decades, yr = _scales(points)
    colors = _colors(points)
    parts = _axes(sx, sy, decades, yr) + [_staircase(d, sx, sy)]
    on = set(d["frontier"]["cpu_seconds"])
    for p in points:
        x, m, sd = sx(p["cpu_seconds"]), p["auroc"]["mean"], p["auroc"]["sd"]
        c = colors[p["group"]]
        tip = f"{p['estimator']} ({p['group']}): AUROC {m:.3f} ± {sd:.3f}, {p['cpu_seconds']:.3g} CPU-s per answer"
        parts.append(f'<line x1="{px(x)}" y1="{px(sy(m - sd))}" x2="{px(x)}" y2="{px(sy(m + sd))}" stroke="{c}"/>')
        r, stroke = (4.0, ' stroke="#000" stroke-width="1.2"') if p["estimator"] in on else (3.0, "")
        parts.append(
            f'<circle cx="{px(x)}" cy="{px(sy(m))}" r="{r}" fill="{c}"{stroke}><title>{esc(tip)}</title></circle>'
        )
        parts.append(f'<text x="{px(x + 6)}" y="{px(sy(m) - 4)}" class="tk2">{esc(p["estimator"])}</text>')
    ly = Y0 + 6
    for g, c in colors.items():
        parts.append(f'<circle cx="{X0 + W + 24}" cy="{ly}" r="4" fill="{c}"/>')
        parts.append(f'<text x="{X0 + W + 34}" y="{ly + 4}" class="lg">{esc(g)}</text>')
        ly += 16
    parts.append(f'<text x="{X0 + W + 20}" y="{ly + 10}" class="lg">outlined: on the frontier</text>')
    title = (
        f"{d['task']}: AUROC against compute ({d['n']} questions, {d['n_correct']} correct; K = {d['k_max']} samples; "
        f"mean over {d['settings']['n_seeds']} splits)"
    )
    return svg_document(X0 + W + 190, Y0 + H + 50, f"frontier {d['task']}", title, parts)


def write_frontier_figures(store: RunStore, doc: Mapping[str, Any], tasks: Sequence[str] | None = None) -> None:
    """Draw the frontier of each of ``tasks`` (default: every task of ``doc``) into the run directory."""
    for task in tasks or list(doc["tasks"]):
        store.write_text(figure_file(task), frontier_svg(doc["tasks"][task]))


def run_frontier(
    run_dir: str | os.PathLike[str] | RunStore, tasks: Sequence[str] | None = None, **kw: Any
) -> dict[str, Any]:
    """`tracecal.analysis.frontier.run_frontier` (same arguments, same document), then each task's figure."""
    store = run_dir if isinstance(run_dir, RunStore) else RunStore(run_dir)
    doc = analysis.run_frontier(store, tasks, **kw)
    write_frontier_figures(store, doc, tasks or list(doc["tasks"]))
    return doc


def _table_html(d: Mapping[str, Any]) -> str:
    d = analysis.with_nan(d)
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "estimator",
            "passes",
            "decode tokens",
            "forward passes",
            "CPU-s",
            "AUROC",
            "Δ AUROC vs TRACE+",
            "Brier",
            "frontier (CPU-s)",
        )
    )
    rows = []
    for p in sorted(d["points"], key=lambda p: (p["cpu_seconds"], p["estimator"])):
        on = "★" if p["estimator"] in d["frontier"]["cpu_seconds"] else ""
        cells = (
            p["estimator"],
            p["group"],
            f"{p['decode_tokens']:.3g}",
            f"{p['forward_passes']:.3g}",
            f"{p['cpu_seconds']:.3g}",
            f"{p['auroc']['mean']:.3f} ± {p['auroc']['sd']:.3f}",
            analysis.diff_cell(p, "auroc"),
            f"{p['brier']['mean']:.3f}",
            on,
        )
        rows.append("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def frontier_section(doc: Mapping[str, Any] | None) -> str:
    """The report's frontier section (empty without a document): per task its figure and table."""
    if not doc or not doc.get("tasks"):
        return ""
    body = []
    for task, d in doc["tasks"].items():
        body.append(f"<h3>{esc(task)}: {d['n']} of {d['n_run']} questions</h3>")
        body.append(frontier_svg(d))
        body.append(_table_html(d))
        if note := analysis.clock_note(d.get("clocks") or {}):
            body.append(f"<p>{esc(note.strip())}</p>")
    intro = (
        "<p>What one pass gives up against K sampled answers, per unit of compute (<code>tracecal frontier</code>): "
        "AUROC and Brier of each estimator (the protocol's split means; Δ: paired bootstrap against TRACE+) against "
        "its decode tokens, forward passes and CPU-seconds per answer (greedy pass included; k of K samples pay k/K "
        "of the samples pass).</p>"
    )
    return f'<section id="frontier"><h2>Cost–quality frontier</h2>{intro}{"".join(body)}</section>'
