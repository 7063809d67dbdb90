"""Tests for tracecal.stats.metrics: agreement with scikit-learn, hand-worked examples, brute force, edge cases."""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import average_precision_score, brier_score_loss, roc_auc_score

from tracecal.stats import metrics as m
from tracecal.stats.metrics import SingleClassWarning

TOL = 1e-12
TIE_VALUES = [0.0, 0.1, 0.25, 0.3, 0.5, 0.7, 0.9, 1.0]


@st.composite
def labelled(draw, min_size: int = 2, max_size: int = 80, both_classes: bool = True, ties: bool | None = None):
    """(y, p) with p in [0, 1]; p either continuous or drawn from a small set (heavy ties)."""
    n = draw(st.integers(min_size, max_size))
    y = np.array(draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)), dtype=np.int64)
    if both_classes:
        # force both classes at two random positions
        i, j = draw(st.permutations(range(n)))[:2]
        y[i], y[j] = 0, 1
    if ties is None:
        ties = draw(st.booleans())
    if ties:
        p = draw(st.lists(st.sampled_from(TIE_VALUES), min_size=n, max_size=n))
    else:
        p = draw(st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=n, max_size=n))
    return y, np.array(p, dtype=np.float64)


# --------------------------------------------------------------------------------------------------
# agreement with scikit-learn


@settings(max_examples=200, deadline=None)
@given(labelled())
def test_auroc_matches_sklearn(data):
    y, s = data
    assert abs(m.auroc(y, s) - roc_auc_score(y, s)) < TOL


@settings(max_examples=200, deadline=None)
@given(labelled())
def test_auprc_matches_sklearn(data):
    y, s = data
    assert abs(m.auprc(y, s) - average_precision_score(y, s)) < TOL


@settings(max_examples=150, deadline=None)
@given(labelled(min_size=1, both_classes=False))
def test_brier_matches_sklearn(data):
    y, p = data
    assert abs(m.brier(y, p) - brier_score_loss(y, p, labels=[0, 1])) < TOL


@settings(max_examples=100, deadline=None)
@given(labelled(), st.floats(-1e6, 1e6), st.floats(1e-3, 1e3))
def test_ranking_metrics_invariant_to_monotone_transform(data, shift, scale):
    y, s = data
    t = s * scale + shift  # strictly increasing map keeps order and ties (up to float rounding)
    if not np.array_equal(np.argsort(s, kind="stable"), np.argsort(t, kind="stable")) or len(np.unique(s)) != len(
        np.unique(t)
    ):
        return
    assert abs(m.auroc(y, s) - m.auroc(y, t)) < 1e-9
    assert abs(m.auprc(y, s) - m.auprc(y, t)) < 1e-9
    assert abs(m.aurc(y, s) - m.aurc(y, t)) < 1e-9


def test_auroc_perfect_and_reversed_and_all_tied():
    y = np.array([0, 0, 1, 1])
    assert m.auroc(y, [0.1, 0.2, 0.8, 0.9]) == 1.0
    assert m.auroc(y, [0.9, 0.8, 0.2, 0.1]) == 0.0
    assert m.auroc(y, [0.5, 0.5, 0.5, 0.5]) == 0.5  # genuine tie, not a fallback
    assert m.auprc(y, [0.5, 0.5, 0.5, 0.5]) == 0.5  # base rate


# --------------------------------------------------------------------------------------------------
# ECE: hand-worked example


# 8 points, 10 equal-width bins, bin b = min(floor(10 p), 9):
#   i  p     y  bin
#   1  0.05  0  0
#   2  0.30  1  3   (exactly on the edge 0.3 -> bin [0.3, 0.4))
#   3  0.35  0  3
#   4  0.30  0  3   (edge again)
#   5  0.70  1  7   (edge 0.7)
#   6  0.75  1  7
#   7  1.00  1  9   (p = 1 -> last bin, closed at 1)
#   8  0.95  0  9
# bin 0: n=1, conf 0.05,                acc 0,   |gap| 0.05,  weight 1/8 -> 0.00625
# bin 3: n=3, conf 0.95/3 = 0.316667,   acc 1/3, |gap| 1/60,  weight 3/8 -> 1/160 = 0.00625
# bin 7: n=2, conf 0.725,               acc 1,   |gap| 0.275, weight 2/8 -> 0.06875
# bin 9: n=2, conf 0.975,               acc 1/2, |gap| 0.475, weight 2/8 -> 0.11875
# ECE = 0.00625 + 0.00625 + 0.06875 + 0.11875 = 0.2
# (Putting the two p = 0.3 points in bin 2 instead would give 0.05 + 0.04375 + ... != 0.2.)
ECE_P = np.array([0.05, 0.3, 0.35, 0.3, 0.7, 0.75, 1.0, 0.95])
ECE_Y = np.array([0, 1, 0, 0, 1, 1, 1, 0])


