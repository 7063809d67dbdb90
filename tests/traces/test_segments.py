"""Ragged layout (`Segments`), per-token value checks, and the one-way import graph of the lower floors."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracecal.traces.segments import MAX_TOKEN_NATS, NEGATIVE_TOLERANCE, Segments, check_token_values

SRC = Path(__file__).resolve().parents[1] / "src" / "tracecal"
LOWER = ["segments", "version", "trace", "operators", "features", "metrics", "calfile", "calibration", "traceplus"]


def test_segments_layout() -> None:
    seg = Segments(np.array([0, 2, 2, 5]))
    np.testing.assert_array_equal(seg.lengths, [2, 0, 3])
    np.testing.assert_array_equal(seg.pos, [0, 1, 0, 1, 2])
    assert seg.max_len == 3 and len(seg) == 3 and not seg.all_nonempty
    assert [seg.answer_of(k) for k in range(5)] == [(0, 0), (0, 1), (2, 0), (2, 1), (2, 2)]
    s = seg.reduce(np.add, np.arange(5.0))
    assert s[0] == 1.0 and np.isnan(s[1]) and s[2] == 9.0


values = st.lists(st.lists(st.floats(0.0, 50.0), max_size=10), min_size=1, max_size=10)


@settings(max_examples=100, deadline=None)
@given(values)
def test_clean_values_pass_untouched(xs: list[list[float]]) -> None:
    off = np.concatenate([[0], np.cumsum([len(x) for x in xs])]).astype(np.int64)
    u = np.asarray([v for x in xs for v in x], dtype=np.float64)
    s, h = check_token_values(u, u, off)
    assert s is u and h is u  # no copy on the clean path


@settings(max_examples=100, deadline=None)
@given(values, st.data())
def test_one_bad_value_is_located(xs: list[list[float]], data: st.DataObject) -> None:
    off = np.concatenate([[0], np.cumsum([len(x) for x in xs])]).astype(np.int64)
    u = np.asarray([v for x in xs for v in x], dtype=np.float64)
    if u.size == 0:
        return
    k = data.draw(st.integers(0, u.size - 1))
    bad = data.draw(st.sampled_from([-1.0, -1e-3, np.nan, np.inf, -np.inf, 1e308, MAX_TOKEN_NATS * (1 + 1e-12)]))
    u[k] = bad
    i, t = Segments(off).answer_of(k)
    with pytest.raises(ValueError, match=rf"^answer {i}: entropy of token {t} is {re.escape(repr(bad))}"):
        check_token_values(np.zeros_like(u), u, off)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(-NEGATIVE_TOLERANCE, 0.0), min_size=1, max_size=20))
def test_round_off_is_clipped(xs: list[float]) -> None:
    u = np.asarray(xs)
    s, _ = check_token_values(u, np.zeros_like(u), np.array([0, len(xs)]))
    assert np.all(s == 0.0) and np.all(u == np.asarray(xs))  # the input array is not modified
