"""The logistic fits shared by the TRACE+ calibrators (`tracecal.calibrators.logistic`)."""

from __future__ import annotations

import math

import numpy as np

from tracecal.calibrators.logistic import (
    DEFAULT_PENALTIES,
    batched_platt,
    log_loss,
    one_se_index,
    penalised_logistic,
)
from tracecal.calibrators.scalar import PlattCalibrator


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
        # sklearn's lbfgs stops at its tolerance 1e-4: agreement to ~1e-4, ours is the exact Newton optimum
        assert abs(w[j] - p.coef_ / p.scale_) < 1e-3
        assert abs(a[j] - (p.intercept_ - p.coef_ * p.mean_ / p.scale_)) < 1e-3


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
