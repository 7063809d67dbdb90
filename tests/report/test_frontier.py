"""The frontier figure and report section: drawn from the analysis's document, one SVG per task, the report shows
the section for a run with a samples pass."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from tracecal.evaluation.runstore import RunStore
from tracecal.report import write_report
from tracecal.report.frontier import figure_file, frontier_section, frontier_svg, run_frontier
from tracecal.testing import add_synthetic_samples, write_synthetic_run

from .geometry import marks_outside_frames, outside_canvas


def _run(tmp_path: Path) -> Path:
    run = write_synthetic_run(
        tmp_path / "run",
        tasks=("triviaqa",),
        n_per_task=120,
        n_seeds=3,
        estimators=("trace", "trace_plus", "mean_prob"),
    )
    add_synthetic_samples(RunStore(run), "triviaqa", k=5, cost={"sample_cpu_seconds": 3.0})
    return run


def test_the_figure_marks_the_frontier_and_every_point(tmp_path: Path) -> None:
    run = _run(tmp_path)
    doc = run_frontier(run, estimators=["trace,trace_plus,mean_prob,sampling"], n_boot=50)
    d = doc["tasks"]["triviaqa"]
    svg = (run / figure_file("triviaqa")).read_text()
    assert svg == frontier_svg(d) and ET.fromstring(svg).tag.endswith("svg")
    assert not outside_canvas(svg) and not marks_outside_frames(svg)  # each scale applied once
    assert svg.count("<circle") >= len(d["points"])
    for p in d["points"]:
        assert f">{p['estimator']}</text>" in svg
    outlined = svg.count('stroke="#000"')
    assert outlined == len(d["frontier"]["cpu_seconds"])
    html = frontier_section(doc)
    assert 'id="frontier"' in html and html.count("★") == outlined
    assert "CPU-s of the traces pass(es): wall seconds" in html  # the synthetic run's greedy time is wall time
    assert frontier_section(None) == ""


def test_the_report_has_the_section_when_the_run_has_samples(tmp_path: Path) -> None:
    run = _run(tmp_path)
    write_report(run)
    assert 'id="frontier"' in (run / "report.html").read_text()
    assert (run / "frontier.json").exists()
    plain = write_synthetic_run(
        tmp_path / "plain", tasks=("triviaqa",), n_per_task=60, estimators=("trace", "trace_plus")
    )
    write_report(plain)
    assert 'id="frontier"' not in (plain / "report.html").read_text()
