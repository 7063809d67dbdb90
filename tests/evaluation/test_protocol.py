"""The pure protocol: NaN mapping, score_tasks on synthetic stats (known AUROC / Brier / ECE), single-class tasks."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from tracecal.estimators import REGISTRY, Estimator, Inputs
from tracecal.evaluation.protocol import SCORE_CONSTRAINTS, ScoreConfig, TaskStats, sanitize, score_tasks
from tracecal.stats.metrics import SingleClassWarning, auroc
from tracecal.stats.splits import stratified_split
from tracecal.traces.trace import TraceBatch


def test_sanitize_maps_non_finite_to_least_confident() -> None:
    x, n = sanitize(np.array([0.2, np.nan, 0.9, -np.inf, np.inf]))
    assert n == 3 and x[1] < 0.2 and x[3] < 0.2 and x[4] == 0.9


def _synthetic_stats(name: str, n: int, seed: int) -> TaskStats:
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.4).astype(np.int64)
    lengths = rng.integers(1, 6, n)
    # entropy lower for correct answers, so TRACE ranks above chance
    H = [list(rng.gamma(2.0, 0.6 if y[i] else 1.2, lengths[i])) for i in range(n)]
    S = [list(rng.gamma(1.5, 0.5, lengths[i])) for i in range(n)]
    inputs = Inputs(TraceBatch.from_lists(S, H), p_true=np.where(y == 1, 0.8, 0.5) + 0.01 * rng.random(n))
    return TaskStats(name, [f"q{i}" for i in range(n)], y, inputs, "synthetic rule")


def test_score_tasks_is_a_pure_function_of_stats_and_labels() -> None:
    data = [_synthetic_stats("a", 120, 0), _synthetic_stats("b", 90, 1)]
    cfg = ScoreConfig(estimators=["trace", "trace_plus", "neg_mean_entropy", "p_true"], n_seeds=4)
    res = score_tasks(data, cfg)
    again = score_tasks(data, cfg)
    assert json.dumps(res.to_json()) == json.dumps(again.to_json())
    assert list(res.metrics) == ["a", "b", "average"]
    assert res.metrics["a"]["trace"]["auroc"]["mean"] > 0.6  # the signal planted above
    assert res.metrics["a"]["p_true"]["auroc"]["mean"] > 0.9
    assert res.metrics["a"]["trace"]["auroc"]["n_seeds"] == 4
    frame = res.to_frame()
    assert set(frame.columns) == {"task", "estimator", "metric", "mean", "sd", "n_seeds"}
    per_task = len(res.metrics["a"]["trace"])  # every metric and count; the average has the 9 metrics only
    assert len(frame) == 2 * 4 * per_task + 4 * len(res.metrics["average"]["trace"])
    assert res.answers["predictions"].num_rows == 210


def test_single_class_task_gives_nan_auroc_with_warning() -> None:
    d = _synthetic_stats("t", 20, 2)
    d.y[:] = 0
    with pytest.warns(SingleClassWarning):
        res = score_tasks([d], ScoreConfig(estimators=["trace"], n_seeds=2))
    assert np.isnan(res.metrics["t"]["trace"]["auroc"]["mean"])


class GivenProbability(Estimator):
    """A self-calibrated test estimator: its confidence is the stat ``p`` as given (a probability)."""

    name = "given_p"
    family = "test"
    self_calibrated = True

    def score(self, inputs: Inputs) -> np.ndarray:
        return inputs.stats["p"]


def _given(p: np.ndarray, y: np.ndarray) -> TaskStats:
    n = len(y)
    batch = TraceBatch.from_lists([[0.5]] * n, [[1.0]] * n)
    return TaskStats("given", [f"q{i}" for i in range(n)], y, Inputs(batch, p=p), "given")


def test_known_auroc_brier_and_ece(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(REGISTRY, GivenProbability.name, GivenProbability)
    y = np.array([1] * 40 + [0] * 60)
    p = np.where(y == 1, 0.8, 0.3)  # perfectly ranked; off by 0.2 (correct) and 0.3 (wrong)
    res = score_tasks([_given(p, y)], ScoreConfig(["given_p"], n_seeds=1, n_boot=0))
    m = res.metrics["given"]["given_p"]
    _, ev = stratified_split(y, 0.35, 0)
    n1, n0 = int(y[ev].sum()), int((1 - y[ev]).sum())
    assert (n1, n0) == (26, 39)
    assert m["auroc"]["mean"] == 1.0
    assert m["brier"]["mean"] == pytest.approx((n1 * 0.2**2 + n0 * 0.3**2) / (n1 + n0), abs=1e-12)
    assert m["ece"]["mean"] == pytest.approx((n1 * 0.2 + n0 * 0.3) / (n1 + n0), abs=1e-12)
    assert m["n"]["mean"] == 65 and m["n_cal"]["mean"] == 35 and res.tasks["given"]["nan_mapped"] == {}


def test_non_finite_scores_are_mapped_to_the_least_confident_and_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(REGISTRY, GivenProbability.name, GivenProbability)
    rng = np.random.default_rng(0)
    y = (rng.random(80) < 0.5).astype(np.int64)
    p = np.clip(0.5 + 0.3 * (y - 0.5) + 0.2 * rng.standard_normal(80), 0.01, 0.99)
    p[[3, 7, 11]] = np.nan
    res = score_tasks([_given(p, y)], ScoreConfig(["given_p"], n_seeds=1, n_boot=0))
    assert res.tasks["given"]["nan_mapped"] == {"given_p": 3}
    _, ev = stratified_split(y, 0.35, 0)
    expected = auroc(y[ev], sanitize(p)[0][ev])
    assert math.isclose(res.metrics["given"]["given_p"]["auroc"]["mean"], expected, abs_tol=1e-12)
    scores = res.answers["scores"].column("given_p").to_numpy()
    assert np.isfinite(scores).all() and scores[3] < np.nanmin(p)


def test_settings_are_checked_with_one_vocabulary() -> None:
    assert set(SCORE_CONSTRAINTS) == {"n_seeds", "cal_frac", "n_bins", "n_boot", "level", "sel_alpha", "sel_delta"} | {
        "sel_holdout"
    }
    with pytest.raises(ValueError, match=r"^n_seeds must be a whole number ≥ 1, got 0$"):
        ScoreConfig(["trace"], n_seeds=0).validate()
    with pytest.raises(ValueError, match=r"^sel_holdout must be a finite number in \[0, 1\), got 1.0$"):
        ScoreConfig(["trace"], sel_holdout=1.0).validate()
    assert ScoreConfig(["trace"]).validate().to_dict()["n_boot"] == 1000
