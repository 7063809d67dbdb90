"""The figure the report opens with: which estimator wins where — AUROC of every estimator on every task, with
intervals, one standalone SVG document (drawn like `tracecal.report.svg`: escaped text, no scripts, no fonts).

One panel per task (and the average over tasks when the run has one), one row per estimator, sorted by the
average AUROC (else the first task's), best first. In each panel:

* a dot at the estimator's mean AUROC over the splits (raw scores, ``results.json``);
* its bar: when the run holds paired comparisons (``statistics.comparisons``), the percentile interval of the
  paired bootstrap difference to the task's best non-TRACE estimator (◆, the dashed line), laid on the AUROC
  axis as baseline mean + [lo, hi] — a bar that does not cross the dashed line is a significant difference;
  without comparisons, mean ± 1 sd over the splits;
* the colour: significantly better than the baseline (green), worse (red), not significantly different (grey),
  the baseline itself (black diamond), no comparison (blue);
* the task's best mean AUROC ringed, its name and value in the panel's subtitle; every dot has a tooltip.

The report inlines the document and ``figures_dir`` receives it as ``overview.svg`` (`OVERVIEW_FILE`).
"""

from __future__ import annotations

import math
from typing import Any

from tracecal.report.html import num
from tracecal.report.svg import BAD, BAR, OK, TITLE_H, axis_ticks, esc, svg_document

__all__ = ["overview_svg", "overview_order", "OVERVIEW_FILE"]

OVERVIEW_FILE = "overview.svg"
ROW_H, PANEL_W, HEAD_H, FOOT_H, GAP = 16, 170, 34, 52, 14
NS, BASE = "#8a93a3", "#1d2330"
TICK_FONT, TICK_GAP = (
    8.0,
    6.0,
)  # the px size of the axis labels (class "tk" of `tracecal.report.svg.SVG_CSS`), px between
COLOURS = {"better": OK, "worse": BAD, "n.s.": NS, "n/a": BAR, "baseline": BASE, "none": BAR, "unranked": NS}
NAMES = {
    "better": "better than the baseline",
    "worse": "worse than the baseline",
    "n.s.": "not significantly different",
    "baseline": "the best non-TRACE estimator (baseline)",
    "none": "± 1 sd over splits (no comparisons)",
    "unranked": "± 1 sd over splits; too few answers to compare or rank",
}


def _auroc(metrics: dict[str, Any], task: str, est: str) -> tuple[float, float]:
    m = ((metrics.get(task) or {}).get(est) or {}).get("auroc") or {}
    return num(m.get("mean")), num(m.get("sd"))


def overview_order(results: dict[str, Any], estimators: list[str], tasks: list[str]) -> list[str]:
    """``estimators`` sorted by mean AUROC on the average over tasks (else the first task), best first, those
    without one last (stable)."""
    metrics = results.get("metrics") or {}
    ref = "average" if "average" in metrics else (tasks[0] if tasks else "")

    def key(est: str) -> float:
        v = _auroc(metrics, ref, est)[0]
        return -v if math.isfinite(v) else math.inf

    return sorted(estimators, key=key)


