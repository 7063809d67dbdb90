"""The logistic fits shared by the TRACE+ calibrators: penalised Newton deviations, batched Platt scaling,
per-answer log-loss and the one-standard-error rule choosing a penalty λ.

All in nats; η denotes log-odds of correctness, y ∈ {0, 1} the labels, ℓ(η, y) = log(1 + e^η) − y·η the log-loss.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import expit

__all__ = ["DEFAULT_PENALTIES", "PLATT_RIDGE", "penalised_logistic", "batched_platt", "log_loss", "one_se_index"]

DEFAULT_PENALTIES = (0.3, 1.0, 3.0, 10.0, 30.0, 100.0, math.inf)
"""The λ grid: from weaker than TRACE+'s own L2 (λ = 1/C = 1) to ∞ (= no deviation from the prior)."""
PLATT_RIDGE = 1e-6  # = 1/C of `PlattCalibrator` (C = 1e6): the slope's L2 on the summed log-loss


def penalised_logistic(
    X: np.ndarray, y: np.ndarray, offset: np.ndarray, lam: float, max_iter: int = 100, tol: float = 1e-10
) -> np.ndarray:
    """argmin_θ Σ_i [log(1 + e^{η_i}) − y_i·η_i] + (λ/2)·‖θ‖², η = offset + X·θ.

    Newton's method with backtracking line search (the objective is strictly convex for λ > 0). Returns θ.
    """
    n, d = X.shape
    pen = np.full(d, float(lam))
    yf = y.astype(np.float64)

    def objective(th: np.ndarray) -> float:
        eta = offset + X @ th
        return float(np.sum(np.logaddexp(0.0, eta) - yf * eta) + 0.5 * np.sum(pen * th * th))

    theta = np.zeros(d)
    f = objective(theta)
    for _ in range(max_iter):
        p = expit(offset + X @ theta)
        g = X.T @ (p - yf) + pen * theta
        H = (X.T * (p * (1.0 - p))) @ X + np.diag(pen)
        try:
            step = np.linalg.solve(H, g)
        except np.linalg.LinAlgError:
            step = np.linalg.lstsq(H, g, rcond=None)[0]
        t, dec = 1.0, float(g @ step)
        while t > 1e-12:
            f_new = objective(theta - t * step)
            if f_new <= f - 1e-4 * t * dec:
                break
            t *= 0.5
        theta, f = theta - t * step, min(f, f_new)
        if np.max(np.abs(t * step)) < tol:
            break
    return theta


def batched_platt(
    Z: np.ndarray, y: np.ndarray, ridge: float = PLATT_RIDGE, max_iter: int = 50, tol: float = 1e-10
) -> tuple[np.ndarray, np.ndarray]:
    """Platt scaling of every column of ``Z`` (n, K) at once: (a, w), each (K,), minimising per column
    Σ_i [log(1 + e^{η_i}) − y_i·η_i] + (ridge/2)·w², η = a + w·Z[:, j].

    Newton's method on all K two-parameter problems together (closed-form 2×2 solves, steps capped at 5 in
    log-odds); on standardised columns it matches `PlattCalibrator` (whose slope penalty is the same 1/C).
    """
    yf = y.astype(np.float64)[:, None]
    p0 = float(np.clip(yf.mean(), 1e-6, 1 - 1e-6))
    a, w = np.full(Z.shape[1], math.log(p0 / (1 - p0))), np.zeros(Z.shape[1])
    for _ in range(max_iter):
        p = expit(a + Z * w)
        r, v = p - yf, p * (1.0 - p)
        ga, gw = r.sum(axis=0), (r * Z).sum(axis=0) + ridge * w
        haa, haw, hww = v.sum(axis=0), (v * Z).sum(axis=0), (v * Z * Z).sum(axis=0) + ridge
        det = np.maximum(haa * hww - haw * haw, 1e-300)
        da, dw = np.clip((hww * ga - haw * gw) / det, -5, 5), np.clip((haa * gw - haw * ga) / det, -5, 5)
        a, w = a - da, w - dw
        if max(np.abs(da).max(), np.abs(dw).max()) < tol:
            break
    return a, w


def log_loss(eta: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per-answer log-loss log(1 + e^η) − y·η (nats) of log-odds ``eta`` (n, C); ``y`` (n,)."""
    return np.logaddexp(0.0, eta) - y.astype(np.float64)[:, None] * eta


def one_se_index(losses: np.ndarray, penalties: np.ndarray, one_se: bool = True) -> int:
    """Index of the chosen λ from held-out ``losses`` (rows: folds or answers; one column per λ in ``penalties``).

    The λ of least mean loss; with ``one_se`` the largest λ whose mean loss is within one standard error
    (sd of the best λ's rows / √rows) of the least: ties go to the simpler (more shrunk) model.
    """
    mean = losses.mean(axis=0)
    best = int(np.argmin(mean))
    if not one_se:
        return best
    se = losses[:, best].std(ddof=1) / math.sqrt(losses.shape[0])
    ok = np.flatnonzero(mean <= mean[best] + se)
    return int(ok[np.argmax(penalties[ok])])
