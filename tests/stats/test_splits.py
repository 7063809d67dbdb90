"""The split helpers: class shares, and the very draws the protocol, the learning curves and selective answering
made before the helpers were gathered here (frozen copies of the old code below)."""

from __future__ import annotations

import numpy as np
import pytest

from tracecal.stats.splits import partition, stratified_draw, stratified_split, threshold_split


def _old_stratified_split(y: np.ndarray, cal_frac: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    cal: list[np.ndarray] = []
    ev: list[np.ndarray] = []
    classes = [np.flatnonzero(y == c) for c in (0, 1)]
    if min(len(c) for c in classes) < 2:
        idx = rng.permutation(len(y))
        k = int(round(cal_frac * len(y)))
        return np.sort(idx[:k]), np.sort(idx[k:])
    for c in classes:
        p = rng.permutation(c)
        k = int(round(cal_frac * len(c)))
        cal.append(p[:k])
        ev.append(p[k:])
    return np.sort(np.concatenate(cal)), np.sort(np.concatenate(ev))


def _old_stratified_draw(y: np.ndarray, size: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    pos, neg = np.flatnonzero(y == 1), np.flatnonzero(y == 0)
    k = int(min(max(round(size * pos.size / y.size), 1), pos.size - 1))
    cal = np.concatenate([rng.choice(pos, k, replace=False), rng.choice(neg, size - k, replace=False)])
    mask = np.zeros(y.size, dtype=bool)
    mask[cal] = True
    return np.flatnonzero(mask), np.flatnonzero(~mask)


def _old_threshold_split(y: np.ndarray, holdout: float, seed: object) -> tuple[np.ndarray, np.ndarray]:
    n = y.size
    k = int(round(holdout * n))
    if holdout > 0 and n >= 2:
        k = min(max(k, 1), n - 1)
    perm = np.random.default_rng(seed).permutation(n)
    return np.sort(perm[k:]), np.sort(perm[:k])


def _same(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> bool:
    return all(np.array_equal(x, z) and x.dtype == z.dtype for x, z in zip(a, b, strict=True))


@pytest.mark.parametrize("seed", [0, 1, 7, 12345])
def test_the_draws_are_the_old_ones(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    for n, share in ((300, 0.3), (57, 0.6), (10, 0.05), (9, 0.95)):
        y = (rng.random(n) < share).astype(np.int64)
        for frac in (0.35, 0.5, 0.1):
            assert _same(stratified_split(y, frac, seed), _old_stratified_split(y, frac, seed))
            assert _same(threshold_split(y, frac, (seed, 3)), _old_threshold_split(y, frac, (seed, 3)))
        if 2 <= y.sum() <= n - 2:
            size = max(2, n // 3)
            new, old = np.random.default_rng((seed, size)), np.random.default_rng((seed, size))
            for _ in range(3):
                assert _same(stratified_draw(y, size, new), _old_stratified_draw(y, size, old))


def test_stratified_split_keeps_class_shares() -> None:
    y = np.array([1] * 20 + [0] * 80)
    cal, ev = stratified_split(y, 0.35, seed=0)
    assert len(set(cal) & set(ev)) == 0 and len(cal) + len(ev) == 100
    assert y[cal].sum() == 7 and y[ev].sum() == 13
    cal2, _ = stratified_split(y, 0.35, seed=1)
    assert not np.array_equal(cal, cal2)


def test_stratified_draw_keeps_the_base_rate() -> None:
    y = np.r_[np.ones(30, int), np.zeros(270, int)]
    rng = np.random.default_rng(0)
    cal, ev = stratified_draw(y, 100, rng)
    assert len(cal) == 100 and y[cal].sum() == 10 and len(ev) == 200 and not set(cal) & set(ev)
    cal, _ = stratified_draw(y, 4, rng)
    assert y[cal].sum() == 1  # at least one of each class


def test_threshold_split_and_bad_holdouts() -> None:
    y = np.r_[np.ones(30, int), np.zeros(70, int)]
    fit, thr = threshold_split(y, 0.25, seed=0)
    assert len(thr) == 25 and len(fit) == 75 and not set(fit) & set(thr) and sorted([*fit, *thr]) == list(range(100))
    assert [len(p) for p in threshold_split([1, 0], 0.1)] == [1, 1]  # never an empty part
    assert len(threshold_split(y, 0.0)[1]) == 0
    for bad in (1.0, -0.1, "half", True):
        with pytest.raises(ValueError, match="sel_holdout"):
            threshold_split(y, bad)  # type: ignore[arg-type]


def test_partition_sorts_both_parts() -> None:
    chosen, rest = partition([5, 1, 3], 7)
    assert chosen.tolist() == [1, 3, 5] and rest.tolist() == [0, 2, 4, 6]
