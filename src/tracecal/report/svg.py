"""The report's figures as SVG documents: one drawing code for the HTML page and for ``--figures DIR``.

Every figure is one standalone ``<svg>`` document (its own ``<style>``, a white background, a title): the HTML
report inlines it as it is and `export_figures` writes the very same text to ``<kind>_<task>.svg``. Per task::

    reliability_<task>.svg     reliability diagram per estimator (small multiples), bin counts, ECE
    risk_coverage_<task>.svg   risk–coverage curves of the selected estimators, oracle and random
    histogram_<task>.svg       confidence of correct vs incorrect answers per estimator

and `tracecal.report.learning_curve` draws the learning curves with the same pieces (`svg_document`, `PALETTE`).

Why this path and not matplotlib for both (matplotlib drew the exported figures until now):

* speed: every figure of a synthetic 5,000-answer run (4 tasks × 24 estimators) is drawn here in about a tenth
  of a second, and the whole report renders in about 0.5 s (benchmarks/bench_report.py). Drawing the same
  figures with matplotlib took about 22 s (5.5 s per task, docs/benchmarks.md): the report would have gone
  from well under a second to next to its 30 s budget, and it grows with tasks × estimators;
* self-contained HTML with no network: plain SVG elements styled by a few CSS rules, no fonts, images or
  scripts to embed, nothing a Content-Security-Policy of ``default-src 'none'`` blocks, no per-document
  ``<defs>`` ids to keep unique when a dozen figures share one page;
* hover tooltips (``<title>`` on every bar and curve) with the exact numbers, which matplotlib does not emit;
* one code, one look, no plotting library: the file a paper uses is the figure the report shows. SVG is
  vector (it scales freely); a PNG, where one is needed, is one command away (``rsvg-convert``, Inkscape or
  a browser's screenshot).

All text goes through `html.escape`; numbers come from `tracecal.report.plotdata`.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from html import escape
from pathlib import Path

import numpy as np

from tracecal._outputs import InputPaths, atomic_write
from tracecal.report.plotdata import Curve, Hist, Reliability, TaskPlots

__all__ = [
    "reliability_svg",
    "histogram_svg",
    "risk_coverage_svg",
    "FIGURES",
    "export_figures",
    "figure_name",
    "safe_name",
    "PALETTE",
    "SVG_CSS",
    "XML_PROLOG",
    "svg_document",
    "esc",
    "px",
    "text_width",
    "axis_ticks",
    "keep_apart",
]

# matplotlib's tab10 followed by the light half of tab20 (distinct for up to 20 curves)
PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
    "#aec7e8",
    "#ffbb78",
    "#98df8a",
    "#ff9896",
    "#c5b0d5",
    "#c49c94",
    "#f7b6d2",
    "#c7c7c7",
    "#dbdb8d",
    "#9edae5",
)
BAR = "#4575b4"
OK = "#1a9850"
BAD = "#d73027"
XML_PROLOG = '<?xml version="1.0" encoding="UTF-8" standalone="no"?>\n'
SVG_CSS = (  # every rule under "svg": inlined in the report, these styles cannot reach the page's HTML
    'svg text { font-family: system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif; fill:#1d2330; }'
    " svg .ft { font-size:13px; font-weight:600; } svg .pt { font-size:11px; font-weight:600; }"
    " svg .ps { font-size:9.5px; fill:#5b6577; } svg .tk { font-size:8px; fill:#5b6577; }"
    " svg .tk2 { font-size:11px; fill:#5b6577; } svg .ax { font-size:10px; fill:#5b6577; } svg .lg { font-size:11px; }"
    " svg .ct { font-size:7px; fill:#333; } svg .ct.in { fill:#fff; }"
    " svg .frame { fill:none; stroke:#9aa3b2; stroke-width:0.8; } svg .grid { stroke:#e3e7ee; stroke-width:0.8; }"
    " svg .diag { stroke:#888; stroke-dasharray:3 3; stroke-width:0.8; }"
)

# small-multiple panel geometry (user units), panels per row, height of the figure's title row
PW, PH = 200, 196
X0, Y0, W, H = 30, 36, 160, 130
NCOLS = 6
TITLE_H = 24


def esc(x: object) -> str:
    """Text or an attribute value of an SVG element, XML-escaped (quotes included)."""
    return escape(str(x), quote=True)


def px(v: float) -> str:
    """A coordinate in pixels as written into the SVG (one decimal)."""
    return f"{v:.1f}"


def text_width(label: str, font_px: float) -> float:
    """An upper estimate of the width (px) of ``label`` drawn at ``font_px``: 0.32 em for ``. , : `` and a space,
    0.64 em for any other character (DejaVu Sans digits are 0.636 em wide, Arial's / Liberation's 0.556 em)."""
    return font_px * sum(0.32 if c in ".,: " else 0.64 for c in label)


def keep_apart(ticks: list[tuple[float, str]], font_px: float, gap_px: float = 4.0) -> list[tuple[float, str]]:
    """The ``(x position px, label)`` ticks, left to right, that can be drawn centred on their positions with at
    least ``gap_px`` between neighbours' `text_width` boxes: a tick too close to the last one kept is dropped."""
    kept: list[tuple[float, str]] = []
    for x, label in sorted(ticks):
        half = text_width(label, font_px) / 2
        if kept and x - half < kept[-1][0] + text_width(kept[-1][1], font_px) / 2 + gap_px:
            continue
        kept.append((x, label))
    return kept


