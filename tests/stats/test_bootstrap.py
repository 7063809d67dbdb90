"""Paired bootstrap intervals: weighted metrics equal the plain ones, intervals cover a known AUROC difference at
their nominal rate (also through the split protocol), and the comparisons reach results.json, the tables and the
report."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from tracecal.estimators import Inputs
from tracecal.evaluation.protocol import ScoreConfig, TaskStats, score_tasks
from tracecal.evaluation.results import results_markdown, results_tables
from tracecal.stats import bootstrap as bootstrap_mod
from tracecal.stats.bootstrap import (
    auroc_plan,
    blocked_split_draws,
    bootstrap_counts,
    compare,
    comparisons,
    enough_per_class,
    percentile_interval,
    planned_auroc,
    sorted_auroc_plans,
    split_draws,
    weighted_auroc,
    weighted_brier,
)
from tracecal.stats.metrics import auroc, brier
from tracecal.stats.splits import stratified_split
from tracecal.traces.trace import TraceBatch


def test_weighted_metrics_equal_the_plain_ones_and_an_expanded_resample() -> None:
    rng = np.random.default_rng(0)
    n = 150
    y = (rng.random(n) < 0.3).astype(int)
    s = np.round(rng.normal(size=n) + y, 1)  # many ties
    p = rng.random(n)
    assert weighted_auroc(y, s, np.ones(n))[0] == pytest.approx(auroc(y, s), abs=1e-12)
    assert weighted_brier(y, p, np.ones(n))[0] == pytest.approx(brier(y, p), abs=1e-12)
    W = bootstrap_counts(y, 50, seed=1)
    assert W.shape == (50, n) and (W.sum(axis=1) == n).all() and (W[:, y == 1].sum(axis=1) == y.sum()).all()
    a, b = weighted_auroc(y, s, W), weighted_brier(y, p, W)
    for r in (0, 17, 49):
        idx = np.repeat(np.arange(n), W[r])  # the resample written out
        assert a[r] == pytest.approx(auroc(y[idx], s[idx]), abs=1e-12)
        assert b[r] == pytest.approx(brier(y[idx], p[idx]), abs=1e-12)
    ev = np.sort(rng.permutation(n)[:90])  # columns of a subset, without copying the weights
    np.testing.assert_allclose(weighted_auroc(y[ev], s[ev], W, ev), weighted_auroc(y[ev], s[ev], W[:, ev]))
    np.testing.assert_allclose(weighted_brier(y[ev], p[ev], W, ev), weighted_brier(y[ev], p[ev], W[:, ev]))
    assert np.isnan(weighted_auroc(np.zeros(5, int), np.arange(5.0), np.ones(5)))[0]


def test_bad_weights_and_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="weights must have shape"):
        weighted_auroc([0, 1], [0.1, 0.2], np.ones((3, 5)))
    with pytest.raises(ValueError, match="n_boot"):
        bootstrap_counts([0, 1], -1)
    with pytest.raises(ValueError, match="level"):
        ScoreConfig(["trace"], level=1.5).validate()
    with pytest.raises(ValueError, match="alpha"):
        ScoreConfig(["trace"], sel_alpha=0.0).validate()


def _binormal(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Correlated scores of two estimators with known AUROCs Φ(μ/√2): 1.0 and 0.5 separation."""
    y = (rng.random(n) < 0.3).astype(int)
    e1, e2 = rng.normal(size=(2, n))
    a = 1.0 * y + e1
    b = 0.5 * y + 0.6 * e1 + 0.8 * e2
    return y, a, b, float(norm.cdf(1.0 / math.sqrt(2)) - norm.cdf(0.5 / math.sqrt(2)))


