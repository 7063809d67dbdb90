"""Every SVG figure committed under docs/ draws on its canvas and its data marks inside their plot frames
(`tests/report/geometry.py`): a figure redrawn by broken code and committed fails here (regenerate them with
``python scripts/redraw_figures.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .geometry import marks_outside_frames, outside_canvas

DOCS = Path(__file__).resolve().parents[2] / "docs"
FIGURES = sorted(DOCS.rglob("*.svg"))


def test_the_checks_can_fail() -> None:
    bad = (
        '<svg xmlns="http://www.w3.org/2000/svg" width="100" height="50"><rect x="10" y="10" width="50" height="30" '
        'class="frame"/><circle cx="90" cy="20" r="2"><title>a point</title></circle><line x1="120" y1="5"/></svg>'
    )
    assert outside_canvas(bad) == ["line x1=120 (canvas 100×50)"]
    assert marks_outside_frames(bad) == ["circle at (90, 20)"]


@pytest.mark.parametrize("path", FIGURES, ids=[str(p.relative_to(DOCS)) for p in FIGURES])
def test_a_committed_figure_draws_inside_its_canvas_and_frames(path: Path) -> None:
    svg = path.read_text(encoding="utf-8")
    assert not outside_canvas(svg), outside_canvas(svg)[:5]
    assert not marks_outside_frames(svg), marks_outside_frames(svg)[:5]