def axis_ticks(lo: float, hi: float, width_px: float, font_px: float, gap_px: float = 4.0) -> list[tuple[float, str]]:
    """``(value, label)`` ticks of an axis from ``lo`` to ``hi`` drawn ``width_px`` wide: the multiples of the finest
    step m·10^k (m = 1, 2, 2.5, 5) whose labels, centred on their ticks, keep ``gap_px`` apart (`text_width` at
    ``font_px``); at least one tick (``lo``) even when no two labels fit. Labels have the step's decimals."""
    span = hi - lo
    if not (math.isfinite(span) and span > 0 and width_px > 0):
        return [(lo, f"{lo:g}")]
    prev: list[tuple[float, str]] = []
    finest = span * (0.64 * font_px + gap_px) / width_px  # no step below this fits labels of even one character
    for k in range(math.floor(math.log10(finest)), math.floor(math.log10(span)) + 2):
        for m in (1.0, 2.0, 2.5, 5.0):
            step = m * 10.0**k
            decimals = max(0, -k + (1 if m == 2.5 else 0))
            first, last = math.ceil(lo / step - 1e-9), math.floor(hi / step + 1e-9)
            ticks = [(float(t), t) for t in (f"{i * step:.{decimals}f}" for i in range(first, last + 1))]
            if len(ticks) < 2:  # one label (or none in range: the previous step's first) cannot overlap
                return ticks or prev[:1] or [(lo, f"{lo:g}")]
            if step / span * width_px >= max(text_width(t, font_px) for _, t in ticks) + gap_px:
                return ticks
            prev = ticks
    return prev[:1] or [(lo, f"{lo:g}")]


def safe_name(s: str) -> str:
    """A file-name-safe version of ``s`` (letters, digits, ``._-``)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", s).strip("_") or "x"


def svg_document(width: float, height: float, label: str, title: str, body: list[str]) -> str:
    """A standalone SVG document: the same text inlined in the report and written by `export_figures`."""
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="figure" width="{px(width)}" height="{px(height)}" '
        f'viewBox="0 0 {px(width)} {px(height)}" role="img" aria-label="{esc(label)}">'
        f'<style>{SVG_CSS}</style><rect width="100%" height="100%" fill="#fff"/>'
        f'<text x="8" y="17" class="ft">{esc(title)}</text>{"".join(body)}</svg>'
    )


def _grid(panels: list[str], label: str, title: str) -> str:
    """Small multiples: ``NCOLS`` panels a row under the figure's title."""
    ncols = max(1, min(NCOLS, len(panels)))
    nrows = max(1, math.ceil(len(panels) / ncols))
    placed = [
        p.replace("<svg ", f'<svg x="{(i % ncols) * PW}" y="{TITLE_H + (i // ncols) * PH}" ', 1)
        for i, p in enumerate(panels)
    ]
    return svg_document(ncols * PW, TITLE_H + nrows * PH, label, title, placed)


def _frame(title: str, subtitle: str, ylabel_top: str = "1", ylabel_mid: str = "0.5") -> list[str]:
    parts = [
        f'<text x="{PW / 2}" y="12" text-anchor="middle" class="pt">{esc(title)}</text>',
        f'<text x="{PW / 2}" y="25" text-anchor="middle" class="ps">{esc(subtitle)}</text>',
        f'<rect x="{X0}" y="{Y0}" width="{W}" height="{H}" class="frame"/>',
    ]
    for frac, lab in ((0.0, "0"), (0.5, "0.5"), (1.0, "1")):
        x = X0 + frac * W
        parts.append(f'<text x="{px(x)}" y="{Y0 + H + 11}" text-anchor="middle" class="tk">{lab}</text>')
    for frac, lab in ((0.0, "0"), (0.5, ylabel_mid), (1.0, ylabel_top)):
        y = Y0 + (1 - frac) * H
        parts.append(f'<text x="{X0 - 3}" y="{px(y + 3)}" text-anchor="end" class="tk">{esc(lab)}</text>')
    parts.append(f'<text x="{X0 + W / 2}" y="{PH - 4}" text-anchor="middle" class="ax">confidence</text>')
    return parts


