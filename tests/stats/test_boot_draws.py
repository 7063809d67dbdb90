"""The bootstrap draws as matrix products (`tracecal.stats.boot_draws`) against the cumulative-sum implementation
they replace in the protocol (`tracecal.stats.bootstrap.blocked_split_draws`): AUROC bit for bit, Brier to 1e-12 —
continuous scores, ties short and long, small units and chunks (every boundary case), float64 fallback, fitted
(per-split) scores."""

from __future__ import annotations

import numpy as np
import pytest

from tracecal.stats import boot_draws
from tracecal.stats.boot_draws import layout, layout_auroc, sorted_split_draws, split_order_draws
from tracecal.stats.bootstrap import (
    auroc_plan,
    blocked_split_draws,
    bootstrap_counts,
    planned_auroc,
    sorted_auroc_plans,
)
from tracecal.stats.splits import stratified_split


def _task(n: int, seed: int, scores: str) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.4).astype(np.int64)
    s = rng.normal(size=n) + y
    if scores == "rounded":  # short ties
        s = np.round(s, 1)
    elif scores == "coarse":  # a few values: ties far longer than a unit
        s = np.round(s)
    elif scores == "mixed":  # continuous, with one long tie
        s[rng.random(n) < 0.3] = 0.5
    return y, s


def _splits(y: np.ndarray, S: int) -> tuple[np.ndarray, np.ndarray]:
    evals = np.stack([stratified_split(y, 0.35, k)[1] for k in range(S)])
    member = np.zeros((S, y.size), dtype=bool)
    member[np.arange(S)[:, None], evals] = True
    return evals, member


def _reference(y: np.ndarray, s: np.ndarray, evals: np.ndarray, sq: np.ndarray, W: np.ndarray) -> dict:
    member = np.zeros((len(evals), y.size), dtype=bool)
    member[np.arange(len(evals))[:, None], evals] = True
    plans = sorted_auroc_plans(y, s, np.argsort(s, kind="stable"), member)
    return blocked_split_draws(plans, evals, sq, W)


def _check(got: dict, want: dict) -> None:
    np.testing.assert_array_equal(got["auroc"], want["auroc"])
    np.testing.assert_allclose(got["brier"], want["brier"], rtol=0, atol=1e-12)


@pytest.mark.parametrize("scores", ["continuous", "rounded", "coarse", "mixed"])
@pytest.mark.parametrize("small", [False, True])
def test_one_sort_draws_equal_the_cumulative_sums(monkeypatch: pytest.MonkeyPatch, scores: str, small: bool) -> None:
    """Every split's draws from one layout equal `blocked_split_draws`, whatever the ties; ``small`` cuts units of
    3 slots, 2 units per chunk and 7 resamples per row block, so every boundary (a tie closing a unit early, a tie
    unit between chunks, a partial last unit and block) occurs many times."""
    if small:
        monkeypatch.setattr(boot_draws, "UNITS_AT_ONCE", 2)
        monkeypatch.setattr(boot_draws, "ROW_ELEMENTS", 7 * 6)
    y, s = _task(500, {"continuous": 1, "rounded": 2, "coarse": 3, "mixed": 4}[scores], scores)
    evals, member = _splits(y, 6)
    sq = np.random.default_rng(5).random(evals.shape)
    order = np.argsort(s, kind="stable")
    for dtype, order_ in ((np.uint8, "F"), (np.uint8, "C"), (np.int32, "C")):
        W = bootstrap_counts(y, 30, seed=7, dtype=dtype, order=order_)
        want = _reference(y, s, evals, sq, W)
        if small:
            lay = layout(y, s, order, member, L=3)
            auc, P, N = layout_auroc(lay, y, member, W)
            np.testing.assert_array_equal(
                auc, np.stack([planned_auroc(p, W) for p in sorted_auroc_plans(y, s, order, member)])
            )
            np.testing.assert_array_equal(P + N, np.stack([W[:, ev].sum(axis=1) for ev in evals]))
        _check(sorted_split_draws(y, s, order, member, evals, sq, W), want)


def test_units_never_split_a_tie_and_long_ties_are_units_of_their_own() -> None:
    y, s = _task(300, 6, "mixed")
    order = np.argsort(s, kind="stable")
    evals, member = _splits(y, 3)
    lay = layout(y, s, order, member, L=4)
    slot = lay.slot.reshape(-1, 4)
    assert lay.ties.sum() == 1 and (slot[lay.ties] == -1).all()  # one long tie: its own unit
    (tie,) = np.flatnonzero(lay.ties)
    assert (s[lay.tie_pos[tie]] == 0.5).all() and lay.tie_pos[tie].size == (s == 0.5).sum()
    values = [set(s[row[row >= 0]]) for row in slot[~lay.ties]]
    first_last = [(min(v), max(v)) for v in values if v]
    assert all(a[1] < b[0] for a, b in zip(first_last, first_last[1:], strict=False))  # units in score order
    assert sorted(np.r_[lay.slot[lay.slot >= 0], lay.tie_pos[tie]]) == list(range(300))


def test_sums_beyond_float32_are_redone_in_float64() -> None:
    """Weights whose sums pass 2^23 (255 on each of 40,000 answers) are summed in float64: still exact."""
    rng = np.random.default_rng(9)
    n = 40_000
    y, s = (rng.random(n) < 0.5).astype(np.int64), rng.normal(size=n)
    W = np.full((2, n), 255, dtype=np.uint8)
    W[1, ::3] = 0
    member = np.ones((1, n), dtype=bool)
    auc, _, _ = layout_auroc(layout(y, s, np.argsort(s, kind="stable"), member), y, member, W)
    np.testing.assert_array_equal(auc[0], planned_auroc(auroc_plan(y, s), W))


def test_single_class_samples_give_nan_and_empty_rows_none() -> None:
    y, s = _task(200, 10, "continuous")
    member = np.zeros((2, 200), dtype=bool)
    member[0, y == 1] = True  # only correct answers: AUROC undefined
    member[1, :120] = True
    W = bootstrap_counts(y, 5, seed=1, order="F")
    auc, P, N = layout_auroc(layout(y, s, np.argsort(s, kind="stable"), member), y, member, W)
    assert np.isnan(auc[0]).all() and (N[0] == 0).all() and (P[0] == W[:, y == 1].sum(axis=1)).all()
    np.testing.assert_array_equal(auc[1], planned_auroc(auroc_plan(y[:120], s[:120], np.arange(120)), W))
    assert layout_auroc(layout(y[:0], s[:0], np.arange(0), member[:, :0]), y[:0], member[:, :0], W[:, :0])[0].shape == (
        2,
        5,
    )


@pytest.mark.parametrize("scores", ["continuous", "rounded", "coarse"])
def test_per_split_scores_equal_the_cumulative_sums(scores: str) -> None:
    """Scores fitted per split (a layout per split) against per-split plans."""
    y, _ = _task(400, 11, "continuous")
    evals, _ = _splits(y, 5)
    rng = np.random.default_rng(12)
    raw = rng.normal(size=evals.shape) + y[evals]
    raw = {"continuous": raw, "rounded": np.round(raw, 1), "coarse": np.round(raw)}[scores]
    sq = rng.random(evals.shape)
    W = bootstrap_counts(y, 25, seed=3, dtype=np.uint8, order="F")
    plans = [auroc_plan(y[ev], raw[r], ev) for r, ev in enumerate(evals)]
    _check(split_order_draws(y, evals, raw, sq, W), blocked_split_draws(plans, evals, sq, W))