def _cell(results: dict[str, Any], task: str, est: str, ranked: bool = True) -> tuple[float, float, float, str, str]:
    """(mean, bar low, bar high, colour kind, tooltip text) of one estimator on one task (not ``ranked``: ± 1 sd,
    grey, no comparison)."""
    mean, sd = _auroc(results.get("metrics") or {}, task, est)
    comps = (results.get("statistics") or {}).get("comparisons") or {}
    comp = (comps.get(task) or {}) if ranked else {}
    base = comp.get("baseline")
    level = num(comp.get("level"))
    tip = f"{est} on {task}: AUROC {mean:.3f}"
    if base and est == base:
        return mean, math.nan, math.nan, "baseline", tip + " — the best non-TRACE estimator (baseline)"
    c = ((comp.get("estimators") or {}).get(est) or {}).get("auroc") or {}
    base_mean = _auroc(results.get("metrics") or {}, task, str(base))[0] if base else math.nan
    lo, hi = num(c.get("lo")), num(c.get("hi"))
    if base and math.isfinite(base_mean) and math.isfinite(lo) and math.isfinite(hi):
        kind = str(c.get("verdict", "n/a"))
        tip += f"; Δ to {base} {num(c.get('diff')):+.3f}, {level:.0%} paired interval [{lo:+.3f}, {hi:+.3f}] ({kind})"
        return mean, base_mean + lo, base_mean + hi, kind if kind in COLOURS else "n/a", tip
    ok, kind = math.isfinite(sd), "none" if ranked else "unranked"
    return mean, mean - sd if ok else math.nan, mean + sd if ok else math.nan, kind, tip + f" ± {sd:.3f} (sd)"


def _scale(cells: list[tuple[float, float, float, str, str]]) -> tuple[float, float]:
    vals = [v for c in cells for v in c[:3] if math.isfinite(v)]
    lo, hi = (min(vals), max(vals)) if vals else (0.4, 0.6)
    lo, hi = min(lo, 0.5), max(hi, 0.5)
    pad = max((hi - lo) * 0.05, 0.01)
    return max(0.0, math.floor((lo - pad) * 20) / 20), min(1.0, math.ceil((hi + pad) * 20) / 20)


def _panel(
    x0: float, task: str, rows: list[tuple[str, tuple]], scale: tuple[float, float], n_rows: int, ranked: bool = True
) -> list[str]:
    """One task's panel at horizontal offset ``x0``: grid, baseline line, bars and dots of every row; the best ringed
    and named unless not ``ranked`` (a task too small to rank: subtitle "not ranked", nothing ringed)."""
    lo, hi = scale
    w = PANEL_W - 2 * GAP

    def px(v: float) -> float:
        return x0 + GAP + (min(max(v, lo), hi) - lo) / (hi - lo) * w

    top, bottom = TITLE_H + HEAD_H, TITLE_H + HEAD_H + n_rows * ROW_H
    fin = [(c[0], est) for est, c in rows if math.isfinite(c[0])]
    best = max(fin)[0] if fin and ranked else math.nan
    winner = next((est for v, est in sorted(fin, key=lambda p: -p[0]) if v == best), "—")
    sub = (f"best: {winner} {best:.3f}" if ranked else "not ranked: too few answers") if fin else "no AUROC"
    parts = [
        f'<text x="{x0 + PANEL_W / 2:.1f}" y="{TITLE_H + 12}" text-anchor="middle" class="pt">{esc(task)}</text>',
        f'<text x="{x0 + PANEL_W / 2:.1f}" y="{TITLE_H + 25}" text-anchor="middle" class="ps">{esc(sub)}</text>',
        f'<rect x="{x0 + GAP:.1f}" y="{top}" width="{w}" height="{n_rows * ROW_H}" class="frame"/>',
    ]
    for v, label in axis_ticks(lo, hi, w, TICK_FONT, TICK_GAP):
        parts.append(f'<line x1="{px(v):.1f}" y1="{top}" x2="{px(v):.1f}" y2="{bottom}" class="grid"/>')
        parts.append(f'<text x="{px(v):.1f}" y="{bottom + 11}" text-anchor="middle" class="tk tick">{label}</text>')
    base = next((c[0] for _, c in rows if c[3] == "baseline"), math.nan)
    if math.isfinite(base):
        parts.append(f'<line x1="{px(base):.1f}" y1="{top}" x2="{px(base):.1f}" y2="{bottom}" class="diag"/>')
    for i, (_, (mean, blo, bhi, kind, tip)) in enumerate(rows):
        y = top + (i + 0.5) * ROW_H
        colour = COLOURS[kind]
        if math.isfinite(blo) and math.isfinite(bhi):
            parts.append(
                f'<line x1="{px(blo):.1f}" y1="{y:.1f}" x2="{px(bhi):.1f}" y2="{y:.1f}" stroke="{colour}" '
                'stroke-width="2" stroke-opacity="0.55"/>'
            )
        if not math.isfinite(mean):
            parts.append(f'<text x="{x0 + GAP + 4:.1f}" y="{y + 3:.1f}" class="tk">n/a<title>{esc(tip)}</title></text>')
            continue
        ring = ' stroke="#111" stroke-width="1.6"' if mean == best else ""
        x = px(mean)
        shape = (
            f'<path d="M{x:.1f},{y - 4.5:.1f}l4.5,4.5l-4.5,4.5l-4.5,-4.5z" fill="{colour}"{ring}>'
            if kind == "baseline"
            else f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{4 if mean == best else 3.2}" fill="{colour}"{ring}>'
        )
        parts.append(shape + f"<title>{esc(tip)}</title>" + ("</path>" if kind == "baseline" else "</circle>"))
    return parts


