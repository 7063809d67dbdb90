"""The one SVG plotting path (`tracecal.report.svg`): axis ticks whose labels never overlap, whatever the width, and
a panel with nothing to draw that says so."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tracecal.report.plotdata import Hist, TaskPlots
from tracecal.report.svg import axis_ticks, histogram_svg, keep_apart, text_width

RANGES = [(0.0, 1.0), (0.35, 0.95), (0.4, 0.6), (0.45, 0.55), (0.5, 0.505), (0.0, 0.05), (10.0, 2000.0), (-1.0, 1.0)]


def _boxes(
    ticks: list[tuple[float, str]], lo: float, hi: float, width: float, font: float
) -> list[tuple[float, float]]:
    """The estimated [left, right] px extent of each label, centred on its tick."""
    out = []
    for v, label in ticks:
        x = (v - lo) / (hi - lo) * width
        half = text_width(label, font) / 2
        out.append((x - half, x + half))
    return out


@pytest.mark.parametrize(("lo", "hi"), RANGES)
def test_tick_labels_never_overlap_at_any_width(lo: float, hi: float) -> None:
    for width, font in itertools.product(range(10, 1201, 13), (8.0, 11.0)):
        ticks = axis_ticks(lo, hi, width, font, gap_px=4.0)
        assert ticks, (lo, hi, width)
        assert all(lo - 1e-9 <= v <= hi + 1e-9 for v, _ in ticks)
        boxes = _boxes(ticks, lo, hi, width, font)
        for (_, right), (left, _) in itertools.pairwise(boxes):
            assert left - right >= 4.0 - 1e-9, (lo, hi, width, font, ticks)
        assert all(float(label) == pytest.approx(v) for v, label in ticks)  # each label names its tick
        steps = np.diff([v for v, _ in ticks])
        assert np.allclose(steps, steps[0]) if steps.size else True  # evenly spaced


def test_a_wide_axis_gets_more_ticks_than_a_narrow_one() -> None:
    assert len(axis_ticks(0.4, 1.0, 600, 8)) > len(axis_ticks(0.4, 1.0, 142, 8)) >= 4
    assert [t for _, t in axis_ticks(0.4, 1.0, 142, 8)] == ["0.4", "0.5", "0.6", "0.7", "0.8", "0.9", "1.0"]
    assert axis_ticks(0.5, 0.5, 100, 8) == [(0.5, "0.5")]  # an empty range: one tick


def test_the_old_labels_ran_together() -> None:
    """What the overview drew before: every 0.1 on [0, 1] across 142 px at 8 px — labels under 2 px apart, read as
    one string ("0.00.10.20.3…"); now every 0.2."""
    old = [(v / 10, f"{v / 10:.1f}") for v in range(11)]
    boxes = _boxes(old, 0.0, 1.0, 142, 8)
    assert min(left - right for (_, right), (left, _) in itertools.pairwise(boxes)) < 2
    assert [t for _, t in axis_ticks(0.0, 1.0, 142, 8)] == ["0.0", "0.2", "0.4", "0.6", "0.8", "1.0"]


def test_keep_apart_drops_labels_too_close_to_the_last_one_kept() -> None:
    ticks = [(0.0, "50"), (5.0, "100"), (40.0, "200"), (41.0, "400"), (200.0, "800")]
    assert keep_apart(ticks, 11) == [(0.0, "50"), (40.0, "200"), (200.0, "800")]


def test_a_histogram_panel_without_answers_says_so() -> None:
    edges = np.linspace(0, 1, 21)
    tp = TaskPlots("t", 10, hists=[Hist("trace", edges, np.zeros(20, int), np.zeros(20, int))])
    assert "no evaluation answers" in histogram_svg(tp)
