"""TRACE+ by cross-validation: Platt(anchor) in its selection-only limit, picks the statistic that carries the
signal, extends beyond the statistics when the labels allow, falls back to a rank-only consensus with few labels,
sklearn conformance, JSON persistence, bad parameters, and the registered estimator under the protocol."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import spearmanr
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.utils.estimator_checks import parametrize_with_checks

from tracecal.calibrators import load_calibrator
from tracecal.calibrators.base import CalibratorFileError
from tracecal.calibrators.scalar import PlattCalibrator
from tracecal.calibrators.traceplus_cv import CONSENSUS, DEFAULT_STATISTICS, EXTENDED, TracePlusCV
from tracecal.estimators import REGISTRY, Inputs, get_estimator, resolve_estimators
from tracecal.evaluation.protocol import ScoreConfig, TaskStats, score_tasks
from tracecal.signals.features import trace_plus_features
from tracecal.signals.operators import trace_confidence
from tracecal.signals.statistics import TRACE_STATISTICS, trace_statistic
from tracecal.stats.metrics import SingleClassWarning, auroc, brier
from tracecal.traces.trace import TraceBatch

INF = (math.inf,)


def traces(n: int, seed: int = 0, signal: float = 3.0) -> tuple[TraceBatch, np.ndarray]:
    """Entropy sequences H_t = m + k·(t − c) around a random level m: correct answers have a falling entropy
    (k < 0), so −slope(H) carries the signal (with weight ``signal``) and the level-based statistics do not."""
    rng = np.random.default_rng(seed)
    k = rng.normal(0.0, 0.05, n)
    y = (rng.random(n) < 1 / (1 + np.exp(signal * k / 0.05))).astype(int)
    lens = rng.integers(12, 24, n)
    hs = [
        rng.uniform(2.0, 4.0) + kk * (np.arange(t) - t / 2) + rng.normal(0, 0.05, t)
        for kk, t in zip(k, lens, strict=True)
    ]
    ss = [rng.gamma(1.0, 0.5, t) for t in lens]
    return TraceBatch.from_lists(ss, [np.clip(h, 0, None) for h in hs]), y


def noise_matrix(n: int, seed: int, signal_col: int | None, extra: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """A (n, 15 + 8) matrix of noise; y follows column ``signal_col`` (one of the 15 statistics) and, with weight
    ``extra``, column 17 (an extra feature that no candidate statistic carries)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, len(DEFAULT_STATISTICS) + 8))
    eta = -1.0 + (2.0 * X[:, signal_col] if signal_col is not None else 0.0) + extra * X[:, 17]
    return X, (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(int)


def exact_platt(s: np.ndarray, y: np.ndarray, new: np.ndarray) -> np.ndarray:
    """`PlattCalibrator`'s objective (L2 logistic, C = 1e6, on the standardised score) solved to 1e-12."""
    mu, sd = s.mean(), s.std()
    lr = LogisticRegression(C=1e6, tol=1e-12, max_iter=10_000).fit(((s - mu) / sd)[:, None], y)
    return lr.predict_proba(((new - mu) / sd)[:, None])[:, 1]


def test_selection_only_is_platt_of_the_anchor() -> None:
    """λ = ∞ and ``combine="select"``: the model is Platt of the chosen statistic — the optimum of
    `PlattCalibrator`'s objective to 1e-8 (sklearn's lbfgs inside `PlattCalibrator` stops at its tolerance 1e-4)."""
    b, y = traces(500, seed=1)
    cal, ev = np.arange(200), np.arange(200, 500)
    m = TracePlusCV(penalties=INF, combine="select").fit(b.select(cal), y[cal])
    assert m.anchor_ in DEFAULT_STATISTICS and m.penalty_ == math.inf and m.weights_.max() == 1.0
    s = get_estimator(m.anchor_).score(Inputs(b))
    p = m.predict_proba(b.select(ev))
    np.testing.assert_allclose(p, exact_platt(s[cal], y[cal], s[ev]), atol=1e-8)
    np.testing.assert_allclose(p, PlattCalibrator().fit(s[cal], y[cal]).predict_proba(s[ev]), atol=1e-3)
    only = TracePlusCV(statistics=("trace",), consensus=False, default_anchor="trace", penalties=INF)
    only.fit(b.select(cal), y[cal])
    t = get_estimator("trace").score(Inputs(b))
    np.testing.assert_allclose(only.predict_proba(b.select(ev)), exact_platt(t[cal], y[cal], t[ev]), atol=1e-8)


def test_cv_picks_the_statistic_that_carries_the_signal() -> None:
    b, y = traces(1200, seed=2)
    cal, ev = np.arange(300), np.arange(300, 1200)
    m = TracePlusCV().fit(b.select(cal), y[cal])
    assert m.anchor_ == "neg_entropy_slope"
    assert m.weights_[m.candidates_.index("neg_entropy_slope")] > 0.5
    p = m.predict_proba(b.select(ev))
    best_single = auroc(y[ev], get_estimator("neg_entropy_slope").score(Inputs(b.select(ev))))
    trace = auroc(y[ev], get_estimator("trace").score(Inputs(b.select(ev))))
    assert auroc(y[ev], p) > best_single - 0.02 and auroc(y[ev], p) > trace + 0.15
    for j in (3, 9, 12):  # the same on a matrix, whichever column carries the signal
        X, yy = noise_matrix(300, seed=j, signal_col=j)
        assert TracePlusCV().fit(X, yy).anchor_ == DEFAULT_STATISTICS[j]  # 23 columns: named as the trace matrix


def test_it_extends_beyond_the_statistics_when_the_labels_allow() -> None:
    """Column 17 (a TRACE+ feature, no candidate) carries half the signal: with 800 labels CV keeps a finite λ, the
    extension takes the weight and ranks better than the best single statistic."""
    X, y = noise_matrix(2000, seed=5, signal_col=4, extra=2.0)
    cal, ev = np.arange(800), np.arange(800, 2000)
    m = TracePlusCV().fit(X[cal], y[cal])
    assert math.isfinite(m.penalty_) and m.candidates_[-1] == EXTENDED and m.weights_[-1] > 0.5
    assert m.anchor_ == DEFAULT_STATISTICS[4]
    assert np.nanargmin(m.cv_loss_) < len(m.penalties) - 1  # λ = ∞ is not the best
    assert auroc(y[ev], m.predict_proba(X[ev])) > auroc(y[ev], X[ev, 4]) + 0.05
    none = TracePlusCV().fit(*noise_matrix(800, seed=6, signal_col=4))  # nothing beyond column 4: no extension
    assert none.penalty_ == math.inf and EXTENDED not in none.candidates_


def test_few_labels_rank_by_the_consensus_at_the_base_rate() -> None:
    """4 correct answers (< min_per_class = 5): no slope is learnt — the base rate as probability, ordered by the
    label-free consensus (the mean of the standardised statistics)."""
    b, y = traces(300, seed=3)
    idx = np.r_[np.flatnonzero(y == 1)[:4], np.flatnonzero(y == 0)[:60]]
    m = TracePlusCV().fit(b.select(idx), y[idx])
    assert m.anchor_ == CONSENSUS and np.isnan(m.cv_loglik_).all() and m.weights_[-1] == 1.0
    p = m.predict_proba(b)
    np.testing.assert_allclose(p, 4 / 64, atol=1e-4)
    M = m.matrix(b)[:, : len(DEFAULT_STATISTICS)]
    z = np.where(m.kept_[:15], (M - m.mean_[:15]) / m.scale_[:15], 0.0).mean(axis=1)
    assert spearmanr(p, z).statistic > 0.999999
    tr = TracePlusCV(default_anchor="trace").fit(b.select(idx), y[idx])
    assert spearmanr(tr.predict_proba(b), get_estimator("trace").score(Inputs(b))).statistic > 0.999999


XFAIL = "y must be correctness labels 0/1; this check fits with labels {1, 2}"


@parametrize_with_checks(
    [TracePlusCV(n_repeats=1)],
    expected_failed_checks=lambda est: {"check_estimators_dtypes": XFAIL, "check_fit2d_1feature": XFAIL},
)
def test_sklearn_estimator_checks(estimator, check) -> None:  # type: ignore[no-untyped-def]
    """scikit-learn's own checks (X = a matrix: the first 15 columns the candidates, the others features)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SingleClassWarning)
        check(estimator)


def test_clone_save_load_round_trip(tmp_path: Path) -> None:
    b, y = traces(400, seed=4)
    m = TracePlusCV(penalties=(1.0, 10.0, math.inf), n_folds=3, n_repeats=2)
    assert clone(m).get_params() == m.get_params() and not [k for k in vars(clone(m)) if k.endswith("_")]
    m.fit(b, y)
    path = m.save(tmp_path / "cv.json")
    doc = json.loads(path.read_text())
    assert doc["class"] == "TracePlusCV" and doc["params"]["penalties"] == [1.0, 10.0, "inf"]
    back = load_calibrator(path)  # the generic loader dispatches on the class name
    assert type(back) is TracePlusCV and back.get_params() == m.get_params()
    np.testing.assert_array_equal(back.predict_proba(b), m.predict_proba(b))
    assert back.anchor_ == m.anchor_ and back.candidates_ == m.candidates_
    few = TracePlusCV().fit(b.select(np.r_[np.flatnonzero(y)[:3], np.flatnonzero(y == 0)[:30]]), [1] * 3 + [0] * 30)
    few_back = load_calibrator(few.save(tmp_path / "few.json"))
    np.testing.assert_array_equal(few_back.predict_proba(b), few.predict_proba(b))
    for key, value, msg in (
        ("weights", [1.0] + [0.0] * (len(m.candidates_) - 1), None),
        ("weights", [0.5] * len(m.candidates_), "sum to 1"),
        ("anchor", "nope", "state.anchor"),
        ("components", doc["state"]["components"][:-1], "rows"),
        ("candidates", ["x"], "state.candidates"),
    ):
        bad = json.loads(json.dumps(doc))
        bad["state"][key] = value
        (tmp_path / "bad.json").write_text(json.dumps(bad))
        if msg is None:
            load_calibrator(tmp_path / "bad.json")  # a valid edit loads
            continue
        with pytest.raises(CalibratorFileError, match=msg):
            load_calibrator(tmp_path / "bad.json")


@pytest.mark.parametrize(
    ("params", "msg"),
    [
        ({"statistics": ("trace", "nope")}, r"statistics\[1\] = 'nope' is not one of trace, first_token_prob"),
        ({"statistics": ()}, "non-empty list"),
        ({"statistics": ("trace", "trace")}, "list of distinct statistic names, .*'trace' is given twice"),
        ({"default_anchor": "min_prob", "statistics": ("trace",)}, "default_anchor must be one of"),
        ({"consensus": False}, "default_anchor must be one of"),  # the default anchor is the consensus
        ({"consensus": "yes"}, "consensus must be true or false"),
        ({"penalties": (0.0,)}, r"penalties\[0\] = 0.0 is not a finite number > 0 or inf"),
        ({"penalties": ()}, "non-empty list"),
        ({"combine": "vote"}, "combine must be one of"),
        ({"n_folds": 1}, "n_folds"),
        ({"n_repeats": 0}, "n_repeats"),
        ({"min_per_class": 1}, "min_per_class"),
        ({"random_state": -1}, "random_state"),
    ],
)
def test_bad_params_are_refused_clearly(params: dict, msg: str) -> None:
    b, y = traces(60)
    with pytest.raises(ValueError, match=msg):
        TracePlusCV(**params).fit(b, y)


def test_other_refusals_and_edge_cases() -> None:
    b, y = traces(200)
    with pytest.raises(ValueError, match="not on these trace features"):
        TracePlusCV().fit(np.random.default_rng(0).normal(size=(200, 5)), y).predict_proba(b)
    with pytest.raises(ValueError, match="0 \\(incorrect\\) or 1"):
        TracePlusCV().fit(b, np.full(200, 2))
    with pytest.warns(SingleClassWarning):
        const = TracePlusCV().fit(b, np.ones(200, int))
    assert np.all(const.predict_proba(b) == 1.0)
    empty = TraceBatch.from_lists([[0.1, 0.2], [], [0.3]], [[1.0, 0.5], [], [2.0]])
    m = TracePlusCV().fit(*traces(100, seed=7))
    p = m.predict_proba(empty)
    assert np.isnan(p[1]) and np.isfinite(p[[0, 2]]).all()


def test_registered_trace_only_and_scored_by_the_protocol() -> None:
    cls = REGISTRY["trace_plus_cv"]
    assert cls.family == "TRACE" and cls.self_calibrated and cls.needs_fit and cls.stats <= {"surprisal", "entropy"}
    assert "trace_plus_cv" in resolve_estimators("trace-only")
    b, y = traces(240, seed=8)
    data = TaskStats("t", [f"q{i}" for i in range(240)], y, Inputs(b), "rule")
    res = score_tasks([data], ScoreConfig(["trace", "trace_plus_cv"], n_seeds=3, n_boot=0))
    m = res.metrics["t"]["trace_plus_cv"]
    assert 0.5 < m["auroc"]["mean"] <= 1 and 0 < m["brier"]["mean"] < 0.25 and m["auroc"]["n_seeds"] == 3
    assert brier(y, np.full(240, y.mean())) > m["brier"]["mean"]


def test_the_statistics_are_the_registered_estimators() -> None:
    """`tracecal.signals.statistics` is the one definition: each registered single-statistic estimator is it."""
    b, _ = traces(50)
    M = TracePlusCV().matrix(b)
    for j, name in enumerate(DEFAULT_STATISTICS):
        np.testing.assert_array_equal(M[:, j], get_estimator(name).score(Inputs(b)))
    assert set(TRACE_STATISTICS) <= set(REGISTRY)


def test_matrix_from_one_sweep_equals_the_separate_passes() -> None:
    """`matrix` takes c_TRACE and φ from one sweep (`trace_and_features`): bit for bit the separate passes it
    replaced, zero-token answers and an empty batch included."""
    rng = np.random.default_rng(8)
    lens = rng.integers(0, 30, 250)
    b = TraceBatch.from_lists([rng.gamma(1.0, 0.5, k) for k in lens], [rng.gamma(1.0, 1.5, k) for k in lens])
    cal = TracePlusCV()
    cols = [trace_confidence(b) if s == "trace" else trace_statistic(s, b) for s in cal.statistics]
    want = np.column_stack([*cols, trace_plus_features(b)])
    np.testing.assert_array_equal(cal.matrix(b), want)
    assert "trace" in cal.statistics and (lens == 0).any()
    assert cal.matrix(b.select(np.arange(0))).shape == (0, want.shape[1])