def _legend(y: float, kinds: set[str], x: float = 8) -> list[str]:
    parts = []
    for kind in ("better", "n.s.", "worse", "baseline", "none", "unranked"):
        if kind not in kinds:
            continue
        parts.append(f'<circle cx="{x + 4:.1f}" cy="{y - 3.5:.1f}" r="3.5" fill="{COLOURS[kind]}"/>')
        parts.append(f'<text x="{x + 12:.1f}" y="{y:.1f}" class="lg">{esc(NAMES[kind])}</text>')
        x += 22 + 6.2 * len(NAMES[kind])
    return parts


def overview_svg(results: dict[str, Any], tasks: list[str], estimators: list[str], ranked: bool = True) -> str:
    """The overview figure (module docstring) of a run's results for ``tasks`` × ``estimators``; '' when no
    estimator has an AUROC on any task. Not ``ranked`` (tasks too small to rank): no average panel, no best."""
    metrics = results.get("metrics") or {}
    panels = list(tasks) + (["average"] if "average" in metrics and len(tasks) > 1 and ranked else [])
    order = overview_order(results, [e for e in estimators if any(e in (metrics.get(t) or {}) for t in panels)], tasks)
    grid = {t: [(est, _cell(results, t, est, ranked)) for est in order] for t in panels}
    cells = [c for rows in grid.values() for _, c in rows]
    if not order or not any(math.isfinite(c[0]) for c in cells):
        return ""
    scale = _scale(cells)
    label_w = min(230, max(90, 12 + 6.4 * max(len(e) for e in order)))
    width, top = label_w + PANEL_W * len(panels) + 8, TITLE_H + HEAD_H
    height = top + len(order) * ROW_H + FOOT_H
    body: list[str] = []
    for i, est in enumerate(order):
        y = top + i * ROW_H
        if i % 2 == 0:
            body.append(f'<rect x="4" y="{y}" width="{width - 8:.1f}" height="{ROW_H}" fill="#f4f6f9"/>')
        body.append(f'<text x="{label_w - 4:.1f}" y="{y + 11.5:.1f}" text-anchor="end" class="lg">{esc(est)}</text>')
    for k, t in enumerate(panels):
        body += _panel(label_w + k * PANEL_W, t, grid[t], scale, len(order), ranked)
    body.append(
        f'<text x="{label_w + PANEL_W * len(panels) / 2:.1f}" y="{height - 28}" text-anchor="middle" class="ax">'
        "AUROC of the raw scores (mean over splits; higher is better)</text>"
    )
    body += _legend(height - 8, {c[3] for c in cells if math.isfinite(c[0])})
    title = "Which estimator wins where: AUROC per task, best first" if ranked else "AUROC on tasks too small to rank"
    return svg_document(width, height, "overview: AUROC of every estimator on every task", title, body)
