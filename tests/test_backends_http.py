"""OpenAI-compatible HTTP backend against a mock server (httpx.MockTransport), and the top-k entropy."""

from __future__ import annotations

import json
import math

import httpx
import numpy as np
import pytest

from tracecal.backends.base import topk_entropy
from tracecal.backends.http import HTTPBackendError, HTTPModel


def test_topk_entropy_formula() -> None:
    # full distribution over |V| = 4 given entirely: exact entropy
    p = np.array([0.5, 0.25, 0.125, 0.125])
    assert topk_entropy(np.log(p)[None], 4)[0] == pytest.approx(-(p * np.log(p)).sum())
    # top-2 of a uniform tail: head + r·log((|V|−k)/r) equals the exact entropy when the tail is uniform
    V = 10
    q = np.array([0.5, 0.3] + [0.2 / 8] * 8)
    est = topk_entropy(np.log(q[:2])[None], V)[0]
    assert est == pytest.approx(-(q * np.log(q)).sum())
    # and is an upper bound when the tail is not uniform
    q2 = np.array([0.5, 0.3, 0.15] + [0.05 / 7] * 7)
    assert topk_entropy(np.log(q2[:2])[None], V)[0] >= -(q2 * np.log(q2)).sum() - 1e-12


def server(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    if not request.url.path.startswith("/v1/"):
        return httpx.Response(404, text="nope")
    top = [{"token": "Paris", "logprob": math.log(0.9)}, {"token": "Lyon", "logprob": math.log(0.05)}]
    if request.url.path.endswith("/chat/completions"):
        assert body["logprobs"] is True and body["top_logprobs"] == 2
        content = [
            {"token": "Paris", "logprob": math.log(0.9), "top_logprobs": top},
            {"token": ".", "logprob": math.log(0.6), "top_logprobs": [{"token": ".", "logprob": math.log(0.6)},
                                                                      {"token": "!", "logprob": math.log(0.3)}]},
        ]  # fmt: skip
        return httpx.Response(200, json={"choices": [{"message": {"content": "Paris."}, "finish_reason": "stop",
                                                      "logprobs": {"content": content}}]})  # fmt: skip
    if request.url.path.endswith("/completions"):
        lp = {"tokens": [" Rome"], "token_logprobs": [math.log(0.7)], "top_logprobs": [{" Rome": math.log(0.7)}]}
        return httpx.Response(200, json={"choices": [{"text": " Rome", "finish_reason": "length", "logprobs": lp}]})
    return httpx.Response(404, text="nope")


def make(**kw) -> HTTPModel:  # type: ignore[no-untyped-def]
    return HTTPModel("http://127.0.0.1:9/v1", model="m", vocab_size=1000, top_logprobs=2,
                     client=httpx.Client(transport=httpx.MockTransport(server)), **kw)  # fmt: skip


def test_chat_traces() -> None:
    (t,) = make().generate(["Capital of France?"], max_new_tokens=4)
    assert t.entropy_kind == "topk" and t.text == "Paris." and t.stop_reason == "eos"
    np.testing.assert_allclose(t.surprisal, [-math.log(0.9), -math.log(0.6)])
    assert t.token_strings == ["Paris", "."] and list(t.offsets) == [0, 5]
    assert t.entropy[0] == pytest.approx(topk_entropy(np.log([[0.9, 0.05]]), 1000)[0])
    assert t.decoding["endpoint"] == "chat"


def test_completions_traces_and_order() -> None:
    traces = make(chat=False).generate(["a", "b", "c"], max_new_tokens=1, ids=["x", "y", "z"])
    assert [t.id for t in traces] == ["x", "y", "z"] and traces[0].stop_reason == "length"


def test_errors() -> None:
    m = HTTPModel("http://127.0.0.1:9/v2", client=httpx.Client(transport=httpx.MockTransport(server)))
    with pytest.raises(HTTPBackendError, match="404"):
        m.generate(["x"])
    with pytest.raises(ValueError, match="empty prompt list"):
        make().generate([])
