"""The learning-curve figures: the analysis's document, then one SVG per task computed."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from tracecal.evaluation.runstore import RunStore
from tracecal.report.learning_curve import (
    figure_file,
    learning_curve_svg,
    run_learning_curve,
    write_learning_curve_figures,
)
from tracecal.testing import write_synthetic_run

from .geometry import marks_outside_frames, outside_canvas


def test_figures_are_drawn_for_the_tasks_computed(tmp_path: Path) -> None:
    run = write_synthetic_run(tmp_path / "run", tasks=("triviaqa", "svamp"), n_per_task=80)
    doc = run_learning_curve(run, ["svamp"], ["trace"], sizes=[20], n_splits=2, n_boot=0)
    assert list(doc["tasks"]) == ["svamp"] and figure_file("svamp") == "learning_curve_svamp.svg"
    svg = (run / "learning_curve_svamp.svg").read_text()
    assert svg == learning_curve_svg(doc["tasks"]["svamp"]) and ET.fromstring(svg).tag.endswith("svg")
    assert not outside_canvas(svg) and not marks_outside_frames(svg)  # each scale applied once
    assert not (run / "learning_curve_triviaqa.svg").exists()
    (run / "learning_curve_svamp.svg").unlink()
    write_learning_curve_figures(RunStore(run), doc)
    assert (run / "learning_curve_svamp.svg").read_text() == svg


def test_many_estimators_stay_inside_the_panels(tmp_path: Path) -> None:
    """Eighteen estimators side by side at a size once drew the first ones left of the panel's frame."""
    run = write_synthetic_run(tmp_path / "run", tasks=("triviaqa",), n_per_task=120)
    from tracecal.estimators import default_estimators

    names = [e for e in default_estimators() if e.startswith(("trace", "neg_", "mean", "min", "first"))]
    doc = run_learning_curve(run, ["triviaqa"], names, sizes=[30, 60], n_splits=2, n_boot=0)
    svg = learning_curve_svg(doc["tasks"]["triviaqa"])
    assert len(doc["tasks"]["triviaqa"]["estimators"]) >= 12
    assert not outside_canvas(svg) and not marks_outside_frames(svg)
