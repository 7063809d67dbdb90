"""`tracecal.serve.scoring`: the running risk is the TRACE operators over each prefix; the confidence object."""

from __future__ import annotations

import numpy as np
import pytest

from tracecal.errors import TracecalError
from tracecal.serve.scoring import first_risky, prefix_risks, truncate
from tracecal.signals.operators import trace_risk
from tracecal.traces.trace import Trace, TraceBatch


def test_prefix_risks_are_the_operators_over_each_prefix() -> None:
    rng = np.random.default_rng(1)
    traces = [
        Trace(text="", token_ids=np.arange(n), surprisal=rng.random(n) * 3, entropy=rng.random(n) * 4)
        for n in (1, 5, 9, 0, 3)
    ]
    risks = prefix_risks(traces)
    for t, r in zip(traces, risks, strict=True):
        want = [
            trace_risk(TraceBatch.from_lists([t.surprisal[:k]], [t.entropy[:k]]))[0] for k in range(1, t.length + 1)
        ]
        np.testing.assert_allclose(r, want, rtol=1e-12)
    assert first_risky(np.array([0.1, 0.2, 2.0, 0.1]), stop_on_risk=0.5) == 3
    assert first_risky(np.array([2.0, 0.1]), stop_on_risk=0.5, min_tokens=2) is None
    cut = truncate(
        Trace(
            text="abc",
            token_ids=[1, 2, 3],
            surprisal=[1, 1, 1],
            entropy=[1, 1, 1],
            token_strings=["a", "b", "c"],
            offsets=[0, 1, 2],
        ),
        2,
        "stopped",
    )
    assert (cut.text, cut.length, cut.stop_reason) == ("ab", 2, "stopped")


def test_the_confidence_object_and_the_abstain_policy() -> None:
    from tests.serve.helpers import fake_trace
    from tracecal.serve.scoring import Scorer
    from tracecal.signals.operators import trace_confidence

    t, empty = fake_trace(None), fake_trace(None, 0)
    c = float(trace_confidence([t])[0])
    conf, none = Scorer(abstain_below=c + 1e-9).confidence([t, empty], return_trace=True)
    assert conf["c_trace"] == pytest.approx(c) and conf["risk"] == pytest.approx(-np.log(c))
    assert conf["abstain"] is True and conf["abstain_on"] == "c_trace" and conf["calibrator"] is None
    assert conf["probability"] is None and conf["tokens"] == 3 and conf["trace"]["tokens"] == ["a", "b", "c"]
    assert none["c_trace"] is None and none["abstain"] is True  # an empty answer has no confidence: it abstains
    assert Scorer().confidence([t])[0]["abstain"] is False  # no threshold: never abstain
    scored = Scorer().score_batch(TraceBatch.from_traces([t, empty]))
    assert scored["trace_confidence"] == [pytest.approx(c), None] and scored["trace_plus"] is None
    with pytest.raises(ValueError, match="needs a calibrator"):
        Scorer(abstain_on="probability")
    with pytest.raises(TracecalError, match="calibrator must be a fitted tracecal calibrator"):
        Scorer(calibrator=object())


def test_the_confidence_carries_the_risky_spans_and_the_tracker_closes_them() -> None:
    from tracecal.serve.scoring import Scorer, SpanTracker
    from tracecal.signals.spans import risk_spans
    from tracecal.traces.trace import Trace

    h = [0.1, 2.5, 2.0, 0.1, 0.2, 3.0, 0.1, 0.1]
    words = ["A", " b", "c", " d", " e", "你", "", "!"]
    t = Trace(text="".join(words), token_ids=np.arange(8), surprisal=h, entropy=h, token_strings=words)
    conf = Scorer(spans=2).confidence([t])[0]
    assert conf["spans"] == [x.to_dict() for x in risk_spans([t], k=2)[0]]
    assert [x["text"] for x in conf["spans"]] == ["你", " bc"]
    assert Scorer(spans=0).confidence([t])[0]["spans"] == []
    tracker = SpanTracker()
    closed = [tracker.add(w, s, e) for w, s, e in zip(words, h, h, strict=True)]
    assert tracker.text == t.text
    got = [(i, x["token_start"], x["token_end"], x["text"]) for i, x in enumerate(closed) if x]
    assert got == [(3, 1, 3, " bc"), (6, 5, 6, "你")]  # each on the token after its last one
