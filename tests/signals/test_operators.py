"""Risk operators and TRACE: hand-computed values and hypothesis properties."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracecal.errors import ValidationError
from tracecal.signals.operators import (
    KERNELS,
    TraceConfig,
    decayed_mean,
    first_k_mean,
    last_k_mean,
    length_norm_sum,
    seg_mean,
    seg_var,
    slope,
    trace_confidence,
    trace_risk,
    window_peak,
)
from tracecal.traces.trace import TraceBatch

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)
nonneg = st.floats(min_value=0.0, max_value=50.0, allow_nan=False)
seqs = st.lists(st.lists(nonneg, min_size=1, max_size=40), min_size=1, max_size=20)


def offsets_of(xs: list[list[float]]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum([len(x) for x in xs])]).astype(np.int64)


def flat(xs: list[list[float]]) -> np.ndarray:
    return np.concatenate([np.asarray(x, float) for x in xs])


def test_trace_hand_computed() -> None:
    # H = (1, 2, 3), s = (0.5, 0.5, 1.0), defaults α=β=0.4, γ=0.2, λ=2, w=4, ρ=1/4.
    # D_2(H): weights (1, e^-0.5, e^-1) → (1 + 2e^-0.5 + 3e^-1) / (1 + e^-0.5 + e^-1) = 1.6798433321701935
    # M^4(H): T = 3 < 4 → mean(H) = 2
    # L_1/4(s): 2.0 / 3^0.25 = 1.519671371303185
    # R = 0.4·1.67984333 + 0.4·2 + 0.2·1.51967137 = 1.7758716071287146; c = exp(−R) = 0.16933579087618955
    b = TraceBatch.from_lists([[0.5, 0.5, 1.0]], [[1.0, 2.0, 3.0]])
    assert trace_risk(b)[0] == pytest.approx(1.7758716071287146, abs=1e-12)
    assert trace_confidence(b)[0] == pytest.approx(0.16933579087618955, abs=1e-12)


def test_window_peak_hand() -> None:
    h = [0.1, 0.2, 3.0, 2.0, 0.1, 0.1]  # windows of 4: 1.325, 1.325, 1.3 → 1.325
    assert window_peak(np.array(h), np.array([0, 6]), 4)[0] == pytest.approx(1.325)
    assert window_peak(np.array(h), np.array([0, 6]), 1)[0] == pytest.approx(3.0)
    assert window_peak(np.array(h), np.array([0, 6]), 6)[0] == pytest.approx(np.mean(h))
    assert window_peak(np.array(h), np.array([0, 6]), 20)[0] == pytest.approx(np.mean(h))  # T < w


def test_slope_first_last() -> None:
    u = np.array([1.0, 3.0, 5.0, 7.0, 2.0])
    off = np.array([0, 4, 5])
    np.testing.assert_allclose(slope(u, off), [2.0, 0.0])  # T = 1 → 0
    np.testing.assert_allclose(first_k_mean(u, off, 3), [3.0, 2.0])
    np.testing.assert_allclose(last_k_mean(u, off, 3), [5.0, 2.0])


def test_empty_answers_give_nan_not_crash() -> None:
    b = TraceBatch(np.array([1.0, 2.0]), np.array([0.5, 0.7]), np.array([0, 0, 2, 2]))
    c = trace_confidence(b)
    assert np.isnan(c[0]) and np.isnan(c[2]) and np.isfinite(c[1])
    assert np.isnan(window_peak(b.entropy, b.segments)[0])
    assert np.isnan(slope(b.entropy, b.segments)[2])


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="must be 1"):
        TraceConfig(alpha=0.5, beta=0.5, gamma=0.5)
    with pytest.raises(ValueError):
        decayed_mean(np.ones(3), np.array([0, 3]), lam=0.0)
    for bad, msg in [
        ({"lam": 0.0}, r"^lam must be a finite number > 0, got 0.0$"),
        ({"window": 2.5}, r"^window must be a whole number ≥ 1, got 2.5$"),
        ({"alpha": -0.2, "beta": 1.0}, r"^alpha must be a finite number in \[0, 1\], got -0.2$"),
        ({"rho": float("nan")}, r"^rho must be a finite number, got nan$"),
    ]:
        with pytest.raises(ValidationError, match=msg):
            TraceConfig(**bad)


@settings(max_examples=150, deadline=None)
@given(seqs, st.integers(1, 10))
def test_window_peak_at_least_mean(xs: list[list[float]], w: int) -> None:
    # "peak ≥ mean" holds when windows can tile the answer (T % w == 0) or T < w (peak = mean).
    # It is NOT true in general: u = (1, 0, 0, 1), w = 3 has both windows at 1/3 < mean 1/2 —
    # see test_window_peak_not_always_above_mean. Always: first/last window mean ≤ peak ≤ max.
    u, off = flat(xs), offsets_of(xs)
    peak, mean = window_peak(u, off, w), seg_mean(u, off)
    T = np.array([len(x) for x in xs])
    tiled = (T % w == 0) | (T < w)
    tol = 1e-9 * (1 + np.abs(mean))
    assert np.all(peak[tiled] >= mean[tiled] - tol[tiled])
    first = np.array([np.mean(x[:w]) for x in xs])
    last = np.array([np.mean(x[-w:]) for x in xs])
    assert np.all(peak >= np.maximum(first, last) - tol)
    assert np.all(peak <= np.array([max(x) for x in xs]) + 1e-9)


def test_window_peak_not_always_above_mean() -> None:
    assert window_peak(np.array([1.0, 0.0, 0.0, 1.0]), np.array([0, 4]), 3)[0] == pytest.approx(1 / 3)


@settings(max_examples=150, deadline=None)
@given(seqs, st.floats(0.1, 20.0))
def test_decayed_mean_between_min_and_max(xs: list[list[float]], lam: float) -> None:
    u, off = flat(xs), offsets_of(xs)
    d = decayed_mean(u, off, lam)
    lo = np.array([min(x) for x in xs])
    hi = np.array([max(x) for x in xs])
    assert np.all(d >= lo - 1e-9) and np.all(d <= hi + 1e-9)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 64), min_size=1, max_size=10), st.floats(0.0, 10.0), st.floats(0.1, 10.0))
def test_decayed_mean_of_constant(lengths: list[int], c: float, lam: float) -> None:
    off = np.concatenate([[0], np.cumsum(lengths)])
    u = np.full(off[-1], c)
    for kernel in ("exp", "hyperbolic", "uniform"):
        np.testing.assert_allclose(decayed_mean(u, off, lam, kernel), c, rtol=1e-12, atol=1e-12)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(finite, min_size=1, max_size=30), min_size=1, max_size=10))
def test_no_nan_for_finite_input(xs: list[list[float]]) -> None:
    u, off = flat(xs), offsets_of(xs)
    for f in (
        lambda: decayed_mean(u, off, 2.0),
        lambda: window_peak(u, off, 4),
        lambda: length_norm_sum(u, off, 0.25),
        lambda: slope(u, off),
        lambda: seg_var(u, off),
        lambda: first_k_mean(u, off, 3),
        lambda: last_k_mean(u, off, 3),
    ):
        assert np.all(np.isfinite(f()))


@settings(max_examples=100, deadline=None)
@given(seqs, seqs)
def test_operators_match_naive_reference(hs: list[list[float]], ss: list[list[float]]) -> None:
    n = min(len(hs), len(ss))
    hs = hs[:n]
    ss = [(s * (len(h) // len(s) + 1))[: len(h)] for s, h in zip(ss[:n], hs, strict=True)]
    b = TraceBatch.from_lists(ss, hs)
    got = trace_risk(b)
    for i, (h, s) in enumerate(zip(hs, ss, strict=True)):
        T = len(h)
        w = [math.exp(-t / 2.0) for t in range(T)]
        d = sum(wi * hi for wi, hi in zip(w, h, strict=True)) / sum(w)
        m = max(sum(h[t : t + 4]) / 4 for t in range(T - 3)) if T >= 4 else sum(h) / T
        ln = sum(s) / T**0.25
        assert got[i] == pytest.approx(0.4 * d + 0.4 * m + 0.2 * ln, rel=1e-9, abs=1e-9)
        if T >= 2:
            assert slope(np.array(h), np.array([0, T]))[0] == pytest.approx(np.polyfit(range(T), h, 1)[0], abs=1e-6)


def test_select_keeps_values() -> None:
    b = TraceBatch.from_lists([[1.0], [2.0, 3.0], [], [4.0, 5.0, 6.0]], [[0.1], [0.2, 0.3], [], [0.4, 0.5, 0.6]])
    sub = b.select([3, 0, 2])
    np.testing.assert_array_equal(sub.surprisal, [4.0, 5.0, 6.0, 1.0])
    np.testing.assert_array_equal(sub.lengths, [3, 1, 0])


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 50), min_size=1, max_size=200), st.integers(1, 300))
def test_chunked_equals_whole(lengths: list[int], max_tokens: int) -> None:
    from tracecal.signals.features import trace_plus_features
    from tracecal.signals.operators import chunked

    rng = np.random.default_rng(len(lengths))
    off = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    b = TraceBatch(rng.random(off[-1]) * 3, rng.random(off[-1]) * 4, off)
    whole = trace_risk(TraceBatch(b.surprisal, b.entropy, b.offsets))
    parts = chunked(lambda bb: trace_risk(TraceBatch(bb.surprisal, bb.entropy, bb.offsets)), b, max_tokens)
    np.testing.assert_array_equal(np.isnan(whole), np.isnan(parts))
    np.testing.assert_allclose(whole, parts, rtol=1e-12)
    assert trace_plus_features(b).shape == (len(lengths), 8)


def test_segments_reexported_from_operators() -> None:
    import tracecal.signals.operators
    import tracecal.traces.segments

    assert tracecal.signals.operators.Segments is tracecal.traces.segments.Segments
    assert tracecal.signals.operators.DecayKernel is tracecal.traces.segments.DecayKernel


def test_unknown_kernel_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"unknown decay kernel 'gauss'; valid kernels: exp, hyperbolic, uniform"):
        decayed_mean(np.ones(3), np.array([0, 3]), 2.0, "gauss")
    with pytest.raises(ValidationError, match=r"^kernel must be one of exp, hyperbolic, uniform, got 'gauss'$"):
        TraceConfig(kernel="gauss")
    assert TraceConfig(kernel=KERNELS["uniform"]).kernel is KERNELS["uniform"]  # a kernel function passes


def test_trace_confidence_validates_a_raw_batch() -> None:
    b = TraceBatch(np.array([0.5, -2.0]), np.array([0.1, 0.1]), np.array([0, 1, 2]))
    with pytest.raises(ValueError, match=r"answer 1: surprisal of token 0 is -2.0"):
        trace_confidence(b)


@settings(max_examples=100, deadline=None)
@given(seqs, seqs)
def test_trace_confidence_in_unit_interval(hs: list[list[float]], ss: list[list[float]]) -> None:
    n = min(len(hs), len(ss))
    ss = [(s * (len(h) // len(s) + 1))[: len(h)] for s, h in zip(ss[:n], hs[:n], strict=True)]
    c = trace_confidence(TraceBatch.from_lists(ss, hs[:n]))
    assert np.all((c > 0) & (c <= 1))