def test_ece_hand_worked():
    assert m.ece(ECE_Y, ECE_P) == pytest.approx(0.2, abs=1e-15)


def test_reliability_bins_hand_worked():
    rb = m.reliability_bins(ECE_Y, ECE_P)
    np.testing.assert_array_equal(rb.count, [1, 0, 0, 3, 0, 0, 0, 2, 0, 2])
    nz = rb.count > 0
    np.testing.assert_allclose(rb.confidence[nz], [0.05, 0.95 / 3, 0.725, 0.975], rtol=0, atol=1e-15)
    np.testing.assert_allclose(rb.accuracy[nz], [0.0, 1 / 3, 1.0, 0.5], rtol=0, atol=1e-15)
    assert np.isnan(rb.confidence[~nz]).all() and np.isnan(rb.accuracy[~nz]).all()
    np.testing.assert_allclose(rb.lower, np.arange(10) / 10)
    np.testing.assert_allclose(rb.upper, np.arange(1, 11) / 10)
    assert rb.n == 8
    assert rb.ece() == m.ece(ECE_Y, ECE_P)


def test_ece_bin_edges_land_in_upper_bin_for_any_n_bins():
    # (1/49)*49 = 0.9999999999999999 in float64: edge values must still open their own bin
    for n_bins in (3, 7, 10, 15, 49, 100):
        p = np.arange(n_bins) / n_bins
        rb = m.reliability_bins(np.ones(n_bins, dtype=int), p, n_bins)
        np.testing.assert_array_equal(rb.count, np.ones(n_bins))


def test_ece_perfect_and_worst():
    assert m.ece([0, 1], [0.0, 1.0]) == 0.0
    assert m.ece([1, 0], [0.0, 1.0]) == 1.0
    # within-bin averages: 0.55 twice, one right one wrong -> acc 0.5, conf 0.55
    assert m.ece([0, 1], [0.55, 0.55]) == pytest.approx(0.05, abs=1e-15)


@settings(max_examples=100, deadline=None)
@given(labelled(min_size=1, both_classes=False), st.integers(1, 20))
def test_ece_properties(data, n_bins):
    y, p = data
    e = m.ece(y, p, n_bins)
    assert 0.0 <= e <= 1.0
    # order-independent
    perm = np.random.default_rng(0).permutation(y.size)
    assert m.ece(y[perm], p[perm], n_bins) == pytest.approx(e, abs=1e-12)
    rb = m.reliability_bins(y, p, n_bins)
    assert rb.count.sum() == y.size
    # a single bin reduces to |mean(y) - mean(p)|
    assert m.ece(y, p, 1) == pytest.approx(abs(y.mean() - p.mean()), abs=1e-12)


# --------------------------------------------------------------------------------------------------
# adaptive ECE


def test_adaptive_ece_hand_worked():
    # sorted p: 0.1 0.2 | 0.3 0.4 | 0.6 | 0.9   (6 points, 4 bins -> array_split sizes 2,2,1,1)
    p = np.array([0.9, 0.1, 0.4, 0.2, 0.6, 0.3])
    y = np.array([1, 0, 1, 0, 0, 0])
    # groups: {0.1:0, 0.2:0} conf .15 acc 0 gap .15 w 2/6
    #         {0.3:0, 0.4:1} conf .35 acc .5 gap .15 w 2/6
    #         {0.6:0}        conf .6  acc 0  gap .6  w 1/6
    #         {0.9:1}        conf .9  acc 1  gap .1  w 1/6
    expected = (2 * 0.15 + 2 * 0.15 + 0.6 + 0.1) / 6
    assert m.adaptive_ece(y, p, n_bins=4) == pytest.approx(expected, abs=1e-15)


@settings(max_examples=100, deadline=None)
@given(labelled(min_size=1, both_classes=False), st.integers(1, 30))
def test_adaptive_ece_properties(data, n_bins):
    y, p = data
    a = m.adaptive_ece(y, p, n_bins)
    assert 0.0 <= a <= 1.0 + 1e-12
    assert m.adaptive_ece(y, p, 1) == pytest.approx(abs(y.mean() - p.mean()), abs=1e-12)
    # order-independent, even with ties straddling group boundaries
    perm = np.random.default_rng(1).permutation(y.size)
    assert m.adaptive_ece(y[perm], p[perm], n_bins) == pytest.approx(a, abs=1e-12)
    # at least n bins: every sample alone -> mean |y - p|
    assert m.adaptive_ece(y, p, max(n_bins, y.size)) == pytest.approx(np.mean(np.abs(y - p)), abs=1e-12)


