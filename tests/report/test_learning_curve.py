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


def test_figures_are_drawn_for_the_tasks_computed(tmp_path: Path) -> None:
    run = write_synthetic_run(tmp_path / "run", tasks=("triviaqa", "svamp"), n_per_task=80)
    doc = run_learning_curve(run, ["svamp"], ["trace"], sizes=[20], n_splits=2, n_boot=0)
    assert list(doc["tasks"]) == ["svamp"] and figure_file("svamp") == "learning_curve_svamp.svg"
    svg = (run / "learning_curve_svamp.svg").read_text()
    assert svg == learning_curve_svg(doc["tasks"]["svamp"]) and ET.fromstring(svg).tag.endswith("svg")
    assert not (run / "learning_curve_triviaqa.svg").exists()
    (run / "learning_curve_svamp.svg").unlink()
    write_learning_curve_figures(RunStore(run), doc)
    assert (run / "learning_curve_svamp.svg").read_text() == svg
