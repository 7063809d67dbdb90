"""`tracecal.backends.http_reply`: a server's reply → `Trace` (top-k entropy estimate, stored head, offsets)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from tracecal.backends.http_client import HTTPBackendError, LogprobsUnavailableError
from tracecal.backends.http_reply import Reply, drop_end_of_turn, reply_trace
from tracecal.backends.topk import topk_entropy

BACKEND = SimpleNamespace(
    vocab_size=100,
    entropy_estimator="uniform_tail",
    top_logprobs=2,
    full_distribution=False,
    model_id="m",
    base_url="http://x/v1",
)


def reply(**kw) -> Reply:  # type: ignore[no-untyped-def]
    base = {
        "text": "ab",
        "tokens": ["a", "b"],
        "logprobs": [math.log(0.5), math.log(0.25)],
        "top": [[math.log(0.2), math.log(0.5), math.log(0.1)], [math.log(0.25)]],
        "finish": "stop",
        "prompt_text": "q",
        "endpoint": "chat",
    }
    return Reply(**(base | kw))


def test_reply_trace() -> None:
    t = reply_trace(reply(), BACKEND, 8, 0.0)
    assert (t.text, t.stop_reason, t.model_id, t.entropy_kind) == ("ab", "eos", "m", "topk")
    assert t.token_ids.tolist() == [-1, -1] and list(t.offsets) == [0, 1]
    np.testing.assert_allclose(t.surprisal, [math.log(2), math.log(4)])
    top = np.array([[math.log(0.5), math.log(0.2), math.log(0.1)], [math.log(0.25), -np.inf, -np.inf]])
    np.testing.assert_allclose(t.entropy, topk_entropy(top, 100, "uniform_tail"))
    assert t.topk_logprobs.shape == (2, 2) and t.topk_logprobs[0, 0] == pytest.approx(math.log(0.5))  # sorted head
    assert t.decoding["strategy"] == "greedy" and t.decoding["max_new_tokens"] == 8
    assert reply_trace(reply(finish="length"), BACKEND, 8, 0.7).decoding["strategy"] == "sample"


def test_bad_replies() -> None:
    with pytest.raises(HTTPBackendError, match="2 tokens but 1 log-probs"):
        reply_trace(reply(logprobs=[-0.1]), BACKEND, 8, 0.0)
    with pytest.raises(LogprobsUnavailableError, match="no top-k alternatives"):
        reply_trace(reply(top=[[], []]), BACKEND, 8, 0.0)
    empty = reply_trace(reply(text="", tokens=[], logprobs=[], top=[]), BACKEND, 8, 0.0)
    assert empty.length == 0 and empty.topk_logprobs is None


def test_drop_end_of_turn() -> None:
    r = reply(text="a", tokens=["a", "<|im_end|>"])
    assert drop_end_of_turn(r).tokens == ["a"] and len(drop_end_of_turn(r).top) == 1
    assert drop_end_of_turn(r._replace(finish="length")).tokens == ["a", "<|im_end|>"]
