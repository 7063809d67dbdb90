"""The paired bootstrap's AUROC and Brier draws of every split as matrix products over one sorted layout.

`tracecal.stats.bootstrap.blocked_split_draws` computes each split's weighted AUROC (module docstring there) by a
cumulative sum of every resample's weights over the split's wrong answers: B × S × m work per estimator in
memory-bound passes. Here the same numbers come from matrix products (BLAS) that read each weight once for all S
splits. With the task's answers in score order, ``w`` one resample's counts, ``m_s`` split s's evaluation
membership and, for a correct answer i and a wrong one j, ``k(i, j)`` = 2 if j scores lower, 1 on a tie, 0 else:

    2·U_s = Σ_{i: y=1} Σ_{j: y=0} w_i·m_si · w_j·m_sj · k(i, j),     AUROC_s = 2·U_s / (2·P_s·N_s)

(P_s, N_s the weights of the split's correct / wrong answers; the formula of `planned_auroc`). The sorted answers
are cut into **units** of `UNIT` slots that never split a tie of scores (a unit is closed early and padded with
weightless slots; a tie longer than a unit is a unit of its own). For each unit u, P_us and N_us are one batched
matrix product of its (L, B) weights with its (2S, L) membership; then

    2·U_s = Σ_u 2·P_us·(Σ_{u' < u} N_u's) + Σ_u within_us,

the first sum a running prefix over units (no sort, no gather per split), ``within_us`` the pairs inside unit u:
one product of the (pairs, B) matrix w_i·w_j of its correct/wrong slot pairs with the (S, pairs) matrix
k(i, j)·m_si·m_sj, or P_us·N_us for a tie unit (all its pairs tie). Brier's numerator Σ w_i·m_si·(p_si − y_i)² is a
product with the same weights; its denominator is P_s + N_s.

Exactness: weights are integer counts, so every product and partial sum above is an integer (or the products of
two); in float32 they are exact while below 2^24 (a unit's sums; the prefix sums, bounded by a row's total
weight; a chunk's pair sums), which is checked on every call — otherwise the call is redone in float64, exact to
2^53. The AUROC draws therefore equal `blocked_split_draws` bit for bit; Brier's sums run in another order (equal
to ~1e-16 relative). ``order`` per split (`split_order_draws`, for scores fitted per split) uses the same layout
with one split at a time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from tracecal.stats.bootstrap import split_mean

__all__ = ["UNIT", "Layout", "layout", "layout_auroc", "brier_numerators", "sorted_split_draws", "split_order_draws"]

UNIT = 16
"""Slots per unit: the pairs inside a unit cost ∝ UNIT, the running prefix over units ∝ 1 / UNIT."""
ROW_ELEMENTS = 5120
"""Resamples × samples handled at once (256 resamples of 20 splits): a chunk of units' weights stay in cache."""
BRIER_ELEMENTS = 1 << 19
"""Weights (answers × resamples) converted to float64 at once for Brier's numerators."""
UNITS_AT_ONCE = 32
EXACT32 = float(1 << 23)  # half the float32 integer range: a sum past 2^24 cannot round below it


@dataclass(frozen=True)
class Layout:
    """Answers of S samples in score order, cut into units (module docstring).

    ``slot``: (U·L,) task position at each slot (``-1``: padding); ``member``: (U, 2S, L) uint8, rows 0…S−1 the
    correct answers of each sample, S…2S−1 the wrong ones; ``pair_i`` / ``pair_j``: (pairs,) slots of each
    correct / wrong pair of a unit (by unit), ``pair_at``: (U + 1,) where each unit's pairs start, ``kernel``:
    (S, pairs) uint8 k(i, j)·m_si·m_sj; ``ties``: (U,) True for a unit that is one tie longer than L, whose
    positions are ``tie_pos[u]``."""

    L: int
    slot: NDArray[np.intp]
    member: NDArray[np.uint8]
    pair_i: NDArray[np.intp]
    pair_j: NDArray[np.intp]
    pair_at: NDArray[np.intp]
    kernel: NDArray[np.uint8]
    ties: NDArray[np.bool_]
    tie_pos: dict[int, NDArray[np.intp]]

    @property
    def units(self) -> int:
        return len(self.ties)


