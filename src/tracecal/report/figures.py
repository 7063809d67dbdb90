"""Publication figures (``--figures DIR``): the report's plots as PNG and SVG files, drawn with matplotlib.

Uses matplotlib's object API with the Agg canvas (no pyplot, no global backend switch). The numbers
are the same `TaskPlots` the HTML's inline SVG drawings use. Per task::

    reliability_<task>.{png,svg}     reliability diagram per estimator (small multiples), bin counts, ECE
    risk_coverage_<task>.{png,svg}   risk–coverage curves of the selected estimators, oracle and random
    histogram_<task>.{png,svg}       confidence of correct vs incorrect answers per estimator
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import TYPE_CHECKING

from tracecal.report.plotdata import TaskPlots
from tracecal.report.svg import BAD, BAR, OK, PALETTE

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["safe_name", "reliability_figure", "histogram_figure", "risk_coverage_figure", "export_figures"]

NCOLS = 6
PAPER_DPI = 200


def safe_name(s: str) -> str:
    """A file-name-safe version of ``s`` (letters, digits, ``._-``)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", s).strip("_") or "x"


def _grid(n: int, ylabel: str, title: str, panel_h: float = 2.0) -> tuple[Figure, list[Axes]]:
    """``n`` panels sharing both axes, ``NCOLS`` per row, labels on the outer panels (fixed margins: fast)."""
    from matplotlib.figure import Figure

    n = max(n, 1)
    ncols = min(NCOLS, n)
    nrows = math.ceil(n / ncols)
    height = nrows * panel_h + 0.7
    fig = Figure(figsize=(ncols * 2.0 + 0.4, height))
    axes = fig.subplots(nrows, ncols, sharex=True, sharey=True, squeeze=False).ravel().tolist()
    fig.subplots_adjust(left=0.5 / (ncols * 2.0 + 0.4), right=0.99, bottom=0.45 / height, top=1 - 0.5 / height,
                        wspace=0.12, hspace=0.42)  # fmt: skip
    fig.suptitle(title, fontsize=9, y=1 - 0.12 / height)
    for ax in axes[n:]:
        ax.set_visible(False)
    for i, ax in enumerate(axes[:n]):
        ax.tick_params(labelsize=6, length=2, pad=1)
        if i % ncols == 0:
            ax.set_ylabel(ylabel, fontsize=7)
        if i + ncols >= n:  # nothing visible below: show the x axis here
            ax.xaxis.set_tick_params(labelbottom=True)
            ax.set_xlabel("confidence", fontsize=7)
    axes[0].set_xlim(0, 1)
    axes[0].set_xticks([0, 0.5, 1])
    return fig, axes[:n]


def reliability_figure(tp: TaskPlots) -> Figure:
    """Reliability diagrams (bin accuracy vs confidence, bin counts above bars, ECE) per estimator."""
    fig, axes = _grid(len(tp.reliability), "accuracy", f"{tp.task}: reliability (seed-0 evaluation split)")
    axes[0].set_ylim(0, 1.0)
    axes[0].set_yticks([0, 0.5, 1])
    width = 1.0 / tp.n_bins
    for ax, r in zip(axes, tp.reliability, strict=False):
        ax.plot([0, 1], [0, 1], ls="--", lw=0.7, color="#555555", zorder=3)
        if r.bins is None:
            ax.set_title(f"{r.estimator}\nno evaluation answers", fontsize=7, pad=2)
            continue
        b = r.bins
        nz = b.count > 0
        ax.bar(b.lower[nz], b.accuracy[nz], width=width, align="edge", color=BAR, alpha=0.8, edgecolor="white",
               linewidth=0.4)  # fmt: skip
        ax.plot(b.confidence[nz], b.accuracy[nz], "o", ms=2, color="#222222")
        for lo, acc, c in zip(b.lower[nz], b.accuracy[nz], b.count[nz], strict=True):
            inside = acc > 0.12  # the count goes inside the top of a tall bar, above a short one
            ax.text(lo + width / 2, acc - 0.015 if inside else acc + 0.015, str(int(c)), ha="center",
                    va="top" if inside else "bottom", fontsize=4.5, color="white" if inside else "black",
                    zorder=4)  # fmt: skip
        ax.set_title(f"{r.estimator}\nECE {r.ece:.3f} · n={r.n}", fontsize=7, pad=2)
    return fig


def histogram_figure(tp: TaskPlots) -> Figure:
    """Histograms of calibrated confidence, correct (green) vs incorrect (red), per estimator."""
    fig, axes = _grid(len(tp.hists), "answers", f"{tp.task}: confidence of correct and incorrect answers", 1.7)
    for ax, hst in zip(axes, tp.hists, strict=False):
        for counts, color in ((hst.correct, OK), (hst.wrong, BAD)):
            ax.stairs(counts, hst.edges, fill=True, alpha=0.3, color=color)
            ax.stairs(counts, hst.edges, color=color, lw=0.8)
        ax.set_title(f"{hst.estimator}\n{int(hst.correct.sum())} correct · {int(hst.wrong.sum())} incorrect",
                     fontsize=7, pad=2)  # fmt: skip
    return fig


def risk_coverage_figure(tp: TaskPlots) -> Figure:
    """Risk–coverage curves on one chart, with the oracle and random references."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.5, 4.2))
    fig.subplots_adjust(left=0.09, right=0.66, bottom=0.12, top=0.92)
    ax = fig.subplots()
    for c in tp.references:
        color, ls = ("#444444", ":") if c.kind == "oracle" else ("#999999", "--")
        ax.plot(c.coverage, c.risk, ls=ls, color=color, lw=1.0, label=c.label)
    for i, c in enumerate(tp.curves):
        ax.plot(c.coverage, c.risk, color=PALETTE[i % len(PALETTE)], lw=1.6 if i < 2 else 1.0,
                ls="-" if i < len(PALETTE) else "--", label=f"{c.label} (AURC {c.aurc:.3f})")  # fmt: skip
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("coverage (share of answers kept, most confident first)", fontsize=8)
    ax.set_ylabel("risk (error rate among kept)", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3, lw=0.5)
    ax.legend(fontsize=6.5, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    ax.set_title(f"{tp.task}: risk–coverage (seed-0 evaluation split)", fontsize=9)
    return fig


def _save(fig: Figure, directory: Path, name: str, dpi: int) -> list[Path]:
    from matplotlib import rc_context

    out = [directory / f"{name}.png", directory / f"{name}.svg"]
    fig.savefig(out[0], format="png", dpi=dpi)
    with rc_context({"svg.fonttype": "none", "svg.hashsalt": "tracecal"}):
        fig.savefig(out[1], format="svg", metadata={"Date": None})
    fig.clear()
    return out


def export_figures(plots: list[TaskPlots], directory: str | Path, dpi: int = PAPER_DPI) -> list[Path]:
    """Write every figure of every task as PNG (``dpi``) and SVG (text kept as text) into ``directory``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for tp in plots:
        st = safe_name(tp.task)
        written += _save(reliability_figure(tp), directory, f"reliability_{st}", dpi)
        written += _save(risk_coverage_figure(tp), directory, f"risk_coverage_{st}", dpi)
        written += _save(histogram_figure(tp), directory, f"histogram_{st}", dpi)
    return written
