"""The logistic fits shared by the TRACE+ calibrators (`tracecal.calibrators.logistic`)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.special import expit
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression

from tracecal.calibrators.logistic import (
    DEFAULT_PENALTIES,
    batched_platt,
    log_loss,
    one_se_index,
    penalised_logistic,
    platt_newton,
    platt_rows,
)
from tracecal.calibrators.scalar import PlattCalibrator, ScalarCalibrator

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _platt_problem(rng: np.random.Generator, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """Scores and labels: random (any scale and offset), nearly separable, separable, or rounded (ties)."""
    n = int(rng.integers(20, 1500))
    y = (rng.random(n) < rng.uniform(0.1, 0.9)).astype(np.int64)
    y[:2] = (0, 1)
    gap = {"random": rng.uniform(-1, 2), "nearly": 6.0, "separable": 40.0, "ties": 1.0}[kind]
    s = (rng.normal(size=n) + gap * y) * rng.uniform(0.01, 100) + rng.uniform(-50, 50)
    return (np.round(s, 0) if kind == "ties" else s), y


def _grad(s: np.ndarray, y: np.ndarray, cal: PlattCalibrator) -> np.ndarray:
    """The objective's gradient (∂/∂a, ∂/∂w) at the fit, relative to the number of answers."""
    z = (s - cal.mean_) / cal.scale_
    r = expit(cal.intercept_ + cal.coef_ * z) - y
    return np.array([r.sum(), (r * z).sum() + cal.coef_ / cal.C]) / len(s)


@pytest.mark.parametrize("kind", ["random", "nearly", "separable", "ties"])
def test_platt_calibrator_is_the_protocols_fit_at_its_optimum(kind: str) -> None:
    """`PlattCalibrator` and the protocol's rows are one fit: the same bits; at a stationary point of the
    penalised objective, never worse than scikit-learn's L-BFGS (the fit before) and equal to it run to a tight
    tolerance; on separable data the slope stays finite (the penalty bounds it) and the classes get ~0 / ~1."""
    rng = np.random.default_rng({"random": 0, "nearly": 1, "separable": 2, "ties": 3}[kind])
    rows = [_platt_problem(rng, kind) for _ in range(12)]
    for s, y in rows:
        cal = PlattCalibrator().fit(s, y)
        mean, scale, a, w, constant = (x[0] for x in platt_rows(s[None], y[None]))
        assert (cal.mean_, cal.scale_, cal.intercept_, cal.coef_) == (mean, scale, a, w) and np.isnan(constant)
        assert np.abs(_grad(s, y, cal)).max() < 1e-9
        z = ((s - mean) / scale)[:, None]
        eta = cal.intercept_ + cal.coef_ * z[:, 0]
        ours = np.sum(np.logaddexp(0, eta) - y * eta) + 0.5e-6 * cal.coef_**2
        for lr in (LogisticRegression(C=1e6, max_iter=1000), LogisticRegression(C=1e6, tol=1e-13, max_iter=10**5)):
            lr.fit(z, y)
            e2 = lr.intercept_[0] + lr.coef_[0, 0] * z[:, 0]
            assert ours <= np.sum(np.logaddexp(0, e2) - y * e2) + 0.5e-6 * lr.coef_[0, 0] ** 2 + 1e-9
        np.testing.assert_allclose(cal.predict_proba(s), lr.predict_proba(z)[:, 1], rtol=0, atol=1e-6)
        if kind == "separable":
            assert 0 < cal.coef_ < 1e3 and (np.round(cal.predict_proba(s)) == y).all()
    S, Y = rows[0][0][None].repeat(3, 0), rows[0][1][None].repeat(3, 0)
    S[1], Y[2] = S[1] * 2 + 1, 1  # rows are fitted alike: the same fit, a rescaled score, a single class
    mean, scale, a, w, constant = platt_rows(S, Y)
    assert (a[0], w[0]) == (a[1], w[1]) and constant[2] == 1.0 and np.isnan(constant[:2]).all()


def test_platt_newton_never_raises_the_objective_and_stops_at_max_iter() -> None:
    """The steps are halved while they would raise the objective: the objective after k steps does not grow with
    k, also on separable data where a full Newton step from w = 0 overshoots; max_iter bounds the steps."""
    rng = np.random.default_rng(4)
    for kind in ("random", "nearly", "separable"):
        s, y = _platt_problem(rng, kind)
        z = ((s - s.mean()) / s.std())[None]
        f = []
        for k in range(1, 30):
            a, w = platt_newton(z, y[None], max_iter=k)
            eta = a[0] + w[0] * z[0]
            f.append(np.sum(np.logaddexp(0, eta) - y * eta) + 0.5e-6 * w[0] ** 2)
        assert np.all(np.diff(f) <= 1e-9 * (1 + abs(f[0])))
        assert f[-1] < f[0] or kind == "random"