def test_adaptive_ece_matches_array_split_definition():
    rng = np.random.default_rng(3)
    for n in (5, 10, 37, 100):
        p = rng.random(n)
        y = (rng.random(n) < p).astype(int)
        order = np.argsort(p)
        groups = [g for g in np.array_split(order, 10) if g.size]
        expected = sum(g.size / n * abs(y[g].mean() - p[g].mean()) for g in groups)
        assert m.adaptive_ece(y, p) == pytest.approx(expected, abs=1e-12)


# --------------------------------------------------------------------------------------------------
# AURC, risk–coverage, selective risk vs brute force


def _brute_curve_fixed_order(y_sorted: np.ndarray) -> np.ndarray:
    err = 1 - y_sorted
    return np.array([err[:k].sum() / k for k in range(1, len(err) + 1)])


def _brute_expected_curve(y: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Average the risk curve over every ordering of the samples consistent with score-descending."""
    curves = []
    for perm in itertools.permutations(range(len(y))):
        perm = np.array(perm)
        if np.any(np.diff(s[perm]) > 0):  # keep only orders that sort scores descending
            continue
        curves.append(_brute_curve_fixed_order(y[perm]))
    return np.mean(curves, axis=0)


@settings(max_examples=60, deadline=None)
@given(labelled(min_size=1, max_size=6, both_classes=False, ties=True))
def test_aurc_and_curve_match_brute_force_over_tie_orders(data):
    y, s = data
    expected = _brute_expected_curve(y, s)
    cov, risk = m.risk_coverage_curve(y, s)
    np.testing.assert_allclose(cov, np.arange(1, y.size + 1) / y.size)
    np.testing.assert_allclose(risk, expected, rtol=0, atol=1e-12)
    assert m.aurc(y, s) == pytest.approx(expected.mean(), abs=1e-12)
    for c in (0.1, 0.5, 0.9, 1.0):
        k = min(max(math.ceil(round(c * y.size, 9)), 1), y.size)
        assert m.selective_risk(y, s, c) == pytest.approx(expected[k - 1], abs=1e-12)


@settings(max_examples=100, deadline=None)
@given(labelled(min_size=1, max_size=60, both_classes=False, ties=False))
def test_aurc_without_ties_is_plain_definition(data):
    y, s = data
    if len(np.unique(s)) != len(s):
        return
    order = np.argsort(-s)
    curve = _brute_curve_fixed_order(y[order])
    assert m.aurc(y, s) == pytest.approx(curve.mean(), abs=1e-12)
    assert m.selective_risk(y, s, 1.0) == pytest.approx(1 - y.mean(), abs=1e-12)


def test_selective_risk_hand_worked():
    s = np.arange(10, 0, -1) / 10  # 1.0, 0.9, ..., 0.1 (descending)
    y = np.array([1, 1, 0, 1, 1, 0, 0, 1, 0, 0])
    assert m.selective_risk(y, s, 0.1) == 0.0  # top 1
    assert m.selective_risk(y, s, 0.3) == pytest.approx(1 / 3)  # top 3 (0.3*10 must not round up to 4)
    assert m.selective_risk(y, s, 0.5) == pytest.approx(1 / 5)
    assert m.selective_risk(y, s, 0.25) == pytest.approx(1 / 3)  # ceil(2.5) = 3
    assert m.selective_risk(y, s, 1.0) == pytest.approx(0.5)
    assert m.selective_risk(y, s, 1e-9) == 0.0  # at least one sample
    # 0.1 * 30 = 3.0000000000000004 in float64: still the top 3
    y30 = np.r_[[1, 1, 1, 0], np.ones(26, dtype=int)]
    s30 = np.linspace(1, 0, 30)
    assert m.selective_risk(y30, s30, 0.1) == 0.0


def test_aurc_perfect_ranking_and_ties_example():
    # perfect ranking: 3 right then 2 wrong -> risks 0,0,0,1/4,2/5
    y = np.array([1, 1, 1, 0, 0])
    assert m.aurc(y, [0.9, 0.8, 0.7, 0.2, 0.1]) == pytest.approx((1 / 4 + 2 / 5) / 5)
    # all tied: expected errors among top k = k * 2/5 -> risk 0.4 at every k
    assert m.aurc(y, np.full(5, 0.5)) == pytest.approx(0.4)


@pytest.mark.parametrize("coverage", [0.0, -0.1, 1.5, float("nan"), "0.5"])
def test_selective_risk_bad_coverage(coverage):
    with pytest.raises(ValueError, match="coverage"):
        m.selective_risk([0, 1], [0.1, 0.2], coverage)


# --------------------------------------------------------------------------------------------------
# compute_all


def test_compute_all_keys_and_values():
    rng = np.random.default_rng(0)
    s = rng.normal(size=200)
    p = 1 / (1 + np.exp(-s))
    y = (rng.random(200) < p).astype(int)
    out = m.compute_all(y, s, p)
    assert set(out) == {
        "brier",
        "ece",
        "aece",
        "auroc",
        "auprc",
        "aurc",
        "risk@10",
        "risk@50",
        "risk@90",
        "base_rate",
        "n",
        "n_correct",
    }
    assert out["brier"] == m.brier(y, p)
    assert out["ece"] == m.ece(y, p)
    assert out["aece"] == m.adaptive_ece(y, p)
    assert out["auroc"] == m.auroc(y, s)
    assert out["auprc"] == m.auprc(y, s)
    assert out["aurc"] == m.aurc(y, s)
    assert out["risk@10"] == m.selective_risk(y, s, 0.1)
    assert out["risk@50"] == m.selective_risk(y, s, 0.5)
    assert out["risk@90"] == m.selective_risk(y, s, 0.9)
    assert out["base_rate"] == y.mean()
    assert out["n"] == 200 and out["n_correct"] == int(y.sum())


def test_compute_all_rejects_bad_prob_but_not_unbounded_score():
    y = [0, 1, 1]
    m.compute_all(y, [-3.0, 5.0, 10.0], [0.1, 0.5, 0.9])  # raw score may be any real
    with pytest.raises(ValueError, match="prob must be probabilities"):
        m.compute_all(y, [0.1, 0.5, 0.9], [-3.0, 5.0, 10.0])


# --------------------------------------------------------------------------------------------------
# single class and bad input


@pytest.mark.parametrize("label", [0, 1])
def test_single_class_gives_nan_with_warning(label):
    y = np.full(5, label)
    s = np.array([0.1, 0.4, 0.4, 0.8, 1.0])
    for fn in (m.auroc, m.auprc):
        with pytest.warns(SingleClassWarning, match="single class"):
            assert math.isnan(fn(y, s))
    with pytest.warns(SingleClassWarning):
        out = m.compute_all(y, s, s)
    assert math.isnan(out["auroc"]) and math.isnan(out["auprc"])
    for key in ("brier", "ece", "aece", "aurc", "risk@10", "risk@50", "risk@90", "base_rate"):
        assert math.isfinite(out[key]), key
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # calibration and risk metrics stay silent
        assert m.brier(y, s) == pytest.approx(np.mean((s - label) ** 2))
        m.ece(y, s)
        m.adaptive_ece(y, s)
        assert m.aurc(y, s) == 1.0 - label


ALL_PAIR_FUNCS = [m.brier, m.ece, m.adaptive_ece, m.auroc, m.auprc, m.aurc, m.reliability_bins]


@pytest.mark.parametrize("fn", ALL_PAIR_FUNCS)
def test_bad_input(fn):
    with pytest.raises(ValueError, match=r"different lengths \(3 vs 2\)"):
        fn([0, 1, 1], [0.1, 0.2])
    with pytest.raises(ValueError, match="empty"):
        fn([], [])
    with pytest.raises(ValueError, match=r"only labels 0 and 1; found 2 invalid"):
        fn([0, 2, -1], [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="invalid"):
        fn([0.0, np.nan, 1.0], [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match=r"3 non-finite value\(s\) out of 4 \(2 NaN, 1 ±inf\)"):
        fn([0, 1, 1, 0], [np.nan, 0.2, np.inf, np.nan])
    with pytest.raises(ValueError, match="1-D"):
        fn([[0, 1]], [[0.1, 0.2]])


@pytest.mark.parametrize("fn", [m.brier, m.ece, m.adaptive_ece, m.reliability_bins])
def test_probabilities_out_of_range(fn):
    with pytest.raises(ValueError, match=r"\[0, 1\]; 2 value\(s\) out of 3"):
        fn([0, 1, 1], [-0.1, 0.5, 1.2])


@pytest.mark.parametrize("fn", [m.auroc, m.auprc, m.aurc])
def test_ranking_metrics_accept_unbounded_scores(fn):
    assert math.isfinite(fn([0, 1, 1, 0], [-5.0, 3.0, 100.0, 2.0]))


def test_bool_and_float_labels_accepted():
    s = [0.2, 0.7, 0.4]
    assert m.auroc([False, True, True], s) == m.auroc([0.0, 1.0, 1.0], s) == m.auroc([0, 1, 1], s)


@pytest.mark.parametrize("n_bins", [0, -1, 2.5, True])
def test_bad_n_bins(n_bins):
    with pytest.raises(ValueError, match="n_bins"):
        m.ece([0, 1], [0.2, 0.8], n_bins)
    with pytest.raises(ValueError, match="n_bins"):
        m.adaptive_ece([0, 1], [0.2, 0.8], n_bins)
