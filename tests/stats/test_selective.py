"""Selective answering: the Learn-then-Test threshold keeps its guarantee on data with a known error curve (the
naive empirical threshold does not), the edge cases, and the protocol's threshold of a fitted score. (`tracecal
selective` on a run: tests/analysis/test_selective.py.)"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom

from tracecal.estimators import REGISTRY, Estimator, Inputs
from tracecal.evaluation.protocol import ScoreConfig, TaskStats, one_split, selective_threshold
from tracecal.stats.selective import (
    empirical_threshold,
    guaranteed_threshold,
    ltt_threshold,
    min_answered,
    selective_outcome,
)
from tracecal.traces.trace import TraceBatch

ALPHA = DELTA = 0.1


def _draw(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Confidence c ~ U(0, 1), P(wrong | c) = 0.4·(1 − c): the selective risk of "answer iff c ≥ t" is
    R(t) = E[0.4·(1 − c) | c ≥ t] = 0.2·(1 − t), so R(t) ≤ α = 0.1 exactly when t ≥ 0.5."""
    c = rng.random(n)
    return c, (rng.random(n) >= 0.4 * (1 - c)).astype(int)


def risk(t: float) -> float:
    return 0.2 * (1 - min(t, 1.0))


def test_guarantee_holds_where_the_naive_threshold_fails() -> None:
    """Over 1,000 calibration sets the LTT threshold's true risk exceeds α in ≤ δ of them (up to Monte-Carlo
    error), while the empirical threshold's does in about half."""
    rng = np.random.default_rng(0)
    reps = 1000
    ltt = [ltt_threshold(*_draw(rng, 400), ALPHA, DELTA) for _ in range(reps)]
    naive = [empirical_threshold(*_draw(rng, 400), ALPHA) for _ in range(reps)]
    v_ltt = np.mean([risk(t.threshold) > ALPHA for t in ltt])
    v_naive = np.mean([risk(t.threshold) > ALPHA for t in naive])
    assert v_ltt <= DELTA + 3 * math.sqrt(DELTA * (1 - DELTA) / reps), v_ltt
    assert v_naive > 0.3, v_naive  # clearly above δ
    cov = np.mean([1 - min(t.threshold, 1.0) for t in ltt])
    assert 0.05 < cov < 0.5  # it answers something, and never more than the oracle's 50 %


def test_the_threshold_is_the_last_rejection_of_the_fixed_sequence() -> None:
    rng = np.random.default_rng(3)
    c, y = _draw(rng, 300)
    t = ltt_threshold(c, y, ALPHA, DELTA)
    order = np.argsort(-c)
    n = np.arange(1, 301)
    k = np.cumsum(1 - y[order])
    p = binom.cdf(k, n, ALPHA)
    tested = n >= min_answered(ALPHA, DELTA)
    first_fail = np.flatnonzero(tested & (p > DELTA))[0]
    assert t.n_answered == first_fail and t.threshold == c[order][first_fail - 1]  # the one before the failure
    assert t.p_value <= DELTA and t.n_errors == k[first_fail - 1]
    assert guaranteed_threshold(c, y, ALPHA, DELTA) == t.threshold
    assert min_answered(0.1, 0.1) == 22  # 0.9^22 = 0.098 ≤ 0.1 < 0.9^21


def test_edge_cases_and_bad_input() -> None:
    assert ltt_threshold(np.arange(100.0), np.zeros(100, int), ALPHA, DELTA).threshold == math.inf
    t = ltt_threshold(np.arange(100.0), np.ones(100, int), ALPHA, DELTA)
    assert t.threshold == 0.0 and t.coverage == 1.0  # all correct: answer everything
    out = selective_outcome([0.9, 0.8, 0.1], [1, 0, 1], 0.5, alpha=0.1)
    assert out == {"sel_coverage": 2 / 3, "sel_risk": 0.5, "sel_violation": 1.0}
    nothing = selective_outcome([0.9, 0.8], [1, 0], math.inf, alpha=0.1)
    assert nothing["sel_coverage"] == 0 and math.isnan(nothing["sel_risk"]) and nothing["sel_violation"] == 0.0
    ties = ltt_threshold(np.r_[np.ones(50), np.zeros(50)], np.r_[np.ones(50), np.zeros(50)].astype(int), 0.1, 0.1)
    assert ties.n_answered == 50  # tied scores enter together
    with pytest.raises(ValueError, match="alpha"):
        ltt_threshold([0.1, 0.2], [0, 1], 1.2, 0.1)
    with pytest.raises(ValueError, match="delta"):
        ltt_threshold([0.1, 0.2], [0, 1], 0.1, 0)
    with pytest.raises(ValueError, match="non-finite"):
        ltt_threshold([np.nan, 0.2], [0, 1])
    with pytest.raises(ValueError, match="different lengths"):
        ltt_threshold([0.1, 0.2, 0.3], [0, 1])


