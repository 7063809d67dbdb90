"""`tracecal.backends.llamacpp_steps`: one llama.cpp step's (lse, H) and top-k alternatives, in NumPy."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import logsumexp

from tracecal.backends.llamacpp_steps import draw, logits_stats, stack_top, top_k


def test_logits_stats_against_scipy() -> None:
    x = np.random.default_rng(1).normal(0, 3, 1000)
    lse, h = logits_stats(x)
    p = np.exp(x - logsumexp(x))
    assert lse == pytest.approx(logsumexp(x), abs=1e-9) and h == pytest.approx(-(p * np.log(p)).sum(), abs=1e-9)


def test_top_k_and_stack_top() -> None:
    x = np.array([0.5, 3.0, -1.0, 2.0, 2.5])
    lse = float(logsumexp(x))
    ids, lp = top_k(x, lse, 3)
    assert ids.tolist() == [1, 4, 3] and ids.dtype == np.int64
    np.testing.assert_allclose(lp, x[[1, 4, 3]] - lse)
    a, b = stack_top([top_k(x, lse, 2), top_k(-x, lse, 2)])
    assert a is not None and b is not None and a.shape == b.shape == (2, 2) and a[1].tolist() == [2, 0]
    assert stack_top([]) == (None, None)


def test_draw_follows_the_softmax() -> None:
    x = np.log(np.array([0.5, 0.3, 0.2, 0.0]) + 1e-300)
    rng = np.random.default_rng(0)
    counts = np.bincount([draw(x, float(logsumexp(x)), rng) for _ in range(20000)], minlength=4)
    np.testing.assert_allclose(counts / 20000, [0.5, 0.3, 0.2, 0.0], atol=0.015)
