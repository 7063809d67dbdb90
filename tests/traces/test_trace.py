"""`Trace` and `TraceBatch`: consistent fields, validated values (finite, ≥ 0 nats), errors that name the answer."""

from __future__ import annotations

import numpy as np
import pytest

from tracecal.signals.operators import trace_confidence
from tracecal.traces.trace import Trace, TraceBatch


def test_inconsistent_trace_refused() -> None:
    with pytest.raises(ValueError, match="surprisal"):
        Trace(text="a", token_ids=[1, 2], surprisal=[0.1], entropy=[0.1, 0.2])
    with pytest.raises(ValueError, match="entropy_kind"):
        Trace(text="a", token_ids=[1], surprisal=[0.1], entropy=[0.1], entropy_kind="approx")


def test_batch_validation() -> None:
    with pytest.raises(ValueError, match="offsets"):
        TraceBatch(np.zeros(3), np.zeros(3), np.array([0, 2]))
    with pytest.raises(ValueError):
        TraceBatch.from_lists([[1.0]], [[1.0, 2.0]])


# ------------------------------------------------------------------------------------ value validation


def _trace(s: list[float], h: list[float], id: str = "") -> Trace:
    return Trace(text="x" * len(s), token_ids=np.arange(len(s)), surprisal=s, entropy=h, id=id)


def test_from_lists_refuses_negative_surprisal() -> None:
    with pytest.raises(ValueError, match=r"^answer 1: surprisal of token 2 is -0.7; surprisal is s_t = −log p_t ≥ 0"):
        TraceBatch.from_lists([[0.1], [0.2, 0.3, -0.7]], [[0.1], [0.1, 0.1, 0.1]])
    with pytest.raises(ValueError, match=r"answer 0: entropy of token 0 is -2.0; entropy H_t .* is ≥ 0"):
        TraceBatch.from_lists([[0.1]], [[-2.0]])
    with pytest.raises(ValueError, match=r"answer 0: surprisal of token 1 is inf; surprisal must be finite"):
        TraceBatch.from_lists([[0.1, np.inf]], [[0.1, 0.1]])
    with pytest.raises(ValueError, match=r"entropy of token 0 is nan; .*\(2 bad entropy value\(s\) in all"):
        TraceBatch.from_lists([[0.1], [0.1]], [[np.nan], [np.nan]])


def test_from_traces_names_the_id_and_leaves_traces_alone() -> None:
    traces = [_trace([0.1], [0.2], "a"), _trace([0.3, -1e-9], [0.2, -2e-5], "b")]  # float32 entropy round-off
    b = TraceBatch.from_traces(traces)  # round-off below 0 is clipped in the batch …
    np.testing.assert_array_equal(b.surprisal, [0.1, 0.3, 0.0])
    np.testing.assert_array_equal(b.entropy, [0.2, 0.2, 0.0])
    assert traces[1].surprisal[1] == -1e-9  # … never in the caller's traces
    traces.append(_trace([0.1, 0.2, -0.5], [0.1, 0.1, 0.1], "q42"))
    with pytest.raises(ValueError, match=r"^answer 2 \(id 'q42'\): surprisal of token 2 is -0.5"):
        TraceBatch.from_traces(traces)


def test_checked_batch_is_remembered_and_clean_batch_returned_as_is() -> None:
    b = TraceBatch(np.array([0.1, 0.2]), np.array([0.0, 1.0]), np.array([0, 2]))
    assert not b.values_checked
    assert b.checked() is b and b.values_checked
    assert all(sub.values_checked for _, _, sub in b.chunks(1)) and b.select([0]).values_checked
    noisy = TraceBatch(np.array([-1e-7]), np.array([0.5]), np.array([0, 1]))
    fixed = noisy.checked()
    assert fixed is not noisy and fixed.surprisal[0] == 0.0 and noisy.surprisal[0] == -1e-7
    with pytest.raises(ValueError, match="answer 0: surprisal of token 0 is -0.001"):
        TraceBatch(np.array([-1e-3]), np.array([0.5]), np.array([0, 1])).checked()


def test_trace_confidence_refuses_negative_surprisal() -> None:
    """The bug this guards against: negative surprisal gave c_TRACE = 1.71 (> 1)."""
    bad = [_trace([-1.0, -1.0, -1.0], [0.1, 0.1, 0.1], "neg")]
    with pytest.raises(ValueError, match=r"answer 0 \(id 'neg'\): surprisal of token 0 is -1.0"):
        trace_confidence(bad)
    c = trace_confidence([_trace([0.0, 1e-300], [0.0, 0.0])])
    assert c[0] == 1.0


def test_absurd_finite_values_are_refused_before_any_operator_overflows() -> None:
    """Entropy or surprisal of 1e308 nats made the operators overflow (inf, NaN and a RuntimeWarning): every
    boundary now refuses values above MAX_TOKEN_NATS, naming the answer; values up to it stay finite."""
    import warnings

    from tracecal.traces.trace import MAX_TOKEN_NATS

    for s, h in (([0.1, 1e308], [0.1, 0.1]), ([0.1, 0.1], [0.1, 1e308])):
        with pytest.raises(
            ValueError, match=rf"answer 0 \(id 'x'\): .* of token 1 is 1e\+308; .* ≤ {MAX_TOKEN_NATS:g}"
        ):
            trace_confidence([_trace(s, h, "x")])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow warning at the bound
        c = trace_confidence([_trace([MAX_TOKEN_NATS] * 50, [MAX_TOKEN_NATS] * 50)])
    assert np.isfinite(c).all() and 0.0 <= c[0] <= 1.0