def _units(score: NDArray[np.float64], L: int) -> tuple[NDArray[np.intp], NDArray[np.intp], NDArray[np.bool_]]:
    """(start, length, tie) of the units over sorted scores: whole tie groups packed into L slots (next fit), a
    group longer than L a unit of its own."""
    n = score.size
    new = np.r_[True, score[1:] != score[:-1]] if n else np.zeros(0, bool)
    if new.all():  # no tie: units of L consecutive answers
        start = np.arange(0, n, L)
        return start, np.minimum(L, n - start), np.zeros(start.size, bool)
    g_start = np.flatnonzero(new)
    g_end = np.r_[g_start[1:], n]  # exclusive
    units: list[tuple[int, int, bool]] = []  # (start, length, a tie of its own)
    k, G = 0, g_start.size
    while k < G:
        a = int(g_start[k])
        if g_end[k] - a > L:
            units.append((a, int(g_end[k]) - a, True))
            k += 1
            continue
        k2 = int(np.searchsorted(g_end, a + L, side="right"))  # groups k … k2 − 1 end within L slots
        units.append((a, int(g_end[k2 - 1]) - a, False))
        k = k2
    start, length, tie = (np.array(col) for col in zip(*units, strict=True))
    return start.astype(np.intp), length.astype(np.intp), tie.astype(bool)


def layout(
    y: NDArray[Any], score: NDArray[np.float64], order: NDArray[np.intp], member: NDArray[np.bool_], L: int = UNIT
) -> Layout:
    """The `Layout` of samples ``member`` ((S, n) booleans over a task's answers) from **one** sort of the task's
    scores, ``order`` (the task positions by ascending score; ties in any order)."""
    yy, ss = np.asarray(y)[order].astype(np.int8), np.asarray(score, dtype=np.float64)[order]
    S = member.shape[0]
    start, length, tie = _units(ss, L)
    U = start.size
    at = np.arange(L)
    real = (at < length[:, None]) & ~tie[:, None]  # (U, L)
    sorted_pos = np.where(real, start[:, None] + at, 0)
    slot = np.where(real, order[sorted_pos], -1)
    lab = np.where(real, yy[sorted_pos], -1)
    grp = np.cumsum(np.r_[True, ss[1:] != ss[:-1]] if ss.size else np.zeros(0, bool))
    gid = grp[sorted_pos] if ss.size else np.zeros((U, L), np.intp)
    mem = member[:, np.where(real, slot, 0)] & real  # (S, U, L)
    memb = np.empty((U, 2 * S, L), np.uint8)
    memb[:, :S] = (mem & (lab == 1)).transpose(1, 0, 2)
    memb[:, S:] = (mem & (lab == 0)).transpose(1, 0, 2)
    pair = (lab[:, :, None] == 1) & (lab[:, None, :] == 0) & (gid[:, :, None] >= gid[:, None, :])
    u, li, lj = np.nonzero(pair)  # (correct i, wrong j) of a unit, j not above i
    pi, pj = u * L + li, u * L + lj
    k = (1 + (gid[u, li] > gid[u, lj])).astype(np.uint8)  # 2 below, 1 tied
    kernel = (mem[:, u, li] & mem[:, u, lj]).astype(np.uint8) * k
    tie_pos = {int(t): order[start[t] : start[t] + length[t]] for t in np.flatnonzero(tie)}
    pair_at = np.searchsorted(u, np.arange(U + 1))
    return Layout(L, slot.ravel(), memb, pi, pj, pair_at, kernel, tie, tie_pos)


