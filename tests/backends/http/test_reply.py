"""`tracecal.backends.http.reply`: a server's reply (a chat or a completions choice) → `Reply` → `Trace` (top-k entropy
estimate, stored head, offsets)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tracecal.backends.http.client import HTTPBackendError, LogprobsUnavailableError
from tracecal.backends.http.reply import Reply, chat_reply, completion_reply, drop_end_of_turn, reply_trace
from tracecal.backends.http.settings import HTTPSettings
from tracecal.backends.topk import topk_entropy

SETTINGS = HTTPSettings("http://x/v1", vocab_size=100, entropy_estimator="uniform_tail", top_logprobs=2)


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
    t = reply_trace(reply(), SETTINGS, "m", 8, 0.0)
    assert (t.text, t.stop_reason, t.model_id, t.entropy_kind) == ("ab", "eos", "m", "topk")
    assert t.token_ids.tolist() == [-1, -1] and list(t.offsets) == [0, 1]
    np.testing.assert_allclose(t.surprisal, [math.log(2), math.log(4)])
    top = np.array([[math.log(0.5), math.log(0.2), math.log(0.1)], [math.log(0.25), -np.inf, -np.inf]])
    np.testing.assert_allclose(t.entropy, topk_entropy(top, 100, "uniform_tail"))
    assert t.topk_logprobs.shape == (2, 2) and t.topk_logprobs[0, 0] == pytest.approx(math.log(0.5))  # sorted head
    assert t.decoding["strategy"] == "greedy" and t.decoding["max_new_tokens"] == 8
    assert reply_trace(reply(finish="length"), SETTINGS, "m", 8, 0.7).decoding["strategy"] == "sample"


def test_bad_replies() -> None:
    with pytest.raises(HTTPBackendError, match="2 tokens but 1 log-probs"):
        reply_trace(reply(logprobs=[-0.1]), SETTINGS, "m", 8, 0.0)
    with pytest.raises(LogprobsUnavailableError, match="no top-k alternatives"):
        reply_trace(reply(top=[[], []]), SETTINGS, "m", 8, 0.0)
    empty = reply_trace(reply(text="", tokens=[], logprobs=[], top=[]), SETTINGS, "m", 8, 0.0)
    assert empty.length == 0 and empty.topk_logprobs is None


def test_drop_end_of_turn() -> None:
    r = reply(text="a", tokens=["a", "<|im_end|>"])
    assert drop_end_of_turn(r).tokens == ["a"] and len(drop_end_of_turn(r).top) == 1
    assert drop_end_of_turn(r._replace(finish="length")).tokens == ["a", "<|im_end|>"]


def test_chat_and_completion_choices_become_the_same_reply() -> None:
    top = [{"token": "a", "logprob": -0.5}, {"token": "c", "logprob": -1.5}]
    chat = {
        "message": {"content": "ab"},
        "logprobs": {
            "content": [{"token": "a", "logprob": -0.5, "top_logprobs": top}, {"token": "b", "logprob": -1.0}]
        },
        "finish_reason": "stop",
    }
    r = chat_reply(chat, [{"role": "user", "content": "q"}], SETTINGS)
    assert (r.text, r.tokens, r.logprobs, r.top, r.prompt_text) == (
        "ab",
        ["a", "b"],
        [-0.5, -1.0],
        [[-0.5, -1.5], []],
        "user: q",
    )
    completion = {
        "text": "ab",
        "logprobs": {
            "tokens": ["a", "b"],
            "token_logprobs": [-0.5, -1.0],
            "top_logprobs": [{"a": -0.5, "c": -1.5}, None],
        },
        "finish_reason": "stop",
    }
    c = completion_reply(completion, "q", SETTINGS)
    assert c._replace(prompt_text="user: q", endpoint="chat") == r
    with pytest.raises(LogprobsUnavailableError, match="http://x/v1 returned no log-probs"):
        chat_reply({"message": {"content": "ab"}}, [], SETTINGS)
    with pytest.raises(LogprobsUnavailableError, match="token_logprobs is missing"):
        completion_reply({"text": "ab", "logprobs": {"tokens": ["a"]}}, "q", SETTINGS)
