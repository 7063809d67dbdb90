"""TRACE+'s feature vector φ (`tracecal.signals.features`): names, hand values, a naive per-trace reference, the
columns that are trace statistics equal to `tracecal.signals.statistics` bit for bit, and the one sweep of TRACE + φ
equal to the separate passes it replaced."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracecal.signals import features as features_mod
from tracecal.signals import operators as operators_mod
from tracecal.signals import statistics as st_mod
from tracecal.signals.features import feature_names, trace_and_features, trace_plus_features
from tracecal.signals.operators import TraceConfig, trace_confidence
from tracecal.signals.statistics import trace_statistic
from tracecal.traces.trace import TraceBatch


def ragged(seed: int, n: int = 60) -> tuple[list[np.ndarray], list[np.ndarray], TraceBatch]:
    rng = np.random.default_rng(seed)
    lens = rng.integers(0, 30, n)
    lens[:4] = [0, 1, 2, 50]
    S = [rng.gamma(1.0, 0.8, k) for k in lens]
    H = [rng.gamma(1.0, 1.2, k) for k in lens]
    return S, H, TraceBatch.from_lists(S, H)


def _decayed(u: np.ndarray, lam: float, kernel: str) -> float:
    pos = np.arange(len(u), dtype=float)
    w = {"exp": np.exp(-pos / lam), "hyperbolic": 1.0 / (1.0 + pos / lam), "uniform": np.ones(len(u))}[kernel]
    return float((w * u).sum() / w.sum())


def naive_features(
    s: np.ndarray, h: np.ndarray, lams: tuple[float, ...], k: int, kernel: str, seq: bool, thr: float
) -> list[float]:
    slope = 0.0 if len(h) == 1 else float(np.polyfit(np.arange(len(h), dtype=float), h, 1)[0])
    row = [np.exp(-h[:k].mean()), np.exp(-h.mean()), np.log(len(h)), slope]
    row += [np.exp(-_decayed(h, lam, kernel)) for lam in lams]
    row += [np.exp(-_decayed(s, lam, kernel)) for lam in lams]
    if seq:
        p = np.exp(-s)
        row += [p.min(), np.exp(-s.mean()), (p < thr).mean()]
    return row


def test_features_shape_and_names() -> None:
    _, _, b = ragged(0, 10)
    X = trace_plus_features(b)
    assert X.shape == (10, 8) and len(feature_names()) == 8
    X2 = trace_plus_features(b, seq_likelihood=True)
    assert X2.shape == (10, 11) and feature_names(seq_likelihood=True)[-1] == "low_prob_rate"
    assert feature_names((1.0, 3.0), first_k=2)[0] == "first2_entropy_conf"
    assert feature_names((1.0, 3.0))[4:] == [f"decayed_{u}_conf_l{x}" for u in ("entropy", "surprisal") for x in (1, 3)]
    # hand check of feature 1-4 on one trace: H = (1, 2, 3, 4)
    one = TraceBatch.from_lists([[0.1, 0.2, 0.3, 0.4]], [[1.0, 2.0, 3.0, 4.0]])
    f = trace_plus_features(one)[0]
    assert f[0] == pytest.approx(np.exp(-2.0)) and f[1] == pytest.approx(np.exp(-2.5))
    assert f[2] == pytest.approx(np.log(4)) and f[3] == pytest.approx(1.0)
    assert trace_plus_features([]).shape == (0, 8) and trace_plus_features([], seq_likelihood=True).shape == (0, 11)


@pytest.mark.parametrize(
    ("lams", "k", "kernel", "seq", "thr"),
    [
        ((2.0, 4.0), 3, "exp", False, 0.5),
        ((0.5, 1.0, 8.0), 1, "hyperbolic", True, 0.3),
        ((3.0,), 5, "uniform", True, 0.9),
    ],
)
def test_features_match_a_naive_reference(lams: tuple[float, ...], k: int, kernel: str, seq: bool, thr: float) -> None:
    S, H, b = ragged(1)
    X = trace_plus_features(b, lams, k, kernel, seq, thr)
    assert X.shape == (len(S), len(feature_names(lams, seq, k)))
    for i, (s, h) in enumerate(zip(S, H, strict=True)):
        if len(s) == 0:
            assert np.isnan(X[i]).all()  # a zero-token answer: NaN in every feature
        else:
            np.testing.assert_allclose(X[i], naive_features(s, h, lams, k, kernel, seq, thr), rtol=1e-9, atol=1e-12)


def test_the_statistic_columns_are_the_statistics() -> None:
    """Built from `tracecal.signals.statistics`: the same numbers as before, bit for bit."""
    _, _, b = ragged(2)
    X = trace_plus_features(b, (2.0, 4.0), 3, "exp", True, 0.5)
    np.testing.assert_array_equal(X[:, 0], np.exp(trace_statistic("neg_first3_entropy", b)))
    np.testing.assert_array_equal(X[:, 1], np.exp(trace_statistic("neg_mean_entropy", b)))
    np.testing.assert_array_equal(X[:, 3], -trace_statistic("neg_entropy_slope", b))
    np.testing.assert_array_equal(X[:, 8], trace_statistic("min_prob", b))
    np.testing.assert_array_equal(X[:, 9], trace_statistic("norm_seq_prob", b))
    np.testing.assert_array_equal(X[:, 10], st_mod.low_prob_rate(b, 0.5))


def test_chunked_features_equal_whole() -> None:
    rng = np.random.default_rng(7)
    lens = rng.integers(100, 700, 200)  # > 2^16 tokens: chunked
    b = TraceBatch.from_lists([rng.gamma(1.0, 0.5, k) for k in lens], [rng.gamma(1.0, 1.0, k) for k in lens])
    X = trace_plus_features(b, seq_likelihood=True)
    parts = np.vstack(
        [trace_plus_features(b.select(np.arange(i, i + 50)), seq_likelihood=True) for i in range(0, 200, 50)]
    )
    np.testing.assert_array_equal(X, parts)


# ------------------------------------------------------------------ the one sweep against the separate passes


def separate_passes(b: TraceBatch, seq: bool) -> tuple[np.ndarray, np.ndarray]:
    """The implementation before the fused sweep, kept as the reference: TRACE by `trace_risk`'s operators and φ
    column by column, each operator reading every token again (chunked alike)."""
    from tracecal.signals.operators import (
        chunked,
        decayed_mean,
        length_norm_sum,
        seg_mean,
        slope,
        window_peak,
    )

    def risk(bb: TraceBatch) -> np.ndarray:
        seg = bb.segments
        r = 0.4 * decayed_mean(bb.entropy, seg, 2.0) + 0.4 * window_peak(bb.entropy, seg, 4)
        r = r + 0.2 * length_norm_sum(bb.surprisal, seg, 0.25)
        r[seg.lengths == 0] = np.nan
        return r

    def phi(bb: TraceBatch) -> np.ndarray:
        seg, H, s = bb.segments, bb.entropy, bb.surprisal
        cols = [np.exp(-st_mod.first_k_entropy(bb, 3)), np.exp(-seg_mean(H, seg))]
        cols += [np.log(np.where(seg.lengths > 0, seg.lengths, np.nan)), slope(H, seg)]
        cols += [np.exp(-decayed_mean(u, seg, lam)) for u in (H, s) for lam in (2.0, 4.0)]
        if seq:
            cols += [st_mod.min_prob(bb), st_mod.geo_mean_prob(bb), st_mod.low_prob_rate(bb, 0.5)]
        return np.column_stack(cols)

    return np.exp(-chunked(risk, b)), chunked(phi, b)


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 40), min_size=1, max_size=80),
    seed=st.integers(0, 2**31),
    chunk=st.sampled_from([8, 64, 1 << 16]),
    seq=st.booleans(),
)
def test_the_sweep_equals_the_separate_passes(lengths: list[int], seed: int, chunk: int, seq: bool) -> None:
    """Random ragged batches (zero-length traces included), one chunk or many: c_TRACE and φ of the one sweep equal
    the separate passes to 1e-12 (they are the same operations, so in fact bit for bit)."""
    rng = np.random.default_rng(seed)
    b = TraceBatch.from_lists([rng.gamma(1.0, 0.8, k) for k in lengths], [rng.gamma(1.0, 1.2, k) for k in lengths])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(features_mod, "CHUNK_TOKENS", chunk)
        mp.setattr(operators_mod.chunked, "__defaults__", (chunk,))
        ref_c, ref_phi = separate_passes(b, seq)
        c, phi = trace_and_features(b, seq_likelihood=seq)
        phi_alone = trace_plus_features(b, seq_likelihood=seq)
    np.testing.assert_allclose(c, ref_c, rtol=0, atol=1e-12)
    np.testing.assert_allclose(phi, ref_phi, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(phi, phi_alone)
    np.testing.assert_array_equal(c, trace_confidence(b))
    assert np.isnan(phi[np.asarray(lengths) == 0]).all() and np.isnan(c[np.asarray(lengths) == 0]).all()


def test_the_sweep_takes_any_config_and_rejects_bad_arguments() -> None:
    _, _, b = ragged(3)
    cfg = TraceConfig(alpha=0.5, beta=0.0, gamma=0.5, lam=3.0, kernel="hyperbolic")
    c, phi = trace_and_features(b, cfg, lams=(3.0, 1.0), kernel="exp")
    np.testing.assert_array_equal(c, trace_confidence(b, cfg))
    np.testing.assert_array_equal(phi, trace_plus_features(b, (3.0, 1.0)))
    with pytest.raises(ValueError, match="λ must be > 0"):
        trace_and_features(b, lams=(0.0,))
    with pytest.raises(ValueError, match="unknown decay kernel"):
        trace_plus_features(b, kernel="gauss")
    c0, phi0 = trace_and_features([])
    assert c0.shape == (0,) and phi0.shape == (0, 8)