def _chunks(lay: Layout) -> list[tuple[int, int]]:
    """Unit ranges processed together: runs of ordinary units cut into `UNITS_AT_ONCE`, a tie unit alone."""
    cuts = np.unique(
        np.r_[np.arange(0, lay.units, UNITS_AT_ONCE), np.flatnonzero(lay.ties), np.flatnonzero(lay.ties) + 1]
    )
    cuts = cuts[cuts < lay.units]
    return list(zip(cuts.tolist(), np.r_[cuts[1:], lay.units].tolist()[: cuts.size], strict=True))


def _tie_chunk(
    lay: Layout, Wc: NDArray[Any], u: int, y: NDArray[Any], member: NDArray[np.bool_], dt: type, acc: dict[str, Any]
) -> None:
    """A tie unit: all its pairs tie, 2·U += 2·P·(prefix) + P·N, in float64."""
    pos = lay.tie_pos[u]
    m = member[:, pos]
    X: NDArray[Any] = Wc[pos].astype(dt)
    P = (m & (y[pos] == 1)).astype(dt) @ X
    N = (m & (y[pos] == 0)).astype(dt) @ X
    P64 = P.astype(np.float64)
    acc["u2"] += P64 * (2.0 * acc["run"] + N)
    acc["run"] += N
    acc["P"] += P64


def _chunk(lay: Layout, X: NDArray[Any], u0: int, u1: int, acc: dict[str, Any]) -> None:
    """Ordinary units u0 … u1 − 1 with weights ``X`` ((slots, b), the units' slots): adds their 2·U and P to
    ``acc`` and advances its running prefix ``run`` (module docstring). The sums local to the chunk
    (within-chunk prefix products, pair sums) stay in ``X``'s dtype; ``acc["big"]`` records their bound."""
    L, S, b = lay.L, lay.member.shape[1] // 2, X.shape[1]
    PN = np.matmul(lay.member[u0:u1].astype(X.dtype), X.reshape(u1 - u0, L, b))  # (units, 2S, b)
    P, N = PN[:, :S], PN[:, S:]
    loc = np.empty((u1 - u0, S, b), X.dtype)  # the wrong answers' weight in earlier units of the chunk
    loc[0] = 0
    for k in range(1, u1 - u0):
        np.add(loc[k - 1], N[k - 1], out=loc[k])
    cs = PN.sum(axis=0)
    cp, cn = cs[:S], cs[S:]
    local = 2 * (P * loc).sum(axis=0)
    p0, p1 = lay.pair_at[u0], lay.pair_at[u1]
    if p1 > p0:
        off = u0 * L
        Q = X[lay.pair_i[p0:p1] - off] * X[lay.pair_j[p0:p1] - off]
        local += lay.kernel[:, p0:p1].astype(X.dtype) @ Q
    acc["big"] = max(acc["big"], float((cp * cn).max(initial=0)))
    acc["u2"] += local
    acc["u2"] += 2.0 * acc["run"] * cp
    acc["run"] += cn
    acc["P"] += cp


