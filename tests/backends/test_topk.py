"""Top-k entropy estimators (`tracecal.backends.topk`): bounds, exactness, known tails, and no NaN or NumPy warnings."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from tracecal.backends.base import topk_entropy as base_topk_entropy
from tracecal.backends.topk import DEFAULT_TOPK_ESTIMATOR, TOPK_ESTIMATORS, topk_entropy, topk_parts

TAIL_MODELS = ("geometric_tail", "zipf_tail")


def entropy(lp: np.ndarray) -> float:
    p = np.exp(lp)
    return float(-(p * lp).sum())


def top_of(lp: np.ndarray, k: int) -> np.ndarray:
    return np.sort(lp)[::-1][:k][None, :]


@st.composite
def distributions(draw: st.DrawFn) -> tuple[np.ndarray, int]:
    """(log-probs over |V| tokens, k): logits on very different scales, from flat to one-hot-like."""
    V = draw(st.integers(2, 400))
    scale = draw(st.sampled_from([0.01, 0.3, 1.0, 3.0, 10.0, 40.0]))
    z = draw(arrays(np.float64, V, elements=st.floats(-1, 1, allow_nan=False)))
    logits = scale * z * draw(st.sampled_from([1.0, 5.0]))
    lp = logits - np.logaddexp.reduce(logits)
    return lp, draw(st.integers(1, V))


@settings(max_examples=150, deadline=None)
@given(distributions())
def test_bounds_hold_for_any_distribution(case: tuple[np.ndarray, int]) -> None:
    lp, k = case
    V, H = len(lp), entropy(lp)
    top = top_of(lp, k)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est = {name: topk_entropy(top, V, name)[0] for name in TOPK_ESTIMATORS}
    tol = 1e-9 * max(1.0, H)
    assert all(np.isfinite(v) for v in est.values()), est
    assert est["head_only"] <= est["capped_tail"] + tol  # the two lower bounds are ordered
    assert est["capped_tail"] <= H + tol  # … and below the exact entropy
    assert H <= est["uniform_tail"] + tol  # the uniform tail is an upper bound
    for name in TAIL_MODELS:
        assert est["capped_tail"] - tol <= est[name] <= est["uniform_tail"] + tol


@settings(max_examples=100, deadline=None)
@given(distributions())
def test_exact_when_k_is_the_whole_vocabulary(case: tuple[np.ndarray, int]) -> None:
    lp, _ = case
    V = len(lp)
    H = entropy(lp)
    for name in TOPK_ESTIMATORS:
        assert topk_entropy(top_of(lp, V), V, name)[0] == pytest.approx(H, abs=1e-9), name


@pytest.mark.parametrize("name", TOPK_ESTIMATORS)
def test_no_nan_or_warning_when_the_tail_mass_is_zero_or_negative(name: str) -> None:
    rows = np.array(
        [
            [np.log(0.5), np.log(0.5)],  # r = 0 exactly
            [np.log(0.5 + 1e-12), np.log(0.5 + 1e-12)],  # r < 0 by rounding
            [0.0, -np.inf],  # a one-hot head, the second entry missing
            [-np.inf, -np.inf],  # nothing returned for this step
            [-1e-300, -800.0],  # p = 1 and an underflowing second entry
        ]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for V in (2, 3, 50_000):
            out = topk_entropy(rows, V, name)
            assert out.shape == (5,) and np.isfinite(out).all() and (out >= -1e-12).all()
            assert out[0] == pytest.approx(np.log(2)) and out[1] == pytest.approx(np.log(2), abs=1e-9)
            assert out[2] == pytest.approx(0.0) and out[4] == pytest.approx(0.0, abs=1e-300)
    parts = topk_parts(rows, 3)
    assert parts.tail_mass.tolist()[:3] == [0.0, 0.0, 0.0] and parts.m.tolist() == [2, 2, 1, 0, 2]


def test_the_old_warning_is_gone() -> None:
    """The uniform tail used to compute 0·(−inf) on missing entries: 'invalid value encountered in multiply'."""
    top = np.array([[np.log(0.6), np.log(0.3), -np.inf]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = base_topk_entropy(top, 100)[0]
    p, r = np.array([0.6, 0.3]), 0.1
    assert got == pytest.approx(-(p * np.log(p)).sum() - r * np.log(r / 98))


def test_nothing_returned_is_the_uniform_bound() -> None:
    out = topk_entropy(np.full((1, 3), -np.inf), 1000, "uniform_tail")
    assert out[0] == pytest.approx(np.log(1000))


def test_zipf_tail_is_exact_on_a_power_law() -> None:
    """A distribution that *is* a power law in rank: the zipf tail recovers H up to the quadrature error."""
    for V, b, k in [(49_152, 1.1, 20), (5_000, 2.0, 5), (100_000, 0.8, 10), (300, 1.5, 20)]:
        lp = -b * np.log(np.arange(1, V + 1))
        lp -= np.logaddexp.reduce(lp)
        H = entropy(lp)
        est = topk_entropy(lp[None, :k], V, "zipf_tail")[0]
        assert est == pytest.approx(H, abs=2e-4), (V, b, k)
        assert abs(topk_entropy(lp[None, :k], V, "uniform_tail")[0] - H) > 10 * abs(est - H)


def test_geometric_tail_is_exact_on_a_geometric_distribution() -> None:
    V, rho, k = 2_000, 0.7, 5
    lp = np.arange(V) * np.log(rho)
    lp -= np.logaddexp.reduce(lp)
    assert topk_entropy(lp[None, :k], V, "geometric_tail")[0] == pytest.approx(entropy(lp), abs=1e-9)


def test_uniform_tail_is_exact_on_a_uniform_tail() -> None:
    q = np.array([0.5, 0.3] + [0.2 / 8] * 8)
    assert topk_entropy(np.log(q[:2])[None], 10)[0] == pytest.approx(entropy(np.log(q)))
    assert base_topk_entropy(np.log(q[:2])[None], 10)[0] == pytest.approx(entropy(np.log(q)))


def test_head_renorm_is_the_entropy_of_the_renormalised_head() -> None:
    p = np.array([0.4, 0.2, 0.1])
    q = p / p.sum()
    assert topk_entropy(np.log(p), 100, "head_renorm")[0] == pytest.approx(-(q * np.log(q)).sum())


@settings(max_examples=30, deadline=None)
@given(st.lists(distributions(), min_size=1, max_size=6), st.sampled_from(TOPK_ESTIMATORS))
def test_vectorised_equals_row_by_row(cases: list[tuple[np.ndarray, int]], name: str) -> None:
    V = min(len(lp) for lp, _ in cases)
    k = min(min(kk for _, kk in cases), V)
    rows = []
    for lp, _ in cases:
        sub = np.sort(lp)[::-1][:V]
        rows.append(sub[:k] - np.logaddexp.reduce(sub))
    top = np.array(rows)
    whole = topk_entropy(top, V, name)
    single = np.array([topk_entropy(r, V, name)[0] for r in top])
    np.testing.assert_allclose(whole, single, rtol=1e-9, atol=1e-12)


def test_padded_rows_use_their_own_k() -> None:
    lp = np.log(np.array([0.5, 0.2, 0.1, 0.05]))
    padded = np.array([[lp[0], lp[1], lp[2]], [lp[0], lp[1], -np.inf]])
    for name in TOPK_ESTIMATORS:
        out = topk_entropy(padded, 1000, name)
        assert out[1] == pytest.approx(topk_entropy(lp[None, :2], 1000, name)[0])


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown top-k entropy estimator 'magic'; choose one of uniform_tail"):
        topk_entropy(np.log([[0.5]]), 10, "magic")
    with pytest.raises(ValueError, match="must be ≤ 0"):
        topk_entropy(np.array([[0.5]]), 10)
    with pytest.raises(ValueError, match="not NaN"):
        topk_entropy(np.array([[np.nan]]), 10)
    with pytest.raises(ValueError, match="3 top-k entries per row but vocab_size is only 2"):
        topk_entropy(np.log([[0.5, 0.3, 0.2]]), 2)
    with pytest.raises(ValueError, match="vocab_size must be a positive integer"):
        topk_entropy(np.log([[0.5]]), 0)
    with pytest.raises(ValueError, match="shape"):
        topk_entropy(np.zeros((1, 1, 1)), 10)


def test_the_default_is_a_known_estimator() -> None:
    assert DEFAULT_TOPK_ESTIMATOR in TOPK_ESTIMATORS