class Memoriser(Estimator):
    """A fitted score that has seen its training answers: c, plus 0.3 for the correct answers it was fitted on (as
    an overfitted TRACE+ ranks its own training answers too well). On new answers it is c itself."""

    name = "test_memoriser"
    family = "test"
    needs_fit = True

    def fit(self, inputs: Inputs, y: np.ndarray) -> Memoriser:
        self.seen_ = set(inputs.stats["qid"][y == 1].tolist())
        return self

    def score(self, inputs: Inputs) -> np.ndarray:
        return inputs.stats["c"] + 0.3 * np.isin(inputs.stats["qid"], list(self.seen_))


def _task(rng: np.random.Generator, n: int) -> TaskStats:
    c, y = _draw(rng, n)
    batch = TraceBatch.from_lists([[0.1, 0.2]] * n, [[0.5, 0.5]] * n)  # two tokens each: c and qid are per answer
    qid = rng.integers(0, 2**52, n).astype(np.float64)  # fresh question ids: a new draw is (almost surely) unseen
    return TaskStats("synthetic", [str(int(q)) for q in qid], y, Inputs(batch, stats={"c": c, "qid": qid}), "rule")


def test_a_fitted_scores_threshold_keeps_the_guarantee_with_a_holdout(monkeypatch: pytest.MonkeyPatch) -> None:
    """Over 600 calibration sets of 800 answers: the memoriser's threshold chosen on the half of the calibration
    split it was not fitted on exceeds α in its true risk R(t) = 0.2·(1 − t) (on new answers, where its score is c)
    in ≤ δ of them; chosen on the answers it was fitted on (sel_holdout = 0, the old protocol) far more often."""
    monkeypatch.setitem(REGISTRY, Memoriser.name, Memoriser)
    rng = np.random.default_rng(7)
    reps = 600
    strict = ScoreConfig([Memoriser.name], sel_alpha=ALPHA, sel_delta=DELTA, sel_holdout=0.5, seed=1)
    naive = ScoreConfig([Memoriser.name], sel_alpha=ALPHA, sel_delta=DELTA, sel_holdout=0.0, seed=1)
    v_strict, v_naive, answered = [], [], []
    for _ in range(reps):
        data, cal = _task(rng, 800), np.arange(800)
        t, est = selective_threshold(Memoriser.name, data, cal, strict, raw_cal=np.zeros(0))
        v_strict.append(risk(t) > ALPHA)
        answered.append(1 - min(t, 1.0))
        assert isinstance(est, Memoriser) and len(est.seen_) < int(data.y.sum())  # fitted on a part only
        t0, _ = selective_threshold(Memoriser.name, data, cal, naive, raw_cal=np.zeros(0))
        v_naive.append(risk(t0) > ALPHA)
    assert np.mean(v_strict) <= DELTA + 3 * math.sqrt(DELTA * (1 - DELTA) / reps), np.mean(v_strict)
    assert np.mean(v_naive) > 0.5, np.mean(v_naive)
    assert 0.05 < np.mean(answered) < 0.5  # it answers something (the oracle answers 50 %)


def test_label_free_scores_use_the_whole_calibration_split_and_one_split_applies_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(REGISTRY, Memoriser.name, Memoriser)
    data = _task(np.random.default_rng(2), 600)
    cal, ev = np.arange(400), np.arange(400, 600)
    cfg = ScoreConfig(["trace"], sel_alpha=ALPHA, sel_delta=DELTA)
    raw = np.random.default_rng(3).random(600)
    t, est = selective_threshold("trace", data, cal, cfg, raw_cal=raw[cal])
    assert est is None and t == ltt_threshold(raw[cal], data.y[cal], ALPHA, DELTA).threshold
    m, raw_ev, _ = one_split(Memoriser.name, data, None, cal, ev, ScoreConfig([Memoriser.name], sel_alpha=0.3))
    np.testing.assert_array_equal(raw_ev, data.inputs.stats["c"][ev])  # new answers: the score is c
    assert 0 < m["sel_coverage"] <= 1
