"""OpenAI-compatible HTTP backend against a mock server (httpx.MockTransport), and the top-k entropy."""

from __future__ import annotations

import json
import math

import httpx
import numpy as np
import pytest

from tracecal.backends.base import Backend, BackendUnsupportedError, LocalBackend, topk_entropy
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


def test_protocol_and_unsupported_methods() -> None:
    m = make()
    assert isinstance(m, Backend) and not isinstance(m, LocalBackend)
    assert m.batch_size == m.max_concurrency == 8 and m.context_length is None
    calls = [
        (lambda: m.beam_scores(["q"]), "beam search scores"),
        (lambda: m.encode_prompt("q"), "token ids"),
        (lambda: m.next_token_logprobs([[1]], [2]), "next-token log-probs"),
        (lambda: m.teacher_forced([1], [2]), "teacher-forced pass"),
        (lambda: m.generate([{"prompt_ids": [1, 2]}]), "prompt given as token ids"),
    ]
    for call, what in calls:
        with pytest.raises(BackendUnsupportedError, match=what) as err:
            call()
        assert isinstance(err.value, ValueError) and isinstance(err.value, NotImplementedError)
        assert "OpenAI-compatible server" in str(err.value) and "backend='hf'" in str(err.value)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_new_tokens": "8"}, r"max_new_tokens must be a positive integer, got '8' \(str\)"),
        ({"max_new_tokens": 2.5}, r"max_new_tokens must be a positive integer, got 2.5 \(float\)"),
        ({"max_new_tokens": 0}, r"max_new_tokens must be a positive integer \(≥ 1\), got 0"),
        ({"batch_size": False}, r"batch_size must be a positive integer, got False \(bool\)"),
        ({"temperature": -1.0}, r"temperature must be a number ≥ 0"),
        ({"ids": ["a", "b"]}, r"ids must have one entry per prompt"),
    ],
)
def test_generate_rejects_bad_arguments(kwargs, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=message):
        make().generate(["q"], **kwargs)


def test_bad_server_answers_and_settings() -> None:
    def garbage(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text="<html>not json</html>")

    def no_choices(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"error": "overloaded"})

    def wrong_shape(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"choices": [{"message": {}, "logprobs": {"content": [{"tok": "x"}]}}]})

    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused")

    for handler, message in [
        (garbage, "no JSON"),
        (no_choices, "no 'choices'"),
        (wrong_shape, "unexpected answer"),
        (down, "could not reach"),
    ]:
        m = HTTPModel("http://127.0.0.1:9/v1", client=httpx.Client(transport=httpx.MockTransport(handler)))
        with pytest.raises(HTTPBackendError, match=message):
            m.generate(["x"])
    with pytest.raises(ValueError, match="base_url must be an http"):
        HTTPModel("127.0.0.1:8000")
    with pytest.raises(ValueError, match="top_logprobs must be a positive integer"):
        HTTPModel("http://x/v1", top_logprobs=0)
    with pytest.raises(ValueError, match=r"prompt 0, message 0: expected \{'role': str, 'content': str\}"):
        make().generate([[{"content": "no role"}]])


def test_load_model_http_backend() -> None:
    from tracecal.backends.hf import load_model

    m = load_model("http://127.0.0.1:9/v1", backend="http", batch_size=3, dtype="auto", model="m")
    assert isinstance(m, HTTPModel) and m.batch_size == 3 and m.model_id == "m"
    with pytest.raises(ValueError, match="dtype='bfloat16' does not apply to an HTTP backend"):
        load_model("http://127.0.0.1:9/v1", backend="http", dtype="bfloat16")
    with pytest.raises(ValueError, match="unknown backend 'grpc'; choose hf or http"):
        load_model("x", backend="grpc")
