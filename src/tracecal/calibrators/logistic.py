"""The logistic fits shared by the calibrators: Platt scaling (`platt_rows`, the one fit behind
`tracecal.calibrators.PlattCalibrator` and the protocol's calibration of every split), penalised Newton deviations,
per-answer log-loss and the one-standard-error rule choosing a penalty λ (TRACE+).

All in nats; η denotes log-odds of correctness, y ∈ {0, 1} the labels, ℓ(η, y) = log(1 + e^η) − y·η the log-loss.

Platt scaling of scores s with labels y: z = (s − mean) / sd (the score standardised on the fit data; sd 1 for a
constant score), η = a + w·z, minimising Σ_i ℓ(η_i, y_i) + w²/(2C) (C = 1e6 by default: the slope's L2 penalty of
scikit-learn's ``LogisticRegression(C)``, the intercept unpenalised). The objective is strictly convex, so its
optimum is unique and finite even on separable data, where the penalty alone bounds w (|w| grows like log C over
the gap between the classes: ≈ 14 to 40 on the standardised scores of nearly separable problems). It is solved by
Newton's method, on many problems (rows) together: closed-form 2×2 solves from a = logit(base rate), w = 0, each
component of a step capped at 5 in log-odds; a step that would raise the objective is replaced by the Newton
direction shortened to the cap and halved until the objective falls (so every step descends and the fit converges;
the capped step alone can overshoot on nearly separable data). Each row stops once its step is below 1e-10 (its
iterates do not depend on the other rows), after at most ``max_iter`` steps. A single-class row gets the
constant base rate.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import expit

__all__ = [
    "DEFAULT_PENALTIES",
    "PLATT_C",
    "PLATT_RIDGE",
    "platt_newton",
    "platt_rows",
    "penalised_logistic",
    "batched_platt",
    "log_loss",
    "one_se_index",
]

DEFAULT_PENALTIES = (0.3, 1.0, 3.0, 10.0, 30.0, 100.0, math.inf)
"""The λ grid: from weaker than TRACE+'s own L2 (λ = 1/C = 1) to ∞ (= no deviation from the prior)."""
PLATT_C = 1e6
"""`PlattCalibrator`'s default C, the protocol's: the slope penalty w²/(2C) on the summed log-loss."""
PLATT_RIDGE = 1e-6  # = 1/C of `PlattCalibrator` (C = 1e6): the slope's L2 on the summed log-loss
PLATT_MAX_ITER = 1000
"""Newton steps at most (`PlattCalibrator`'s ``max_iter``); a fit takes 5–30."""
NEWTON_TOL, NEWTON_CAP = 1e-10, 5.0


def _platt_objective(Z: np.ndarray, Y: np.ndarray, eta: np.ndarray, w: np.ndarray, C: float) -> np.ndarray:
    return (np.logaddexp(0.0, eta) - Y * eta).sum(axis=1) + 0.5 * w * w / C