def test_platt_keeps_the_scikit_learn_discipline_and_its_saved_files() -> None:
    """clone, get_params and the JSON round trip as before; a Platt file saved by the scikit-learn fit (the
    fixture, fitted on the perfectly separable scores stored beside it) loads and predicts exactly as then. A
    refit moves that file's predictions by up to 0.13: L-BFGS had stopped at slope 13.1, the optimum is 24.1."""
    cal = PlattCalibrator(C=10.0, max_iter=50)
    assert clone(cal).get_params() == {"C": 10.0, "max_iter": 50}
    want = json.loads((FIXTURES / "platt_sklearn_expected.json").read_text())
    old = ScalarCalibrator.load(FIXTURES / "platt_sklearn.json")
    assert type(old) is PlattCalibrator and old.coef_ == pytest.approx(13.063003088759903, abs=0)
    np.testing.assert_array_equal(old.predict_proba(want["scores"]), want["predictions"])
    again = ScalarCalibrator.from_dict(json.loads(json.dumps(old.to_dict())))
    np.testing.assert_array_equal(again.predict_proba(want["scores"]), want["predictions"])
    refit = clone(old).fit(want["fit_scores"], want["fit_labels"])
    assert refit.coef_ == pytest.approx(24.0874, abs=1e-3)
    moved = np.abs(refit.predict_proba(want["scores"]) - np.asarray(want["predictions"])).max()
    assert 0.12 < moved < 0.13


def test_penalised_logistic_solves_its_normal_equations() -> None:
    rng = np.random.default_rng(0)
    X = np.column_stack([np.ones(300), rng.normal(size=(300, 3))])
    y = (rng.random(300) < 0.4).astype(int)
    off = rng.normal(size=300) * 0.3
    th = penalised_logistic(X, y, off, 2.0)
    grad = X.T @ (1 / (1 + np.exp(-(off + X @ th))) - y) + 2.0 * th
    assert np.abs(grad).max() < 1e-8


def test_a_strong_penalty_shrinks_toward_the_offset() -> None:
    rng = np.random.default_rng(1)
    X = rng.normal(size=(200, 2))
    y = (rng.random(200) < 0.5).astype(int)
    weak, strong = (penalised_logistic(X, y, np.zeros(200), lam) for lam in (0.01, 1e6))
    assert np.abs(strong).max() < 1e-3 < np.abs(weak).max()


def test_batched_platt_matches_platt_per_column() -> None:
    rng = np.random.default_rng(0)
    Z = rng.normal(size=(400, 6))
    y = (rng.random(400) < 1 / (1 + np.exp(-(Z[:, 0] - 0.5 * Z[:, 1])))).astype(int)
    a, w = batched_platt(Z, y)
    for j in range(6):
        p = PlattCalibrator().fit(Z[:, j], y)
        # the same optimum; PlattCalibrator's slope is on the standardised column, whose penalty differs by sd²
        assert abs(w[j] - p.coef_ / p.scale_) < 1e-5
        assert abs(a[j] - (p.intercept_ - p.coef_ * p.mean_ / p.scale_)) < 1e-5


def test_log_loss_per_answer() -> None:
    eta = np.array([[0.0, 2.0], [-1.0, 3.0]])
    y = np.array([1, 0])
    expected = np.array(
        [[math.log(2), math.log(1 + math.e**2) - 2], [math.log(1 + math.e**-1), math.log(1 + math.e**3)]]
    )
    np.testing.assert_allclose(log_loss(eta, y), expected, rtol=1e-12)


def test_one_se_rule_prefers_the_larger_penalty_within_one_standard_error() -> None:
    pens = np.asarray(DEFAULT_PENALTIES[:3])  # 0.3, 1, 3
    losses = np.array([[0.50, 0.51, 0.70], [0.52, 0.52, 0.72], [0.48, 0.50, 0.68]])
    assert one_se_index(losses, pens, one_se=False) == 0  # least mean loss
    assert one_se_index(losses, pens) == 1  # λ = 1 is within one SE of the best, λ = 3 is not
    assert one_se_index(np.ones((4, 3)), np.array([1.0, math.inf, 3.0])) == 1  # ties go to the largest λ
