"""`tracecal.serve.routes`: the OpenAI responses of /v1/chat/completions, /v1/completions and /v1/models, each
choice with its confidence."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.serve.helpers import CHAT, FakeModel, fake_trace
from tracecal.signals.operators import trace_confidence


def test_chat_completion_carries_the_confidence(client: TestClient, fake: FakeModel, calibrator) -> None:  # type: ignore[no-untyped-def]
    chat = dict(
        CHAT,
        messages=[
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        ],
    )
    r = client.post("/v1/chat/completions", json=chat | {"return_trace": True, "logprobs": True})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["object"] == "chat.completion" and out["model"] == "fake" and out["id"].startswith("chatcmpl-")
    choice = out["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": "abc", "refusal": None}
    assert choice["finish_reason"] == "stop" and out["usage"]["completion_tokens"] == 3
    conf, t = choice["confidence"], fake_trace(None)
    assert conf["c_trace"] == pytest.approx(float(trace_confidence([t])[0]))
    assert conf["probability"] == pytest.approx(float(calibrator.predict_proba([t])[0]))
    assert conf["calibrator"] == "TracePlus" and conf["abstain"] == (conf["probability"] < 0.5)
    assert conf["trace"] == {"tokens": ["a", "b", "c"], "surprisal": [0.5, 0.2, 1.0], "entropy": [1.0, 2.0, 3.0]}
    assert [x["logprob"] for x in choice["logprobs"]["content"]] == [-0.5, -0.2, -1.0]
    assert choice["logprobs"]["confidence"] == conf  # also where LangChain keeps it (tests/serve/test_langchain.py)
    # messages reach the backend as plain dicts (developer → system, text parts joined); max_tokens passed on
    assert fake.seen[-1] == ([[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]], 3)
    plain = client.post("/v1/chat/completions", json=CHAT).json()["choices"][0]
    assert "trace" not in plain["confidence"]
    assert plain["logprobs"] == {"content": [], "confidence": plain["confidence"]}  # no tokens unless asked for


def test_completions_and_models(client: TestClient, fake: FakeModel) -> None:
    r = client.post("/v1/completions", json={"model": "fake", "prompt": ["x", "empty"], "max_tokens": 2})
    assert r.status_code == 200, r.text
    a, b = r.json()["choices"]
    assert (a["text"], a["index"], b["text"], b["index"]) == ("ab", 0, "", 1)
    assert b["confidence"]["c_trace"] is None and b["confidence"]["abstain"] is True  # an empty answer abstains
    assert sorted(p for batch, _ in fake.seen for p in batch) == ["empty", "x"]
    models = client.get("/v1/models").json()
    assert models["object"] == "list" and [m["id"] for m in models["data"]] == ["fake"]
    assert client.get("/v1/models/fake").json()["id"] == "fake"
    assert client.get("/v1/models/other").status_code == 404


def test_a_streamed_completion_ends_with_done(client: TestClient) -> None:
    from tests.serve.helpers import sse_events

    r = client.post("/v1/completions", json={"model": "fake", "prompt": "x", "max_tokens": 3, "stream": True})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.text)
    assert events[-1] == "[DONE]" and all(e["object"] == "text_completion" for e in events[:-1])  # type: ignore[index]
    assert "".join(e["choices"][0]["text"] for e in events[:-1] if e["choices"]) == "abc"  # type: ignore[index]