@pytest.mark.parametrize("n_splits", [1, 5])
def test_paired_intervals_cover_a_known_auroc_difference_at_the_nominal_rate(n_splits: int) -> None:
    """200 synthetic tasks × 200 resamples: the 90 % and 95 % intervals of AUROC(A) − AUROC(B) (mean over
    evaluation splits, as the protocol reports it) cover the true difference at about their nominal rates; an
    unpaired interval (independent resamples for A and B) is too wide and would over-cover."""
    rng = np.random.default_rng(123)
    reps, hits90, hits95, unpaired95, widths = 200, 0, 0, 0, []
    for r in range(reps):
        y, a, b, truth = _binormal(rng, 300)
        splits = [stratified_split(y, 0.35, s)[1] for s in range(n_splits)] if n_splits > 1 else [np.arange(300)]
        W = bootstrap_counts(y, 200, seed=r)
        da = split_draws("auroc", y, splits, [a[ev] for ev in splits], W)
        db = split_draws("auroc", y, splits, [b[ev] for ev in splits], W)
        diff = float(np.mean([auroc(y[ev], a[ev]) - auroc(y[ev], b[ev]) for ev in splits]))
        c90, c95 = compare(da, db, diff, 0.90), compare(da, db, diff, 0.95)
        hits90 += c90["lo"] <= truth <= c90["hi"]
        hits95 += c95["lo"] <= truth <= c95["hi"]
        widths.append(c95["hi"] - c95["lo"])
        db_indep = split_draws("auroc", y, splits, [b[ev] for ev in splits], bootstrap_counts(y, 200, seed=10_000 + r))
        lo, hi = percentile_interval(da - db_indep, 0.95)
        unpaired95 += lo <= truth <= hi
    sd90, sd95 = math.sqrt(0.9 * 0.1 / reps), math.sqrt(0.95 * 0.05 / reps)  # Monte-Carlo error of a coverage
    assert abs(hits90 / reps - 0.90) <= 3 * sd90, hits90
    assert abs(hits95 / reps - 0.95) <= 3 * sd95, hits95
    assert np.median(widths) < 0.2
    assert unpaired95 / reps > 0.985  # pairing matters: the scores are correlated, so unpaired is far too wide


def test_compare_verdicts_and_best_baseline() -> None:
    up, flat = np.linspace(0.01, 0.05, 100), np.zeros(100)
    assert compare(up, flat, 0.03, 0.95)["verdict"] == "better"
    assert compare(up, flat, 0.03, 0.95, lower_is_better=True)["verdict"] == "worse"
    assert compare(up - 0.03, flat, 0.0, 0.95)["verdict"] == "n.s."
    assert compare(np.full(100, np.nan), flat, 0.0, 0.95)["verdict"] == "n/a"
    draws = {e: {"auroc": flat + i / 100, "brier": flat} for i, e in enumerate(["trace", "p_true", "min_prob"])}
    means = {
        "trace": {"auroc": 0.9, "brier": 0.1},
        "p_true": {"auroc": 0.6, "brier": 0.1},
        "min_prob": {"auroc": 0.7, "brier": 0.1},
    }
    out = comparisons(draws, means, {"trace": "TRACE", "p_true": "x", "min_prob": "y"}, 0.95)
    assert out["baseline"] == "min_prob"  # TRACE's own family is never the baseline
    assert set(out["estimators"]) == {"trace", "p_true"}
    assert out["estimators"]["trace"]["auroc"]["diff"] == pytest.approx(0.2)
    assert enough_per_class([1] * 10 + [0] * 10) and not enough_per_class([1] * 2 + [0] * 300)


def _task(name: str, n: int, seed: int, signal: float) -> TaskStats:
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.4).astype(np.int64)
    lengths = rng.integers(2, 8, n)
    H = [list(rng.gamma(2.0, 0.5 if y[i] else 1.0, lengths[i])) for i in range(n)]
    S = [list(rng.gamma(1.5, 0.5, lengths[i])) for i in range(n)]
    p_true = np.clip(0.5 + signal * (y - 0.5) + 0.2 * rng.normal(size=n), 0, 1)
    return TaskStats(name, [f"q{i}" for i in range(n)], y, Inputs(TraceBatch.from_lists(S, H), p_true=p_true), "r")


def test_score_tasks_writes_comparisons_into_results_tables_and_markdown() -> None:
    data = [_task("a", 160, 0, 0.6), _task("b", 120, 1, 0.0)]
    cfg = ScoreConfig(estimators=["trace", "neg_mean_entropy", "p_true"], n_seeds=3, n_boot=300, min_per_class=0)
    res = score_tasks(data, cfg)
    comp = res.to_json()["statistics"]["comparisons"]
    assert set(comp) == {"a", "b", "average"} and comp["a"]["baseline"] == "p_true"  # p_true carries the signal
    assert comp["a"]["n_boot"] == 300 and comp["a"]["level"] == 0.95
    c = comp["a"]["estimators"]["trace"]["auroc"]
    means = res.metrics["a"]
    assert c["diff"] == pytest.approx(means["trace"]["auroc"]["mean"] - means["p_true"]["auroc"]["mean"])
    assert c["lo"] <= c["diff"] <= c["hi"] and c["verdict"] == "worse"
    assert res.draws["a"]["trace"]["auroc"].shape == (300,)
    md = results_markdown(res)
    assert "◆" in md and "▼" in md and "paired bootstrap interval" in md
    assert any("◆" in str(cell) for t in results_tables(res, ["auroc"]) for col in t.columns for cell in col._cells)
    assert "sel_coverage" in res.metrics["a"]["trace"] and 0 <= res.metrics["a"]["trace"]["sel_coverage"]["mean"] <= 1
    assert score_tasks(data, ScoreConfig(["trace", "p_true"], n_seeds=2, n_boot=0)).statistics["comparisons"] == {}


