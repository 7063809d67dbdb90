"""`tracecal.secl.targets`: each target SECL can pull v toward, from the frozen pass; the online rank by hand; a run
with each target (the oracle's τ is the labels, the trace targets cost no τ read)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.secl.helpers import ALWAYS
from tracecal.secl import run_secl
from tracecal.secl.targets import TARGET_NAMES, online_rank, target_series, trace_target
from tracecal.signals.operators import trace_risk
from tracecal.traces.trace import TraceBatch


def test_online_rank_is_the_mid_rank_among_the_values_seen_so_far() -> None:
    u = online_rank(np.array([0.5, 0.2, 0.9, 0.2, 0.5]))
    np.testing.assert_allclose(u, [0.5, 0.25, 2.5 / 3, 1.0 / 4, 3.0 / 5])
    assert online_rank(np.zeros(0)).shape == (0,)
    # causal: a value's rank does not depend on what comes after it
    c = np.random.default_rng(0).random(50)
    np.testing.assert_array_equal(online_rank(c)[:20], online_rank(c[:20]))
    assert ((online_rank(c) > 0) & (online_rank(c) < 1)).all()


def test_trace_target_is_exp_minus_the_trace_risk_and_zero_for_an_empty_answer() -> None:
    h = [np.array([0.1, 0.2, 0.1, 0.3]), np.array([1.5, 2.2, 1.8, 2.5]), np.zeros(0)]
    s = [np.array([0.01, 0.02, 0.01, 0.05]), np.array([0.9, 1.6, 0.7, 2.0]), np.zeros(0)]
    c = trace_target(h, s)
    np.testing.assert_allclose(c[:2], np.exp(-trace_risk(TraceBatch.from_lists(s[:2], h[:2]))))
    assert c[2] == 0.0 and c[0] > c[1]


def test_every_target_from_the_frozen_pass(stream, frozen) -> None:  # type: ignore[no-untyped-def]
    assert set(TARGET_NAMES) == {"norm_ptrue", "ptrue", "trace", "trace_rank", "oracle"}
    labels = [it.task.label(it.example, a) for it, a in zip(stream, frozen.answers, strict=True)]
    got = {k: target_series(k, frozen, stream) for k in TARGET_NAMES}
    np.testing.assert_array_equal(got["norm_ptrue"], frozen.tau)
    np.testing.assert_array_equal(got["ptrue"], frozen.p_yes)
    np.testing.assert_array_equal(got["trace"], trace_target(frozen.entropy, frozen.surprisal))
    np.testing.assert_array_equal(got["trace_rank"], online_rank(got["trace"]))
    np.testing.assert_array_equal(got["oracle"], labels)
    assert all(((t >= 0) & (t <= 1)).all() for t in got.values())
    with pytest.raises(ValueError, match="needs the frozen pass's raw P\\(yes\\)"):
        target_series("ptrue", dataclasses.replace(frozen, p_yes=None), stream)
    with pytest.raises(ValueError, match="unknown target 'labels'"):
        target_series("labels", frozen, stream)


@pytest.mark.parametrize("target", ["oracle", "trace", "ptrue"])
def test_a_run_pulls_v_toward_the_configured_target(tiny_model, stream, frozen, target) -> None:  # type: ignore[no-untyped-def]
    res = run_secl(tiny_model, stream, dataclasses.replace(ALWAYS, target=target, accumulate=False), frozen=frozen)
    want = target_series(target, frozen, stream)
    np.testing.assert_array_equal(res.tau, want)  # the reported τ is the target that was used
    np.testing.assert_array_equal(res.records.tau_used, want)  # every question was let through (gate always)
    np.testing.assert_array_equal(res.records.updated, np.abs(res.records.v_before - want) > ALWAYS.update_threshold)
    if target == "oracle":
        np.testing.assert_array_equal(res.tau, res.y_frozen)  # the oracle's τ is the labels
    tau_tokens = res.secl_cost.forward_tokens.get("tau_gated", 0)
    assert tau_tokens == (int(frozen.tau_tokens.sum()) if target == "ptrue" else 0)
