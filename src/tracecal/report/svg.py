"""Lightweight inline SVG drawings of the report's figures (milliseconds for 24 estimators × 4 tasks).

Panels are small standalone ``<svg>`` elements laid out by CSS grid; every bar and curve carries a
``<title>`` tooltip with its exact numbers. All text goes through `html.escape`.
"""

from __future__ import annotations

import math
from html import escape

import numpy as np

from tracecal.report.plotdata import Curve, Hist, Reliability, TaskPlots

__all__ = ["reliability_svg", "histogram_svg", "risk_coverage_svg", "PALETTE"]

# matplotlib's tab10 followed by the light half of tab20 (distinct for up to 20 curves)
PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
    "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#c7c7c7", "#dbdb8d", "#9edae5",
)  # fmt: skip
BAR = "#4575b4"
OK = "#1a9850"
BAD = "#d73027"

# panel geometry (viewBox units)
PW, PH = 200, 196
X0, Y0, W, H = 30, 36, 160, 130


def _t(x: object) -> str:
    return escape(str(x), quote=True)


def _f(v: float) -> str:
    return f"{v:.1f}"


def _frame(title: str, subtitle: str, ylabel_top: str = "1", ylabel_mid: str = "0.5") -> list[str]:
    parts = [
        f'<text x="{PW / 2}" y="12" text-anchor="middle" class="pt">{_t(title)}</text>',
        f'<text x="{PW / 2}" y="25" text-anchor="middle" class="ps">{_t(subtitle)}</text>',
        f'<rect x="{X0}" y="{Y0}" width="{W}" height="{H}" class="frame"/>',
    ]
    for frac, lab in ((0.0, "0"), (0.5, "0.5"), (1.0, "1")):
        x = X0 + frac * W
        parts.append(f'<text x="{_f(x)}" y="{Y0 + H + 11}" text-anchor="middle" class="tk">{lab}</text>')
    for frac, lab in ((0.0, "0"), (0.5, ylabel_mid), (1.0, ylabel_top)):
        y = Y0 + (1 - frac) * H
        parts.append(f'<text x="{X0 - 3}" y="{_f(y + 3)}" text-anchor="end" class="tk">{_t(lab)}</text>')
    parts.append(f'<text x="{X0 + W / 2}" y="{PH - 4}" text-anchor="middle" class="ax">confidence</text>')
    return parts


def _panel(body: list[str], label: str) -> str:
    return (
        f'<svg class="panel" viewBox="0 0 {PW} {PH}" role="img" aria-label="{_t(label)}" '
        f'xmlns="http://www.w3.org/2000/svg">{"".join(body)}</svg>'
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
            f'<rect x="{_f(x + 0.5)}" y="{_f(Y0 + H - h)}" width="{_f(bw - 1)}" height="{_f(h)}" '
            f'fill="{BAR}" fill-opacity="0.8"><title>{_t(tip)}</title></rect>'
        )
        parts.append(f'<circle cx="{_f(X0 + conf * W)}" cy="{_f(Y0 + H - h)}" r="1.8" fill="#222"/>')
        inside = h > 14  # the count goes inside the top of a tall bar, above a short one
        ty = Y0 + H - h + (8 if inside else -2)
        cls = "ct in" if inside else "ct"
        parts.append(f'<text x="{_f(x + bw / 2)}" y="{_f(ty)}" text-anchor="middle" class="{cls}">{int(c)}</text>')
    return _panel(parts, f"reliability {r.estimator}")


def reliability_svg(tp: TaskPlots) -> str:
    """Reliability diagrams of every estimator of a task, as a grid of small SVG panels."""
    return '<div class="panels">' + "".join(_reliability_panel(r, tp.n_bins) for r in tp.reliability) + "</div>"


def _stairs(counts: np.ndarray, edges: np.ndarray, top: float) -> str:
    pts = [f"{_f(X0)},{_f(Y0 + H)}"]
    for c, lo, hi in zip(counts, edges[:-1], edges[1:], strict=True):
        y = Y0 + H - (c / top) * H
        pts.append(f"{_f(X0 + lo * W)},{_f(y)}")
        pts.append(f"{_f(X0 + hi * W)},{_f(y)}")
    pts.append(f"{_f(X0 + W)},{_f(Y0 + H)}")
    return " ".join(pts)


