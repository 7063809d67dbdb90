"""The single trace statistics (`tracecal.signals.statistics`): each against a naive per-trace NumPy reference on
random ragged traces (empty answers included), and the building blocks the TRACE+ features use."""

from __future__ import annotations

import numpy as np
import pytest

from tracecal.signals import statistics as st_mod
from tracecal.signals.statistics import TRACE_STATISTICS, trace_statistic
from tracecal.traces.trace import TraceBatch


def ragged(seed: int, n: int = 80, max_len: int = 25) -> tuple[list[np.ndarray], list[np.ndarray], TraceBatch]:
    rng = np.random.default_rng(seed)
    lens = rng.integers(0, max_len, n)
    lens[:6] = [0, 1, 2, 3, 4, 60]  # empty, shorter than every window, and long answers
    S = [rng.gamma(1.0, 0.8, k) for k in lens]
    H = [rng.gamma(1.0, 1.2, k) for k in lens]
    return S, H, TraceBatch.from_lists(S, H)


def _slope(u: np.ndarray) -> float:
    if len(u) == 1:
        return 0.0
    return float(np.polyfit(np.arange(len(u), dtype=float), u, 1)[0])


def _window(u: np.ndarray, w: int = 4) -> float:
    if len(u) < w:
        return float(u.mean())
    return max(float(u[t : t + w].mean()) for t in range(len(u) - w + 1))


NAIVE = {
    "first_token_prob": lambda s, h: np.exp(-s[0]),
    "mean_prob": lambda s, h: np.exp(-s).mean(),
    "norm_seq_prob": lambda s, h: np.exp(-s.mean()),
    "seq_likelihood": lambda s, h: np.exp(-s.sum()),
    "min_prob": lambda s, h: np.exp(-s).min(),
    "high_prob_rate": lambda s, h: (np.exp(-s) > 0.9).mean(),
    "neg_mean_entropy": lambda s, h: -h.mean(),
    "neg_max_entropy": lambda s, h: -h.max(),
    "neg_first3_entropy": lambda s, h: -h[:3].mean(),
    "neg_last3_entropy": lambda s, h: -h[-3:].mean(),
    "neg_window_entropy": lambda s, h: -_window(h),
    "neg_entropy_var": lambda s, h: -h.var(),
    "neg_entropy_slope": lambda s, h: -_slope(h),
    "prob_slope": lambda s, h: _slope(np.exp(-s)),
}


def naive(fn, S: list[np.ndarray], H: list[np.ndarray]) -> np.ndarray:  # type: ignore[no-untyped-def]
    return np.array([fn(s, h) if len(s) else np.nan for s, h in zip(S, H, strict=True)])


def test_the_table_is_the_fourteen_statistics() -> None:
    assert list(TRACE_STATISTICS) == list(NAIVE)
    assert {s.family for s in TRACE_STATISTICS.values()} == {"likelihood", "entropy", "trajectory"}
    assert all(s.name == k and s.description for k, s in TRACE_STATISTICS.items())


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", list(NAIVE))
def test_each_statistic_matches_a_naive_reference(name: str, seed: int) -> None:
    S, H, b = ragged(seed)
    got, ref = trace_statistic(name, b), naive(NAIVE[name], S, H)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))  # NaN exactly for the zero-token answers
    assert np.isnan(got).sum() == sum(len(s) == 0 for s in S)
    np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-12)


def test_statistics_do_not_depend_on_chunking_or_the_batch() -> None:
    S, H, b = ragged(3, n=300, max_len=600)  # > 2^16 tokens: computed chunk by chunk
    assert int(b.offsets[-1]) > 1 << 16
    for name in TRACE_STATISTICS:
        whole = trace_statistic(name, b)
        alone = np.concatenate([trace_statistic(name, b.select([i])) for i in range(0, 300, 37)])
        np.testing.assert_array_equal(whole[::37], alone)


def test_building_blocks() -> None:
    S, H, b = ragged(4)
    blocks = {
        "mean_entropy": lambda s, h: h.mean(),
        "entropy_slope": lambda s, h: _slope(h),
        "min_prob": lambda s, h: np.exp(-s.max()),
        "geo_mean_prob": lambda s, h: np.exp(-s.mean()),
    }
    for name, fn in blocks.items():
        np.testing.assert_allclose(getattr(st_mod, name)(b), naive(fn, S, H), rtol=1e-9, atol=1e-12)
    for k in (1, 3, 5):
        ref = naive(lambda s, h, k=k: h[:k].mean(), S, H)
        np.testing.assert_allclose(st_mod.first_k_entropy(b, k), ref, rtol=1e-12)
    for thr in (0.3, 0.5, 0.9):
        ref = naive(lambda s, h, t=thr: (np.exp(-s) < t).mean(), S, H)
        np.testing.assert_allclose(st_mod.low_prob_rate(b, thr), ref, rtol=1e-12)
        np.testing.assert_allclose(
            st_mod.prob_rate(b, thr, above=True), naive(lambda s, h, t=thr: (np.exp(-s) > t).mean(), S, H)
        )


def test_the_table_is_built_from_the_blocks() -> None:
    """One definition: the statistics that the features also use are the same numbers, bit for bit."""
    _, _, b = ragged(5)
    np.testing.assert_array_equal(trace_statistic("min_prob", b), st_mod.min_prob(b))
    np.testing.assert_array_equal(trace_statistic("norm_seq_prob", b), st_mod.geo_mean_prob(b))
    np.testing.assert_array_equal(trace_statistic("neg_mean_entropy", b), -st_mod.mean_entropy(b))
    np.testing.assert_array_equal(trace_statistic("neg_first3_entropy", b), -st_mod.first_k_entropy(b, 3))
    np.testing.assert_array_equal(trace_statistic("neg_entropy_slope", b), -st_mod.entropy_slope(b))
    np.testing.assert_array_equal(trace_statistic("high_prob_rate", b), st_mod.prob_rate(b, 0.9, above=True))
