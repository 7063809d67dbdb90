"""The learning-curve figures: `tracecal.analysis.learning_curve` computes the document, this module draws it.

`run_learning_curve` is the analysis's `tracecal.analysis.learning_curve.run_learning_curve` (``learning_curve.json``
merged by task, ``learning_curve.csv``) followed by one figure per task computed, ``learning_curve_<task>.svg``
(`tracecal.report.svg.learning_curve_svg`), all written into the run directory.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from tracecal.analysis import learning_curve as analysis
from tracecal.evaluation.runstore import RunStore
from tracecal.report.svg import learning_curve_svg, safe_name

__all__ = ["run_learning_curve", "write_learning_curve_figures", "figure_file"]


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