def _histogram_panel(hst: Hist) -> str:
    top = max(1, int(max(hst.correct.max(initial=0), hst.wrong.max(initial=0))))
    parts = _frame(
        hst.estimator,
        f"{int(hst.correct.sum())} correct · {int(hst.wrong.sum())} incorrect",
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
    """Confidence histograms (correct green, incorrect red) of every estimator of a task."""
    return '<div class="panels">' + "".join(_histogram_panel(h) for h in tp.hists) + "</div>"


def risk_coverage_svg(tp: TaskPlots) -> str:
    """All risk–coverage curves of a task on one chart with a legend (AURC per estimator)."""
    cw, ch = 860, 380
    x0, y0, w, h = 56, 16, 520, 320
    parts = [
        f'<rect x="{x0}" y="{y0}" width="{w}" height="{h}" class="frame"/>',
        f'<text x="{x0 + w / 2}" y="{ch - 6}" text-anchor="middle" class="ax">'
        "coverage (share of answers kept, most confident first)</text>",
        f'<text x="14" y="{y0 + h / 2}" text-anchor="middle" class="ax" transform="rotate(-90 14 {y0 + h / 2})">'
        "risk (error rate among kept)</text>",
    ]
    for frac in (0.0, 0.25, 0.5, 0.75, 1.0):
        gx, gy = x0 + frac * w, y0 + (1 - frac) * h
        parts.append(f'<line x1="{_f(gx)}" y1="{y0}" x2="{_f(gx)}" y2="{y0 + h}" class="grid"/>')
        parts.append(f'<line x1="{x0}" y1="{_f(gy)}" x2="{x0 + w}" y2="{_f(gy)}" class="grid"/>')
        parts.append(f'<text x="{_f(gx)}" y="{y0 + h + 14}" text-anchor="middle" class="tk2">{frac:g}</text>')
        parts.append(f'<text x="{x0 - 5}" y="{_f(gy + 4)}" text-anchor="end" class="tk2">{frac:g}</text>')

    def poly(c: Curve, color: str, dash: str, width: float) -> str:
        pts = " ".join(
            f"{_f(x0 + cv * w)},{_f(y0 + (1 - min(max(rv, 0.0), 1.0)) * h)}"
            for cv, rv in zip(c.coverage.tolist(), c.risk.tolist(), strict=True)
        )
        tip = f"{c.label}: AURC {c.aurc:.3f}" if c.kind == "estimator" else c.label
        da = f' stroke-dasharray="{dash}"' if dash else ""
        return (
            f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="{width}"{da}>'
            f"<title>{_t(tip)}</title></polyline>"
        )

    legend: list[tuple[str, str, str]] = []
    ly = y0 + 10
    for c in tp.references:
        color, dash = ("#444", "2 3") if c.kind == "oracle" else ("#999", "5 4")
        parts.append(poly(c, color, dash, 1.2))
        legend.append((color, dash, c.label))
    for i, c in enumerate(tp.curves):
        color = PALETTE[i % len(PALETTE)]
        dash = "" if i < len(PALETTE) else "6 3"
        parts.append(poly(c, color, dash, 2.0 if i < 2 else 1.3))
        aurc = f"{c.aurc:.3f}" if math.isfinite(c.aurc) else "—"
        legend.append((color, dash, f"{c.label} (AURC {aurc})"))
    for color, dash, label in legend:
        da = f' stroke-dasharray="{dash}"' if dash else ""
        parts.append(
            f'<line x1="{x0 + w + 16}" y1="{ly}" x2="{x0 + w + 40}" y2="{ly}" stroke="{color}" stroke-width="2"{da}/>'
        )
        parts.append(f'<text x="{x0 + w + 46}" y="{ly + 4}" class="lg">{_t(label)}</text>')
        ly += 15
    ch = max(ch, ly + 10)
    return (
        f'<svg class="chart" viewBox="0 0 {cw} {ch}" role="img" aria-label="risk-coverage {_t(tp.task)}" '
        f'xmlns="http://www.w3.org/2000/svg">{"".join(parts)}</svg>'
    )