def one_draw_counts(y: np.ndarray, n_boot: int, seed: int, stratified: bool = True) -> np.ndarray:
    """`bootstrap_counts` before it drew in blocks, kept as the reference: all (B, |class|) indices of a class at
    once."""
    rng = np.random.default_rng(seed)
    n = y.size
    groups = [np.flatnonzero(y == c) for c in (0, 1)] if stratified else [np.arange(n)]
    flat = np.zeros(n_boot * n, dtype=np.int32)
    rows = np.arange(n_boot, dtype=np.int64)[:, None] * n
    for g in groups:
        if g.size:
            flat += np.bincount((rows + g[rng.integers(0, g.size, (n_boot, g.size))]).ravel(), minlength=n_boot * n)
    return flat.reshape(n_boot, n)


@pytest.mark.parametrize("block", [1 << 22, 7, 1])
def test_counts_drawn_in_blocks_equal_one_draw(monkeypatch: pytest.MonkeyPatch, block: int) -> None:
    monkeypatch.setattr(bootstrap_mod, "BLOCK_ELEMENTS", block)
    rng = np.random.default_rng(3)
    for n, B, strat in ((300, 40, True), (57, 9, False), (1, 3, True), (25, 0, True)):
        y = (rng.random(n) < 0.3).astype(int)
        want = one_draw_counts(y, B, seed=n, stratified=strat)
        got = bootstrap_counts(y, B, seed=n, stratified=strat)
        small = bootstrap_counts(y, B, seed=n, stratified=strat, dtype=np.uint8)
        cols = bootstrap_counts(y, B, seed=n, stratified=strat, dtype=np.uint8, order="F")
        assert got.dtype == np.int32 and small.dtype == np.uint8 and cols.flags.f_contiguous
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(small, want)
        np.testing.assert_array_equal(cols, want)


def test_one_sort_plans_and_blocked_draws_equal_the_per_split_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    """AUROC plans of 6 evaluation splits from one sort of the task's scores (ties included) and the blocked draws
    of AUROC and Brier equal `split_draws` split by split."""
    monkeypatch.setattr(bootstrap_mod, "BLOCK_ELEMENTS", 5 * 400)  # blocks of 5 resamples
    rng = np.random.default_rng(8)
    n = 400
    y = (rng.random(n) < 0.35).astype(int)
    s, p = np.round(rng.normal(size=n) + y, 1), rng.random(n)
    W = bootstrap_counts(y, 64, seed=2)
    evals = np.stack([stratified_split(y, 0.35, k)[1] for k in range(6)])
    member = np.zeros((6, n), dtype=bool)
    member[np.arange(6)[:, None], evals] = True
    plans = sorted_auroc_plans(y, s, np.argsort(s, kind="stable"), member)
    for k, ev in enumerate(evals):
        want = weighted_auroc(y[ev], s[ev], W, ev)
        np.testing.assert_array_equal(planned_auroc(plans[k], W), want)
        np.testing.assert_array_equal(planned_auroc(plans[k], W.astype(np.uint8)), want)
        np.testing.assert_array_equal(planned_auroc(auroc_plan(y[ev], s[ev], ev), W), want)
    got = blocked_split_draws(plans, evals, (p[evals] - y[evals]) ** 2, W.astype(np.uint8))
    np.testing.assert_array_equal(got["auroc"], split_draws("auroc", y, list(evals), [s[e] for e in evals], W))
    want_brier = split_draws("brier", y, list(evals), [p[e] for e in evals], W)
    np.testing.assert_allclose(got["brier"], want_brier, rtol=0, atol=1e-12)


def test_byte_weights_are_summed_exactly_even_where_int32_products_would_overflow() -> None:
    rng = np.random.default_rng(9)
    n = 40_000
    y, s = (rng.random(n) < 0.5).astype(int), rng.normal(size=n)
    W = np.full((2, n), 255, dtype=np.uint8)  # 255·2·Σ wrong weights > 2^31: the products go to int64
    plan = auroc_plan(y, s)
    np.testing.assert_array_equal(planned_auroc(plan, W), planned_auroc(plan, W.astype(np.int64)))
    assert planned_auroc(plan, W)[0] == pytest.approx(auroc(y, s), abs=1e-12)