def _panel(body: list[str], label: str) -> str:
    return (
        f'<svg width="{PW}" height="{PH}" viewBox="0 0 {PW} {PH}" class="panel" role="img" '
        f'aria-label="{esc(label)}">{"".join(body)}</svg>'
    )


def _reliability_panel(r: Reliability, n_bins: int) -> str:
    if r.bins is None:
        return _panel(_frame(r.estimator, "no evaluation answers"), f"reliability {r.estimator}")
    b = r.bins
    parts = _frame(r.estimator, f"ECE {r.ece:.3f} · n={r.n}")
    parts.append(
        f'<line x1="{X0}" y1="{Y0 + H}" x2="{X0 + W}" y2="{Y0}" class="diag"><title>perfect calibration</title></line>'
    )
    bw = W / n_bins
    for lo, hi, c, conf, acc in zip(b.lower, b.upper, b.count, b.confidence, b.accuracy, strict=True):
        if c <= 0:
            continue
        x = X0 + lo * W
        h = acc * H
        tip = f"confidence {lo:.2f}–{hi:.2f}: {int(c)} answers, accuracy {acc:.3f}, mean confidence {conf:.3f}"
        parts.append(
            f'<rect x="{px(x + 0.5)}" y="{px(Y0 + H - h)}" width="{px(bw - 1)}" height="{px(h)}" '
            f'fill="{BAR}" fill-opacity="0.8"><title>{esc(tip)}</title></rect>'
        )
        parts.append(f'<circle cx="{px(X0 + conf * W)}" cy="{px(Y0 + H - h)}" r="1.8" fill="#222"/>')
        inside = h > 14  # the count goes inside the top of a tall bar, above a short one
        ty = Y0 + H - h + (8 if inside else -2)
        cls = "ct in" if inside else "ct"
        parts.append(f'<text x="{px(x + bw / 2)}" y="{px(ty)}" text-anchor="middle" class="{cls}">{int(c)}</text>')
    return _panel(parts, f"reliability {r.estimator}")


def reliability_svg(tp: TaskPlots) -> str:
    """Reliability diagrams of every estimator of a task: one document, a grid of small panels."""
    panels = [_reliability_panel(r, tp.n_bins) for r in tp.reliability]
    return _grid(panels, f"{tp.task}: reliability diagrams", f"{tp.task}: reliability (seed-0 evaluation split)")


def _stairs(counts: np.ndarray, edges: np.ndarray, top: float) -> str:
    pts = [f"{px(X0)},{px(Y0 + H)}"]
    for c, lo, hi in zip(counts, edges[:-1], edges[1:], strict=True):
        y = Y0 + H - (c / top) * H
        pts.append(f"{px(X0 + lo * W)},{px(y)}")
        pts.append(f"{px(X0 + hi * W)},{px(y)}")
    pts.append(f"{px(X0 + W)},{px(Y0 + H)}")
    return " ".join(pts)


def _histogram_panel(hst: Hist) -> str:
    top = max(1, int(max(hst.correct.max(initial=0), hst.wrong.max(initial=0))))
    parts = _frame(
        hst.estimator,
        f"{int(hst.correct.sum())} correct · {int(hst.wrong.sum())} incorrect"
        if hst.correct.sum() + hst.wrong.sum()
        else "no evaluation answers",
        ylabel_top=str(top),
        ylabel_mid="",
    )
    for counts, color, name in ((hst.correct, OK, "correct"), (hst.wrong, BAD, "incorrect")):
        if counts.sum() == 0:
            continue
        parts.append(
            f'<polygon points="{_stairs(counts, hst.edges, top)}" fill="{color}" fill-opacity="0.3" '
            f'stroke="{color}" stroke-width="1"><title>{name}: {int(counts.sum())} answers</title></polygon>'
        )
    return _panel(parts, f"histogram {hst.estimator}")


def histogram_svg(tp: TaskPlots) -> str:
    """Confidence histograms (correct green, incorrect red) of every estimator of a task, one document."""
    panels = [_histogram_panel(h) for h in tp.hists]
    return _grid(panels, f"{tp.task}: confidence histograms", f"{tp.task}: confidence of correct and incorrect answers")