def platt_newton(
    z: np.ndarray, y: np.ndarray, C: float = PLATT_C, max_iter: int = PLATT_MAX_ITER, tol: float = NEWTON_TOL
) -> tuple[np.ndarray, np.ndarray]:
    """(a, w), each (S,): the Platt fit (module docstring) of every row of standardised scores ``z`` (S, m) with
    labels ``y`` (S, m) or (m,), each row holding both classes."""
    Yall = np.broadcast_to(np.asarray(y, dtype=np.float64), z.shape)
    p0 = np.clip(Yall.mean(axis=1), 1e-6, 1 - 1e-6)
    a, w = np.log(p0 / (1 - p0)), np.zeros(len(z))
    eta_all = np.broadcast_to(a[:, None], z.shape)
    f = _platt_objective(z, Yall, eta_all, w, C)
    active, eta = np.arange(len(z)), np.array(eta_all)
    for _ in range(max_iter):
        if active.size == 0:
            break
        Z, Y, A, Wt = z[active], Yall[active], a[active], w[active]
        p = expit(eta)
        r, v = p - Y, p * (1.0 - p)
        ga, gw = r.sum(axis=1), (r * Z).sum(axis=1) + Wt / C
        haa, haw, hww = v.sum(axis=1), (v * Z).sum(axis=1), (v * Z * Z).sum(axis=1) + 1.0 / C
        det = np.maximum(haa * hww - haw * haw, 1e-300)
        na, nw = (hww * ga - haw * gw) / det, (haa * gw - haw * ga) / det  # the Newton step
        da, dw = np.clip(na, -NEWTON_CAP, NEWTON_CAP), np.clip(nw, -NEWTON_CAP, NEWTON_CAP)
        A1, W1, f0 = A - da, Wt - dw, f[active]
        eta = A1[:, None] + W1[:, None] * Z
        f1 = _platt_objective(Z, Y, eta, W1, C)
        worse = f1 > f0 + 1e-12 * (1.0 + np.abs(f0))
        if worse.any():  # along the Newton direction, shortened to the cap, halved until the objective falls
            cut = np.minimum(1.0, NEWTON_CAP / np.maximum(np.abs(na), np.abs(nw)))
            da[worse], dw[worse] = na[worse] * cut[worse], nw[worse] * cut[worse]
        for _ in range(60):
            if not worse.any():
                break
            A1[worse], W1[worse] = A[worse] - da[worse], Wt[worse] - dw[worse]
            eta[worse] = A1[worse, None] + W1[worse, None] * Z[worse]
            f1[worse] = _platt_objective(Z[worse], Y[worse], eta[worse], W1[worse], C)
            worse &= f1 > f0
            da[worse], dw[worse] = 0.5 * da[worse], 0.5 * dw[worse]
        if worse.any():  # no descent at any step length left: the optimum to rounding; stay
            A1[worse], W1[worse], f1[worse], da[worse], dw[worse] = A[worse], Wt[worse], f0[worse], 0.0, 0.0
            eta[worse] = A1[worse, None] + W1[worse, None] * Z[worse]
        a[active], w[active], f[active] = A1, W1, f1
        going = np.maximum(np.abs(da), np.abs(dw)) >= tol
        active, eta = active[going], eta[going]
    return a, w


def platt_rows(
    s: np.ndarray, y: np.ndarray, C: float = PLATT_C, max_iter: int = PLATT_MAX_ITER
) -> tuple[np.ndarray, ...]:
    """Platt scaling (module docstring) of every row of scores ``s`` (S, m) with labels ``y`` (S, m): (mean,
    scale, a, w, constant), each (S,), p = σ(a + w·(s − mean) / scale); ``constant`` is the base rate of a
    single-class row (its a, w are 0), else NaN."""
    mean, sd = s.mean(axis=1), s.std(axis=1)
    scale = np.where((sd > 0) & np.isfinite(sd), sd, 1.0)
    n1 = y.sum(axis=1)
    constant = np.where((n1 == 0) | (n1 == y.shape[1]), y.mean(axis=1), np.nan)
    a, w = np.zeros(len(s)), np.zeros(len(s))
    two = np.flatnonzero(np.isnan(constant))
    if two.size:
        a[two], w[two] = platt_newton((s[two] - mean[two, None]) / scale[two, None], y[two], C, max_iter)
    return mean, scale, a, w, constant


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
    Z: np.ndarray, y: np.ndarray, ridge: float = PLATT_RIDGE, max_iter: int = 50, tol: float = NEWTON_TOL
) -> tuple[np.ndarray, np.ndarray]:
    """Platt scaling of every column of ``Z`` (n, K) with labels ``y`` (n,): (a, w), each (K,), minimising per
    column Σ_i [log(1 + e^{η_i}) − y_i·η_i] + (ridge/2)·w², η = a + w·Z[:, j] — `platt_newton` on the columns (no
    standardisation here: on standardised columns it is `PlattCalibrator`, whose slope penalty is the same 1/C)."""
    return platt_newton(np.ascontiguousarray(Z.T), y, 1.0 / ridge, max_iter, tol)


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