def brier_numerators(E: NDArray[np.float64], counts: NDArray[Any]) -> NDArray[np.float64]:
    """Σ_i w_bi·E_si for every sample s and resample b: (S, B), a float64 product over blocks of answers."""
    Wt = counts.T
    num = np.zeros((E.shape[0], Wt.shape[1]))
    step = max(1, BRIER_ELEMENTS // max(Wt.shape[1], 1))
    for p0 in range(0, Wt.shape[0], step):
        num += E[:, p0 : p0 + step] @ Wt[p0 : p0 + step].astype(np.float64)
    return num


def layout_auroc(
    lay: Layout, y: NDArray[Any], member: NDArray[np.bool_], counts: NDArray[Any]
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """(AUROC, P, N) of every sample of ``lay`` and resample, each (S, B): P / N the weights of the sample's correct
    / wrong answers. ``counts`` (B, n) integer weights (its transpose C-contiguous — ``order="F"`` in
    `tracecal.stats.bootstrap.bootstrap_counts` — reads fastest). Float32 where that is exact, else the call is
    redone in float64 (module docstring)."""
    Wt, yy = counts.T, np.asarray(y)
    S, B, L = member.shape[0], counts.shape[0], lay.L
    slot = np.maximum(lay.slot, 0)  # padding reads answer 0, whose membership there is 0
    chunks, rows = _chunks(lay), max(1, ROW_ELEMENTS // S)
    for dt in (np.float32, np.float64):
        out = {k: np.zeros((S, B)) for k in ("u2", "P", "run")}
        big = 0.0
        for b0 in range(0, B, rows):
            Wc = Wt[:, b0 : b0 + rows]
            b = Wc.shape[1]
            acc: dict[str, Any] = {k: np.zeros((S, b)) for k in ("u2", "P", "run")} | {"big": 0.0}
            for u0, u1 in chunks:
                if lay.ties[u0]:
                    _tie_chunk(lay, Wc, u0, yy, member, dt, acc)
                else:
                    _chunk(lay, Wc[slot[u0 * L : u1 * L]].astype(dt), u0, u1, acc)
            for k in out:
                out[k][:, b0 : b0 + b] = acc[k]
            big = max(big, acc["big"])
        if dt is np.float64 or max(4.0 * big, float((out["P"] + out["run"]).max(initial=0.0))) < EXACT32:
            break
    P, N = out["P"], out["run"]
    denom = 2.0 * P * N
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denom > 0, out["u2"] / np.where(denom > 0, denom, 1.0), np.nan), P, N


def _brier(E: NDArray[np.float64], counts: NDArray[Any], P: NDArray[np.float64], N: NDArray[np.float64]) -> NDArray:
    tot = P + N
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(tot > 0, brier_numerators(E, counts) / np.where(tot > 0, tot, 1.0), np.nan)


def sorted_split_draws(
    y: NDArray[Any],
    score: NDArray[np.float64],
    order: NDArray[np.intp],
    member: NDArray[np.bool_],
    evals: NDArray[np.intp],
    sq_err: NDArray[np.float64],
    counts: NDArray[Any],
) -> dict[str, NDArray[np.float64]]:
    """`tracecal.stats.bootstrap.blocked_split_draws` of a label-free score from one sort: ``order`` (stable
    argsort of ``score`` over the task), ``member`` (S, n) the evaluation splits, ``evals`` / ``sq_err`` (S, m)
    each split's answers and their (p − y)²: {"auroc": (B,), "brier": (B,)}, the mean over splits of each
    resample (NaN splits left out)."""
    S, n = member.shape
    E = np.zeros((S, n))
    E[np.arange(S)[:, None], evals] = sq_err
    auc, P, N = layout_auroc(layout(y, score, order, member), y, member, counts)
    return {"auroc": split_mean(auc), "brier": split_mean(_brier(E, counts, P, N))}


def split_order_draws(
    y: NDArray[Any],
    evals: NDArray[np.intp],
    raw_ev: NDArray[np.float64],
    sq_err: NDArray[np.float64],
    counts: NDArray[Any],
    L: int = 8,
) -> dict[str, NDArray[np.float64]]:
    """The same for scores that differ per split (an estimator fitted on each calibration split): ``raw_ev`` /
    ``sq_err`` (S, m) the scores and (p − y)² of each split's answers ``evals``; one layout per split."""
    S, (B, n) = len(evals), counts.shape
    auc, P, N = np.empty((S, B)), np.empty((S, B)), np.empty((S, B))
    E = np.zeros((S, n))
    E[np.arange(S)[:, None], evals] = sq_err
    for s in range(S):
        member = np.zeros((1, n), bool)
        member[0, evals[s]] = True
        order = evals[s][np.argsort(raw_ev[s], kind="stable")]
        score = np.zeros(n)
        score[evals[s]] = raw_ev[s]
        lay = layout(y, score, order, member, L)
        auc[s], P[s], N[s] = (v[0] for v in layout_auroc(lay, y, member, counts))
    return {"auroc": split_mean(auc), "brier": split_mean(_brier(E, counts, P, N))}
