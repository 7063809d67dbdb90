"""Proxy mode: the gateway in front of an OpenAI-compatible upstream (an httpx mock transport here).

The trace comes from the upstream's top-k log-probs through the HTTP backend (entropy_kind "topk"); chat goes
to the upstream's /chat/completions, raw text to its /completions; streaming replays the finished answer with
the same running risks; stop_on_risk cuts the answer after the fact; the upstream key is read from the
environment, sent upstream, and appears nowhere in the gateway's answers or logs.
"""

from __future__ import annotations

import json
import logging

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient

from tracecal.backends.http import HTTPModel
from tracecal.backends.topk import topk_entropy
from tracecal.serve import ServeConfig, create_app
from tracecal.serve.proxy import proxy_backends

TOKENS = ["Par", "is", ".", " It", " is", " big"]
LOGPROBS = [-0.1, -0.05, -0.3, -2.5, -2.0, -3.0]


def top(lp: float) -> list[dict[str, object]]:
    rest = [lp - 1.0 - i for i in range(4)]
    return [{"token": f"t{i}", "logprob": v} for i, v in enumerate([lp, *rest])]


def upstream(seen: list[httpx.Request]):  # type: ignore[no-untyped-def]
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"object": "list", "data": [{"id": "up-model", "object": "model"}]})
        body = json.loads(request.content)
        n = min(body["max_tokens"], len(TOKENS))
        finish = "length" if n < len(TOKENS) else "stop"
        if request.url.path.endswith("/chat/completions"):
            content = [
                {"token": t, "logprob": lp, "top_logprobs": top(lp)}
                for t, lp in zip(TOKENS[:n], LOGPROBS[:n], strict=True)
            ]
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": "".join(TOKENS[:n])},
                "logprobs": {"content": content},
                "finish_reason": finish,
            }
        else:
            lps = {
                "tokens": TOKENS[:n],
                "token_logprobs": LOGPROBS[:n],
                "top_logprobs": [{d["token"]: d["logprob"] for d in top(lp)} for lp in LOGPROBS[:n]],
            }
            choice = {"index": 0, "text": "".join(TOKENS[:n]), "logprobs": lps, "finish_reason": finish}
        return httpx.Response(200, json={"id": "x", "object": "chat.completion", "choices": [choice]})

    return handler


@pytest.fixture()
def proxied(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("TRACECAL_API_KEY", "upstream-secret-key")
    seen: list[httpx.Request] = []
    client = httpx.Client(transport=httpx.MockTransport(upstream(seen)))
    chat, text = proxy_backends("http://upstream.test/v1", concurrency=4, vocab_size=49152, client=client)
    with TestClient(create_app(chat, config=ServeConfig(max_batch=4), text_model=text)) as c:
        yield c, seen


def test_proxy_chat_builds_the_trace_from_the_upstream_logprobs(proxied, caplog) -> None:  # type: ignore[no-untyped-def]
    c, seen = proxied
    caplog.set_level(logging.DEBUG)
    assert c.get("/v1/models").json()["data"][0]["id"] == "up-model"  # the upstream's name, asked at start
    body = {
        "model": "up-model",
        "messages": [{"role": "user", "content": "Capital of France?"}],
        "max_tokens": 3,
        "return_trace": True,
    }
    r = c.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    conf = choice["confidence"]
    assert choice["message"]["content"] == "Paris." and choice["finish_reason"] == "length"
    assert conf["entropy_kind"] == "topk" and conf["trace"]["tokens"] == TOKENS[:3]
    np.testing.assert_allclose(conf["trace"]["surprisal"], [0.1, 0.05, 0.3])
    want_h = topk_entropy(np.array([[d["logprob"] for d in top(lp)] for lp in LOGPROBS[:3]]), 49152, "zipf_tail")
    np.testing.assert_allclose(conf["trace"]["entropy"], want_h)
    up = json.loads(seen[-1].content)
    assert seen[-1].url.path == "/v1/chat/completions" and up["logprobs"] is True and up["top_logprobs"] == 20
    assert up["temperature"] == 0 and seen[-1].headers["authorization"] == "Bearer upstream-secret-key"
    assert "upstream-secret-key" not in r.text + caplog.text + json.dumps(c.get("/health").json())

    t = c.post("/v1/completions", json={"model": "up-model", "prompt": "The capital of France is", "max_tokens": 6})
    assert t.status_code == 200 and t.json()["choices"][0]["text"] == "".join(TOKENS)
    assert (
        seen[-1].url.path == "/v1/completions" and json.loads(seen[-1].content)["prompt"] == "The capital of France is"
    )


def test_proxy_streams_and_stops_on_risk_after_the_fact(proxied) -> None:  # type: ignore[no-untyped-def]
    c, _ = proxied
    body = {"model": "up-model", "messages": [{"role": "user", "content": "q"}], "max_tokens": 6}
    full = c.post("/v1/chat/completions", json=body).json()["choices"][0]
    r = c.post("/v1/chat/completions", json=body | {"stream": True})
    events = [json.loads(b[6:]) for b in r.text.split("\n\n") if b.startswith("data: {")]
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in events)
    assert text == full["message"]["content"] and events[-1]["choices"][0]["confidence"] == full["confidence"]
    risks = [e["choices"][0]["risk"]["c_trace"] for e in events if "risk" in e["choices"][0]]
    assert len(risks) == 6 and risks[-1] == pytest.approx(full["confidence"]["c_trace"])
    cut = next(i for i, x in enumerate(risks) if x < risks[2] * 0.999) + 1  # the first token where c_t drops
    stopped = c.post("/v1/chat/completions", json=body | {"stop_on_risk": risks[2] * 0.999}).json()["choices"][0]
    assert stopped["finish_reason"] == "risk" and stopped["message"]["content"] == "".join(TOKENS[:cut])


def test_an_upstream_without_log_probs_is_a_502() -> None:
    def no_logprobs(request: httpx.Request) -> httpx.Response:
        choice = {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
        return httpx.Response(200, json={"choices": [choice]})

    model = HTTPModel("http://u.test/v1", model="m", client=httpx.Client(transport=httpx.MockTransport(no_logprobs)))
    with TestClient(create_app(model)) as c:
        r = c.post("/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "x"}]})
        assert r.status_code == 502 and "log-probs" in r.json()["error"]["message"]