def _polyline(c: Curve, box: tuple[float, float, float, float], color: str, dash: str, width: float) -> str:
    x0, y0, w, h = box
    pts = " ".join(
        f"{px(x0 + cv * w)},{px(y0 + (1 - min(max(rv, 0.0), 1.0)) * h)}"
        for cv, rv in zip(c.coverage.tolist(), c.risk.tolist(), strict=True)
    )
    tip = f"{c.label}: AURC {c.aurc:.3f}" if c.kind == "estimator" else c.label
    da = f' stroke-dasharray="{dash}"' if dash else ""
    return (
        f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="{width}"{da}>'
        f"<title>{esc(tip)}</title></polyline>"
    )


def risk_coverage_svg(tp: TaskPlots) -> str:
    """All risk–coverage curves of a task on one chart with a legend (AURC per estimator), one document."""
    cw, ch = 860, 400
    box = x0, y0, w, h = 56, TITLE_H + 12, 520, 320
    parts = [
        f'<rect x="{x0}" y="{y0}" width="{w}" height="{h}" class="frame"/>',
        f'<text x="{x0 + w / 2}" y="{y0 + h + 32}" text-anchor="middle" class="ax">'
        "coverage (share of answers kept, most confident first)</text>",
        f'<text x="14" y="{y0 + h / 2}" text-anchor="middle" class="ax" transform="rotate(-90 14 {y0 + h / 2})">'
        "risk (error rate among kept)</text>",
    ]
    for frac in (0.0, 0.25, 0.5, 0.75, 1.0):
        gx, gy = x0 + frac * w, y0 + (1 - frac) * h
        parts.append(f'<line x1="{px(gx)}" y1="{y0}" x2="{px(gx)}" y2="{y0 + h}" class="grid"/>')
        parts.append(f'<line x1="{x0}" y1="{px(gy)}" x2="{x0 + w}" y2="{px(gy)}" class="grid"/>')
        parts.append(f'<text x="{px(gx)}" y="{y0 + h + 14}" text-anchor="middle" class="tk2">{frac:g}</text>')
        parts.append(f'<text x="{x0 - 5}" y="{px(gy + 4)}" text-anchor="end" class="tk2">{frac:g}</text>')
    legend: list[tuple[str, str, str]] = []
    for c in tp.references:
        color, dash = ("#444", "2 3") if c.kind == "oracle" else ("#999", "5 4")
        parts.append(_polyline(c, box, color, dash, 1.2))
        legend.append((color, dash, c.label))
    for i, c in enumerate(tp.curves):
        color, dash = PALETTE[i % len(PALETTE)], ("" if i < len(PALETTE) else "6 3")
        parts.append(_polyline(c, box, color, dash, 2.0 if i < 2 else 1.3))
        legend.append((color, dash, f"{c.label} (AURC {c.aurc:.3f})" if math.isfinite(c.aurc) else c.label))
    ly = y0 + 10
    for color, dash, label in legend:
        da = f' stroke-dasharray="{dash}"' if dash else ""
        parts.append(
            f'<line x1="{x0 + w + 16}" y1="{ly}" x2="{x0 + w + 40}" y2="{ly}" stroke="{color}" stroke-width="2"{da}/>'
        )
        parts.append(f'<text x="{x0 + w + 46}" y="{ly + 4}" class="lg">{esc(label)}</text>')
        ly += 15
    title = f"{tp.task}: risk–coverage (seed-0 evaluation split)"
    return svg_document(cw, max(ch, ly + 10), f"risk-coverage {tp.task}", title, parts)


# (file-name kind, drawing) of every figure of a task, in the report's order
FIGURES: tuple[tuple[str, Callable[[TaskPlots], str]], ...] = (
    ("reliability", reliability_svg),
    ("risk_coverage", risk_coverage_svg),
    ("histogram", histogram_svg),
)


def figure_name(kind: str, task: str) -> str:
    """The file name (without ``.svg``) of a figure: ``<kind>_<task>`` made file-name safe."""
    return f"{kind}_{safe_name(task)}"


def _text_writer(text: str) -> Callable[[str], object]:
    """A writer for `tracecal._outputs.atomic_write` of ``text`` (UTF-8)."""
    return lambda name: Path(name).write_text(text, encoding="utf-8")


def export_figures(plots: list[TaskPlots], directory: str | os.PathLike[str], inputs: InputPaths = ()) -> list[Path]:
    """Write every figure of every task into ``directory`` as ``<kind>_<task>.svg`` (the report's documents), each
    with `tracecal._outputs.atomic_write` (never over one of ``inputs``)."""
    directory = Path(directory)
    written: list[Path] = []
    for tp in plots:
        for kind, draw in FIGURES:
            path = directory / f"{figure_name(kind, tp.task)}.svg"
            atomic_write(path, _text_writer(XML_PROLOG + draw(tp)), inputs, "--figures")
            written.append(path)
    return written
