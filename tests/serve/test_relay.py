"""`tracecal.serve.relay`: in proxy mode a streamed request streams from the upstream, token by token as it arrives
(the first chunk does not wait for the answer), with the risks and confidence of the same answer not streamed; it
can stop the upstream on risk or when the client has gone; an upstream failure mid-stream ends the client's stream
with an OpenAI error event."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient

from tests.backends.http.test_stream import recorded
from tests.serve.helpers import Server, sse_events
from tests.serve.test_proxy import TOKENS, upstream
from tracecal.backends.http.stream import StreamedToken
from tracecal.serve import ServeConfig, create_app
from tracecal.serve.batching import Job
from tracecal.serve.proxy import proxy_backends
from tracecal.serve.relay import TokenRelay
from tracecal.serve.scoring import prefix_risks
from tracecal.signals.operators import TraceConfig
from tracecal.traces.trace import TraceBatch

BODY = {"model": "up-model", "messages": [{"role": "user", "content": "q"}], "max_tokens": 6}


def gateway(chunks=None, **config):  # type: ignore[no-untyped-def]
    """The app in front of `tests.serve.test_proxy.upstream`, its events sent through ``chunks``; the requests seen."""
    seen: list[httpx.Request] = []
    client = httpx.Client(transport=httpx.MockTransport(upstream(seen, chunks)))
    chat, text = proxy_backends("http://upstream.test/v1", vocab_size=49152, client=client)
    return create_app(chat, config=ServeConfig(**config), text_model=text), seen


def token_chunks(events: list[object]) -> list[dict]:  # type: ignore[type-arg]
    return [e["choices"][0] for e in events if isinstance(e, dict) and e.get("choices") and "risk" in e["choices"][0]]


def test_the_first_chunk_comes_while_the_upstream_is_still_decoding() -> None:
    """The upstream sends one token and then waits (as a server decoding the next): the client has that token's chunk
    before the upstream goes on. In the end: the answer, risks and confidence of the same request not streamed."""
    release, sent, first = threading.Event(), [], []

    def gated(events: list[bytes]) -> Iterator[bytes]:
        for e in events:
            sent.append(b'"token"' in e)
            yield e
            if sent[-1] and not release.is_set():  # after the first token: wait until the client has it
                assert release.wait(20), "the client never saw the first token"

    app, _ = gateway(gated)
    with Server(app) as s, httpx.Client(base_url=s.url, timeout=30) as http:
        plain = http.post("/v1/chat/completions", json=BODY | {"return_trace": True}).json()["choices"][0]
        lines = []
        with http.stream("POST", "/v1/chat/completions", json=BODY | {"stream": True}) as r:
            for line in r.iter_lines():
                lines.append(line)
                if '"risk"' in line and not release.is_set():
                    first.append(sum(sent))  # the upstream has sent one token and waits
                    release.set()
    assert first == [1]
    events = sse_events("\n\n".join(lines))
    chunks = token_chunks(events)
    assert "".join(c["delta"].get("content", "") for c in chunks) == plain["message"]["content"] == "".join(TOKENS)
    trace = plain["confidence"].pop("trace")
    want = prefix_risks(TraceBatch.from_lists([trace["surprisal"]], [trace["entropy"]]))[0]
    np.testing.assert_allclose([c["risk"]["risk"] for c in chunks], want, rtol=1e-12)
    last = [e for e in events if isinstance(e, dict) and e.get("choices")][-1]["choices"][0]
    assert last["confidence"] == plain["confidence"] and last["finish_reason"] == plain["finish_reason"]
    assert events[-1] == "[DONE]"


def test_stop_on_risk_while_streaming_ends_the_upstream_request() -> None:
    """The relay stops at the token the non-streamed request is cut at afterwards, and the upstream is not read on."""
    sent: list[bytes] = []
    app, seen = gateway(recorded(sent))
    with TestClient(app) as c:
        risks = [
            x["risk"]["c_trace"]
            for x in token_chunks(sse_events(c.post("/v1/chat/completions", json=BODY | {"stream": True}).text))
        ]
        limit = risks[2] * 0.999
        cut = c.post("/v1/chat/completions", json=BODY | {"stop_on_risk": limit}).json()["choices"][0]
        sent.clear()
        events = sse_events(c.post("/v1/chat/completions", json=BODY | {"stream": True, "stop_on_risk": limit}).text)
    chunks = [e["choices"][0] for e in events if isinstance(e, dict) and e.get("choices")]  # type: ignore[index]
    assert chunks[-1]["finish_reason"] == cut["finish_reason"] == "risk"
    assert "".join(x["delta"].get("content", "") for x in chunks) == cut["message"]["content"]
    assert chunks[-1]["confidence"] == cut["confidence"]
    assert json.loads(seen[-1].content)["stream"] is True
    assert 0 < len(sent) < 1 + len(TOKENS)  # the upstream's remaining tokens were never read


def drop() -> Iterator[bytes]:
    raise httpx.ReadError("connection reset by peer")
    yield b""  # pragma: no cover


@pytest.mark.parametrize(
    ("end", "message"),
    [
        (
            lambda: iter(
                [b'data: {"error": {"message": "engine died", "type": "InternalServerError", "code": 500}}\n\n']
            ),
            "engine died",
        ),
        (drop, "the stream broke after 2 tokens"),
    ],
)
def test_an_upstream_failure_mid_stream_ends_the_client_stream_with_an_error_event(end, message) -> None:  # type: ignore[no-untyped-def]
    def broken(events: list[bytes]) -> Iterator[bytes]:
        yield from events[:3]  # the role chunk and two tokens
        yield from end()

    app, _ = gateway(broken)
    with TestClient(app) as c:
        r = c.post("/v1/chat/completions", json=BODY | {"stream": True})
    events = sse_events(r.text)
    assert r.status_code == 200 and len(token_chunks(events)) == 2
    err = events[-1]["error"]  # type: ignore[index]
    assert err["code"] == "upstream_error" and message in err["message"], err
    assert "[DONE]" not in events


def job(**kw) -> tuple[Job, asyncio.AbstractEventLoop]:  # type: ignore[no-untyped-def]
    loop = asyncio.new_event_loop()
    return Job(prompt="q", max_tokens=8, loop=loop, future=loop.create_future(), events=asyncio.Queue(), **kw), loop


def test_the_relay_posts_each_token_and_ends_an_answer_on_risk_or_when_the_client_has_gone() -> None:
    j, loop = job(stop_on_risk=0.5)
    relay = TokenRelay([j], 1, TraceConfig())
    try:
        assert relay(StreamedToken(0, "Par", "Par", 0.1, 0.2)) is False
        assert relay(StreamedToken(0, "is", "is", 5.0, 3.0)) is True and j.finish == "risk"
        loop.run_until_complete(asyncio.sleep(0))
        events = [j.events.get_nowait() for _ in range(2)]  # type: ignore[union-attr]
        assert [e[2]["text"] for e in events] == ["Par", "is"] and j.sent == "Paris"
        assert [e[2]["tokens"] for e in events] == [1, 2] and events[0][2]["logprob"] == -0.1
        assert events[1][2]["c_trace"] < 0.5 and j.s == [0.1, 5.0] and j.ids == [-1, -1]
    finally:
        loop.close()
    gone, loop = job()
    gone.cancelled = True
    try:
        assert TokenRelay([gone], 1, TraceConfig())(StreamedToken(0, "a", "a", 0.1, 0.1)) is True
        assert gone.finish == "cancelled" and gone.sent == ""
    finally:
        loop.close()


def test_a_streamed_text_completion_is_relayed_from_the_upstream_s_completions() -> None:
    app, seen = gateway()
    body = {"model": "up-model", "prompt": "The capital of France is", "max_tokens": 6}
    with TestClient(app) as c:
        plain = c.post("/v1/completions", json=body).json()["choices"][0]
        events = sse_events(c.post("/v1/completions", json=body | {"stream": True}).text)
    assert seen[-1].url.path == "/v1/completions" and json.loads(seen[-1].content)["stream"] is True
    chunks = [e["choices"][0] for e in events if isinstance(e, dict) and e.get("choices")]  # type: ignore[index]
    assert [x["text"] for x in token_chunks(events)] == TOKENS
    assert "".join(x["text"] for x in chunks) == plain["text"] and chunks[-1]["confidence"] == plain["confidence"]
