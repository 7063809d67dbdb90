"""Every metric on S splits at once (`tracecal.stats.split_metrics`) equals `tracecal.stats.metrics.compute_all` split
by split and scikit-learn, on random data with ties, from one sort of the task's scores."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import average_precision_score, brier_score_loss, roc_auc_score

from tracecal.stats.metrics import SingleClassWarning, compute_all
from tracecal.stats.split_metrics import by_probability, restrict, sort_rows, split_metrics
from tracecal.stats.splits import stratified_split

EXACT = ("auroc", "aurc", "risk@10", "risk@50", "risk@90", "aece", "base_rate", "n", "n_correct")
"""The same arithmetic in the same order: equal bit for bit. AUPRC, Brier and ECE sum floats in another order."""


def _task(seed: int, n: int, ties: int | None, monotone: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < rng.uniform(0.05, 0.95)).astype(np.int64)
    s = rng.normal(size=n) + y
    if ties is not None:
        s = np.round(s, ties)
    p = 1.0 / (1.0 + np.exp(-(0.4 - 1.3 * s))) if monotone else rng.random(n)  # decreasing in s, or any order
    return y, s, np.round(p, 2) if seed % 3 == 0 else p


def _splits(y: np.ndarray, S: int) -> tuple[list[np.ndarray], np.ndarray]:
    evals = [stratified_split(y, 0.35, k)[1] for k in range(S)]
    member = np.zeros((S, len(y)), dtype=bool)
    for k, ev in enumerate(evals):
        member[k, ev] = True
    return evals, member


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    n=st.integers(3, 400),
    ties=st.sampled_from([None, 0, 1]),
    monotone=st.booleans(),
)
def test_all_splits_from_one_sort_equal_compute_all_per_split(
    seed: int, n: int, ties: int | None, monotone: bool
) -> None:
    y, s, p = _task(seed, n, ties, monotone)
    evals, member = _splits(y, 5)
    idx = restrict(np.argsort(s, kind="stable"), member)  # one sort for the 5 splits
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SingleClassWarning)
        got = split_metrics(y[idx], s[idx], p[idx])
        for k, ev in enumerate(evals):
            for key, want in compute_all(y[ev], s[ev], p[ev]).items():
                if key in EXACT or np.isnan(want):
                    np.testing.assert_array_equal(got[key][k], want, err_msg=key)
                else:
                    assert got[key][k] == pytest.approx(want, abs=1e-12), key


def test_equal_to_scikit_learn_with_ties() -> None:
    rng = np.random.default_rng(4)
    for trial in range(30):
        y, s, p = _task(trial, int(rng.integers(20, 3000)), [None, 0, 1][trial % 3], bool(trial % 2))
        if y.min() == y.max():
            continue
        evals, member = _splits(y, 4)
        idx = restrict(np.argsort(s, kind="stable"), member)
        got = split_metrics(y[idx], s[idx], p[idx])
        for k, ev in enumerate(evals):
            assert got["auroc"][k] == pytest.approx(roc_auc_score(y[ev], s[ev]), abs=1e-12)
            assert got["auprc"][k] == pytest.approx(average_precision_score(y[ev], s[ev]), abs=1e-12)
            assert got["brier"][k] == pytest.approx(brier_score_loss(y[ev], p[ev]), abs=1e-12)


def test_rows_sorted_by_their_own_scores() -> None:
    """A fitted score differs per split: each row sorted on its own (`sort_rows`) gives the same numbers."""
    rng = np.random.default_rng(1)
    y = (rng.random((3, 50)) < 0.4).astype(np.int64)
    s, p = np.round(rng.normal(size=(3, 50)) + y, 1), rng.random((3, 50))
    ss, ys, ps = sort_rows(s, y, p)
    assert (np.diff(ss, axis=1) >= 0).all()
    got = split_metrics(ys, ss, ps)
    for r in range(3):
        want = compute_all(y[r], s[r], p[r])
        assert all(got[k][r] == pytest.approx(v, abs=1e-12) for k, v in want.items())


def test_by_probability_orders_ties_wrong_first_without_a_sort_when_monotone() -> None:
    y = np.array([[1, 0, 1, 0, 0], [0, 1, 1, 0, 1], [1, 0, 0, 1, 0]])
    p = np.array([[0.1, 0.2, 0.2, 0.2, 0.9], [0.9, 0.5, 0.5, 0.5, 0.1], [0.3, 0.1, 0.9, 0.3, 0.5]])
    ys, ps = by_probability(y, p)
    for r in range(3):
        o = np.lexsort((y[r], p[r]))
        np.testing.assert_array_equal(ps[r], p[r, o])
        np.testing.assert_array_equal(ys[r], y[r, o])


def test_single_class_rows_and_bad_input() -> None:
    y = np.array([[0, 0, 0, 0], [0, 0, 1, 1]])
    s = np.array([[0.1, 0.2, 0.3, 0.4], [0.1, 0.2, 0.3, 0.4]])
    with pytest.warns(SingleClassWarning, match="1 of 2 split"):
        got = split_metrics(y, s, np.full((2, 4), 0.5))
    assert np.isnan(got["auroc"][0]) and np.isnan(got["auprc"][0]) and got["auroc"][1] == 1.0
    assert got["aurc"][0] == 1.0 and got["brier"][0] == 0.25  # every answer wrong: risk 1 at every coverage
    with pytest.raises(ValueError, match="finite"):
        split_metrics(y, np.full((2, 4), np.nan), np.full((2, 4), 0.5))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        split_metrics(y, s, np.full((2, 4), 1.5))
    with pytest.raises(ValueError, match="different sizes"):
        restrict(np.arange(4), np.array([[True, False, False, False], [True, True, False, False]]))
