"""The learning-curve figures: `tracecal.analysis.learning_curve` computes the document, this module draws it.

`learning_curve_svg` draws one task's document (AUROC and Brier against the calibration-set size) with the pieces
of `tracecal.report.svg` (escaped text, no scripts); `run_learning_curve` is the analysis's
`tracecal.analysis.learning_curve.run_learning_curve` (``learning_curve.json`` merged by task,
``learning_curve.csv``) followed by one figure per task computed, ``learning_curve_<task>.svg``, all written into
the run directory.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

from tracecal.analysis import learning_curve as analysis
from tracecal.evaluation.runstore import RunStore
from tracecal.report.svg import PALETTE, TITLE_H, esc, keep_apart, px, safe_name, svg_document

__all__ = ["run_learning_curve", "write_learning_curve_figures", "figure_file", "learning_curve_svg"]


def figure_file(task: str) -> str:
    """The file name of a task's learning-curve figure in the run directory."""
    return f"learning_curve_{safe_name(task)}.svg"


def write_learning_curve_figures(store: RunStore, doc: dict[str, Any], tasks: Sequence[str] | None = None) -> None:
    """Draw the learning curve of each of ``tasks`` (default: every task of ``doc``) into the run directory."""
    for task in tasks or list(doc["tasks"]):
        store.write_text(figure_file(task), learning_curve_svg(doc["tasks"][task]))


def run_learning_curve(
    run_dir: str | os.PathLike[str] | RunStore, tasks: Sequence[str] | None = None, *args: Any, **kw: Any
) -> dict[str, Any]:
    """`tracecal.analysis.learning_curve.run_learning_curve` (the same arguments: the run, its tasks, then the
    estimators, progress and settings; the same document returned), then the figure of every task it computed."""
    store = run_dir if isinstance(run_dir, RunStore) else RunStore(run_dir)
    doc = analysis.run_learning_curve(store, tasks, *args, **kw)
    write_learning_curve_figures(store, doc, tasks)
    return doc


def _lc_panel(lc: dict, metric: str, label: str, x_off: float) -> list[str]:
    """One panel of `learning_curve_svg`: mean ± interval of ``metric`` against the size (log scale)."""
    x0, y0, w, h = x_off + 56, TITLE_H + 30, 330, 250
    pts = [(p["size"], p[metric]) for e in lc["estimators"].values() for p in e]
    vals = [v for _, m in pts for v in (m["lo"], m["hi"], m["mean"]) if v is not None and math.isfinite(v)]
    lo, hi = (min(vals), max(vals)) if vals else (0.0, 1.0)
    pad = max((hi - lo) * 0.08, 1e-3)
    lo, hi = lo - pad, hi + pad
    sizes = sorted({s for s, _ in pts}) or [1]
    lx0, lx1 = math.log(sizes[0]), math.log(sizes[-1]) if len(sizes) > 1 else math.log(sizes[0]) + 1.0

    def sx(s: float) -> float:
        return x0 + 10 + (math.log(s) - lx0) / (lx1 - lx0) * (w - 20)

    def py(v: float) -> float:
        return y0 + (1 - (v - lo) / (hi - lo)) * h

    parts = [
        f'<rect x="{px(x0)}" y="{y0}" width="{w}" height="{h}" class="frame"/>',
        f'<text x="{px(x0 + w / 2)}" y="{y0 - 8}" text-anchor="middle" class="pt">{esc(label)}</text>',
        f'<text x="{px(x0 + w / 2)}" y="{y0 + h + 30}" text-anchor="middle" class="ax">'
        "calibration answers (log scale)</text>",
    ]
    for x, size in keep_apart([(sx(s), str(s)) for s in sizes], 11):  # class tk2: 11 px
        parts.append(f'<text x="{px(x)}" y="{y0 + h + 14}" text-anchor="middle" class="tk2">{size}</text>')
    for frac in (0.0, 0.5, 1.0):
        v = lo + frac * (hi - lo)
        parts.append(f'<line x1="{px(x0)}" y1="{px(py(v))}" x2="{px(x0 + w)}" y2="{px(py(v))}" class="grid"/>')
        parts.append(f'<text x="{px(x0 - 4)}" y="{px(py(v) + 4)}" text-anchor="end" class="tk2">{v:.3f}</text>')
    dodge = min(2.5, 16 / max(len(lc["estimators"]) - 1, 1))  # estimators side by side, within the 10 px margin
    for i, (est, points) in enumerate(lc["estimators"].items()):
        color = PALETTE[i % len(PALETTE)]
        ok = [p for p in points if p[metric]["mean"] is not None and math.isfinite(p[metric]["mean"])]
        line = " ".join(f"{px(sx(p['size']))},{px(py(p[metric]['mean']))}" for p in ok)
        parts.append(
            f'<polyline points="{line}" fill="none" stroke="{color}" stroke-width="1.8"><title>'
            f"{esc(est)}</title></polyline>"
        )
        for p in ok:
            m, x = p[metric], sx(p["size"]) + (i - (len(lc["estimators"]) - 1) / 2) * dodge
            tip = f"{est}, {p['size']} answers: {metric} {m['mean']:.3f}"
            if m["lo"] is not None and m["hi"] is not None:
                tip += f" [{m['lo']:.3f}, {m['hi']:.3f}]"
                parts.append(
                    f'<line x1="{px(x)}" y1="{px(py(m["lo"]))}" x2="{px(x)}" y2="{px(py(m["hi"]))}" '
                    f'stroke="{color}" stroke-width="1"/>'
                )
            parts.append(
                f'<circle cx="{px(x)}" cy="{px(py(m["mean"]))}" r="2.5" fill="{color}">'
                f"<title>{esc(tip)}</title></circle>"
            )
    return parts


def learning_curve_svg(lc: dict) -> str:
    """AUROC and Brier against the calibration-set size for each method of one task (a
    `tracecal.analysis.learning_curve` document: means over splits with their bootstrap intervals as bars), one
    document with a legend."""
    parts = _lc_panel(lc, "auroc", "AUROC ↑ (raw scores)", 0) + _lc_panel(lc, "brier", "Brier ↓ (calibrated)", 410)
    ly = TITLE_H + 40
    for i, est in enumerate(lc["estimators"]):
        color = PALETTE[i % len(PALETTE)]
        parts.append(f'<line x1="820" y1="{ly}" x2="844" y2="{ly}" stroke="{color}" stroke-width="2"/>')
        parts.append(f'<text x="850" y="{ly + 4}" class="lg">{esc(est)}</text>')
        ly += 15
    level = lc.get("level") or 0.95
    title = (
        f"{lc['task']}: learning curves ({lc['n']} answers, {lc['n_correct']} correct; mean over "
        f"{lc['n_splits']} splits, bars: {level:.0%} bootstrap interval)"
    )
    return svg_document(1000, max(TITLE_H + 330, ly + 10), f"learning curves {lc['task']}", title, parts)
