"""`tracecal.serve.streaming`: streamed and non-streamed answers and confidences agree (tiny random model)."""

from __future__ import annotations

import numpy as np
import pytest
from fastapi.testclient import TestClient

from tests.serve.helpers import MODEL, PROMPTS, sse_events
from tracecal.serve import ServeConfig, create_app
from tracecal.serve.scoring import prefix_risks
from tracecal.traces.trace import TraceBatch


def test_streamed_and_non_streamed_agree(tiny_model) -> None:  # type: ignore[no-untyped-def]
    body = {"model": MODEL, "messages": [{"role": "user", "content": PROMPTS[0]}], "max_tokens": 8}
    with TestClient(create_app(tiny_model)) as c:
        plain = c.post("/v1/chat/completions", json=body | {"return_trace": True}).json()["choices"][0]
        r = c.post("/v1/chat/completions", json=body | {"stream": True, "stream_options": {"include_usage": True}})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.text)
    assert events[-1] == "[DONE]" and events[0]["choices"][0]["delta"]["role"] == "assistant"  # type: ignore[index]
    chunks = [e for e in events[1:-1] if e["choices"]]  # type: ignore[index]
    tokens = [e for e in chunks if "risk" in e["choices"][0]]
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in chunks)
    last = chunks[-1]["choices"][0]
    assert text == plain["message"]["content"] and last["finish_reason"] == plain["finish_reason"]
    conf = {k: v for k, v in plain["confidence"].items() if k != "trace"}
    assert last["confidence"] == conf  # identical numbers, streamed or not
    assert len(tokens) == conf["tokens"] and [e["choices"][0]["risk"]["tokens"] for e in tokens] == list(
        range(1, conf["tokens"] + 1)
    )
    want = prefix_risks(
        TraceBatch.from_lists([plain["confidence"]["trace"]["surprisal"]], [plain["confidence"]["trace"]["entropy"]])
    )[0]
    np.testing.assert_allclose([e["choices"][0]["risk"]["risk"] for e in tokens], want, rtol=1e-12)
    assert events[-2]["usage"]["completion_tokens"] == conf["tokens"]  # type: ignore[index]


def test_an_event_is_one_json_data_line() -> None:
    from tracecal.serve.streaming import sse

    assert sse({"a": "é"}) == 'data: {"a": "é"}\n\n'
    assert sse_events(sse({"a": 1}) + "data: [DONE]\n\n") == [{"a": 1}, "[DONE]"]
    with pytest.raises(ValueError):
        sse({"x": float("nan")})  # never a non-JSON number on the wire


def _contains(outer: dict, inner: dict) -> bool:
    return outer["token_start"] <= inner["token_start"] and inner["token_end"] <= outer["token_end"]


def test_streamed_chunks_carry_each_span_as_it_closes(tiny_model) -> None:  # type: ignore[no-untyped-def]
    """Greedy, same prompt: the last chunk's spans are the non-streamed ones; every token chunk that closes a span
    carries it, with character offsets into the content streamed so far; each final span lies inside one streamed
    earlier or ends at the answer's last token; the official openai client parses both (in-process transport)."""
    import openai

    body = {"model": MODEL, "messages": [{"role": "user", "content": PROMPTS[1]}], "max_tokens": 24}
    # a random model's risk is flat (every r_t within 0.5 % of the peak): at the default threshold (0.5) the whole
    # answer is one span that never closes; at 0.999 the first run of peak tokens closes mid-answer and is streamed
    app = create_app(tiny_model, config=ServeConfig(span_threshold=0.999))
    with TestClient(app) as c:
        plain = c.post("/v1/chat/completions", json=body).json()["choices"][0]
        events = sse_events(c.post("/v1/chat/completions", json=body | {"stream": True}).text)
        client = openai.OpenAI(base_url="http://testserver/v1", api_key="x", http_client=c, max_retries=0)
        parsed = client.chat.completions.create(model=MODEL, messages=body["messages"], max_tokens=24)  # type: ignore[arg-type]
        streamed = list(
            client.chat.completions.create(model=MODEL, messages=body["messages"], max_tokens=24, stream=True)
        )  # type: ignore[arg-type]
    final = plain["confidence"]["spans"]
    content = plain["message"]["content"]
    assert final and all(content[s["char_start"] : s["char_end"]] == s["text"] for s in final)
    chunks = [e["choices"][0] for e in events[1:-1] if e["choices"]]  # type: ignore[index]
    assert chunks[-1]["confidence"]["spans"] == final
    sofar, sent = "", []
    for ch in chunks:
        sofar += ch["delta"].get("content", "")
        if "span" in ch:
            s = ch["span"]
            assert sofar[s["char_start"] : s["char_end"]] == s["text"] and s["token_end"] == ch["risk"]["tokens"] - 1
            sent.append(s)
    n = plain["confidence"]["tokens"]
    assert sent  # a span closed before the answer's end and was streamed
    assert all(f["token_end"] == n or any(_contains(s, f) for s in sent) for f in final)
    assert parsed.choices[0].model_extra["confidence"]["spans"] == final  # type: ignore[index]
    extras = [ch.choices[0].model_extra for ch in streamed if ch.choices]
    assert [x["span"] for x in extras if "span" in x] == sent  # type: ignore[operator,index]
    assert extras[-1]["confidence"]["spans"] == final  # type: ignore[index]


def test_the_span_settings_come_from_the_config(tiny_model) -> None:  # type: ignore[no-untyped-def]
    """``spans=0`` turns spans off (plain and streamed: no ``span`` chunk, ``spans: []``); ``spans=1`` keeps one;
    a threshold outside (0, 1] is refused by name before anything is served."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": PROMPTS[1]}], "max_tokens": 12}
    for k in (0, 1):
        with TestClient(create_app(tiny_model, config=ServeConfig(spans=k, span_threshold=0.999))) as c:
            plain = c.post("/v1/chat/completions", json=body).json()["choices"][0]
            events = sse_events(c.post("/v1/chat/completions", json=body | {"stream": True}).text)
        assert len(plain["confidence"]["spans"]) == k
        assert any("span" in e["choices"][0] for e in events[1:-1] if e["choices"]) == (k > 0)  # type: ignore[index]
    for bad in (0.0, 1.5, float("nan")):
        with pytest.raises(ValueError, match=r"^span_threshold must be a finite number in \(0, 1\]"):
            ServeConfig(span_threshold=bad)
    with pytest.raises(ValueError, match=r"^spans must be a whole number ≥ 0, got -1$"):
        ServeConfig(spans=-1)
