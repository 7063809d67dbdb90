"""Streamed answers of the HTTP backend (`tracecal.backends.http.stream`) against mock servers that send server-sent
events as vLLM does: the hook gets each token as its chunk arrives, the trace is the one of the same answer not
streamed, a hook can end an answer, and faults mid-stream raise `HTTPBackendError`.

`streaming(handler)` turns any fake server of these tests (one JSON answer per request) into one that streams when
the request asks ``stream: true``; `tests.serve.test_proxy` uses it for the gateway's upstream.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import numpy as np
import pytest

from tests.backends.http.test_model import Handler, flaky, make, server, status
from tracecal.backends.http import HTTPBackendError, LogprobsUnavailableError
from tracecal.backends.http.stream import StreamedToken

Chunks = Callable[[list[bytes]], Iterator[bytes]]


def event(obj: Any) -> bytes:
    return f"data: {json.dumps(obj)}\n\n".encode()


def chunk(choice: dict[str, Any]) -> bytes:
    return event({"id": "s", "object": "chunk", "choices": [{"index": 0, "finish_reason": None} | choice]})


def sse_events(answer: dict[str, Any], chat: bool) -> list[bytes]:
    """The events a server streams for ``answer`` (its non-streamed JSON): vLLM's order - a role chunk (chat), one
    chunk per token with its log-probs and text (a token not in the text, as ``<|im_end|>`` after a stop, with ""),
    the finish reason on the last token's chunk, a usage chunk, ``[DONE]``."""
    choice = answer["choices"][0]
    text = (choice["message"]["content"] if chat else choice["text"]) or ""
    lp = choice.get("logprobs") or {}
    if chat:
        items: list[Any] = list(lp.get("content") or [])
        strings = [c["token"] for c in items]
    else:
        items = list(zip(lp.get("tokens") or [], lp.get("token_logprobs") or [], lp.get("top_logprobs"), strict=True))
        strings = [t for t, _, _ in items]
    out = [chunk({"delta": {"role": "assistant", "content": ""}, "logprobs": None})] if chat else []
    pos = 0
    for k, (item, tok) in enumerate(zip(items, strings, strict=True)):
        piece = tok if text.startswith(tok, pos) else ""
        pos += len(piece)
        if k == len(items) - 1:
            piece += text[pos:]
        if chat:
            c: dict[str, Any] = {"delta": {"content": piece}, "logprobs": {"content": [item]}}
        else:
            t, v, top = item
            c = {"text": piece, "logprobs": {"tokens": [t], "token_logprobs": [v], "top_logprobs": [top]}}
        out.append(chunk(c | ({"finish_reason": choice["finish_reason"]} if k == len(items) - 1 else {})))
    if not items:
        out.append(chunk({"delta": {"content": text}, "finish_reason": choice["finish_reason"]}))
    return [*out, event({"id": "s", "choices": [], "usage": {"completion_tokens": len(items)}}), b"data: [DONE]\n\n"]


def sse_response(events: list[bytes], chunks: Chunks | None = None) -> httpx.Response:
    """A 200 ``text/event-stream`` answer sending ``events`` (through ``chunks``: a generator that may wait, fail or
    stop between them) as the client reads it."""
    body = (chunks or iter)(events)
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)


def streaming(handler: Handler, chunks: Chunks | None = None) -> Handler:
    """``handler`` (a fake server answering JSON) that streams its answer when the request asks ``stream: true``."""

    def h(request: httpx.Request) -> httpx.Response:
        r = handler(request)
        body = json.loads(request.content) if request.method == "POST" else {}
        if not body.get("stream") or r.status_code != 200:
            return r
        return sse_response(sse_events(json.loads(r.content), request.url.path.endswith("/chat/completions")), chunks)

    return h


def answer(tokens: list[str], text: str | None = None, finish: str = "stop") -> Handler:
    """A chat server answering ``tokens`` (the text: their concatenation unless given), 3 log-probs each."""

    def h(request: httpx.Request) -> httpx.Response:
        content = []
        for i, tok in enumerate(tokens):
            lp = -0.1 * (i + 1)
            top = [{"token": tok, "logprob": lp}] + [{"token": f"x{j}", "logprob": lp - 1 - j} for j in range(2)]
            content.append({"token": tok, "logprob": lp, "top_logprobs": top})
        msg = {"content": "".join(tokens) if text is None else text}
        return httpx.Response(
            200, json={"choices": [{"message": msg, "finish_reason": finish, "logprobs": {"content": content}}]}
        )

    return h


def collect(stop_at: int | None = None) -> tuple[list[StreamedToken], Callable[[StreamedToken], bool]]:
    got: list[StreamedToken] = []

    def hook(t: StreamedToken) -> bool:
        got.append(t)
        return stop_at is not None and len(got) >= stop_at

    return got, hook


# ------------------------------------------------------------------------------------------ same traces
@pytest.mark.parametrize("chat", [True, False])
def test_a_streamed_answer_has_the_trace_of_the_same_answer_not_streamed(chat: bool) -> None:
    seen: list[httpx.Request] = []
    handler, seen = flaky([], streaming(server))
    m = make(handler, chat=chat)
    (plain,) = m.generate(["q"], max_new_tokens=4)
    got, hook = collect()
    (streamed,) = m.generate(["q"], max_new_tokens=4, on_token=hook)
    assert streamed.to_dict() == plain.to_dict() and plain.length
    assert [json.loads(r.content).get("stream") for r in seen] == [None, True]
    assert [t.token for t in got] == plain.token_strings and "".join(t.text for t in got) == plain.text
    assert [t.row for t in got] == [0] * plain.length
    np.testing.assert_array_equal([t.surprisal for t in got], plain.surprisal)
    np.testing.assert_allclose([t.entropy for t in got], plain.entropy, rtol=1e-12, atol=0)


@pytest.mark.parametrize(
    ("tokens", "text", "finish", "length"),
    [
        (["Par", "is", "<|im_end|>"], "Paris", "stop", 2),  # vLLM lists it after a stop: not part of the answer
        (["Par", "<|im_end|>", "is"], "Par<|im_end|>is", "stop", 3),  # text, followed by more text
        (["Par", "<|im_end|>"], "Par", "length", 2),  # not a stop: kept, as the non-streamed trace keeps it
        ([], "", "stop", 0),
    ],
)
def test_the_hook_sees_exactly_the_trace_s_tokens(tokens: list[str], text: str, finish: str, length: int) -> None:
    m = make(streaming(answer(tokens, text, finish)), top_logprobs=3)
    (plain,) = m.generate(["q"])
    got, hook = collect()
    (streamed,) = m.generate(["q"], on_token=hook)
    assert streamed.to_dict() == plain.to_dict() and plain.length == length
    assert [t.token for t in got] == plain.token_strings


def test_prompts_stream_concurrently_each_with_its_index() -> None:
    got, hook = collect()
    lock = threading.Lock()

    def locked(t: StreamedToken) -> bool:
        with lock:
            return hook(t)

    traces = make(streaming(server), max_concurrency=3).generate(["a", "b", "c", "d"], on_token=locked)
    assert sorted({t.row for t in got}) == [0, 1, 2, 3] and len(got) == sum(t.length for t in traces)


def test_a_server_that_does_not_stream_is_read_as_one_chunk() -> None:
    got, hook = collect()
    (t,) = make(server).generate(["q"], on_token=hook)  # asked to stream, it answers one JSON object
    assert [x.token for x in got] == t.token_strings == ["Paris", "."]


# ------------------------------------------------------------------------------------------ as it arrives
def test_each_token_reaches_the_hook_before_the_server_sends_the_next() -> None:
    arrived = threading.Event()
    order: list[str] = []

    def slow(events: list[bytes]) -> Iterator[bytes]:
        for e in events:
            token = b'"token"' in e
            order.extend(["sent"] if token else [])
            yield e  # the client reads on only once the hook has had this token
            if token:
                assert arrived.is_set(), "the client read on before the hook got the token"
                arrived.clear()

    def hook(t: StreamedToken) -> bool:
        order.append("hook")
        arrived.set()
        return False

    (t,) = make(streaming(server, slow)).generate(["q"], on_token=hook)
    assert order == ["sent", "hook"] * t.length and t.length == 2


def recorded(sent: list[bytes]) -> Chunks:
    """Send the events as they are, each appended to ``sent`` when the client reads it."""

    def chunks(events: list[bytes]) -> Iterator[bytes]:
        for e in events:
            sent.append(e)
            yield e

    return chunks


def test_a_hook_that_returns_true_ends_the_answer_and_its_request() -> None:
    sent: list[bytes] = []
    tokens = ["a", "b", "c", "d", "e"]
    got, hook = collect(stop_at=2)
    (t,) = make(streaming(answer(tokens), recorded(sent)), top_logprobs=3).generate(["q"], on_token=hook)
    assert t.stop_reason == "stopped" and t.token_strings == ["a", "b"] and t.text == "ab" and len(got) == 2
    assert len(sent) < 1 + len(tokens)  # the rest was never read: the connection was closed
    np.testing.assert_allclose(t.surprisal, [0.1, 0.2])


# ------------------------------------------------------------------------------------------ faults
def broken(after: int, end: Callable[[], Iterator[bytes]]) -> Chunks:
    """Send the role chunk and ``after`` token chunks, then ``end()``."""

    def chunks(events: list[bytes]) -> Iterator[bytes]:
        yield from events[: 1 + after]
        yield from end()

    return chunks


def drop() -> Iterator[bytes]:
    raise httpx.ReadError("connection reset by peer")
    yield b""  # pragma: no cover


@pytest.mark.parametrize(
    ("end", "message"),
    [
        (
            lambda: iter([event({"error": {"message": "engine died", "type": "InternalServerError", "code": 500}})]),
            "failed mid-answer \\(2 tokens in\\): engine died",
        ),
        (lambda: iter([event({"object": "error", "message": "out of memory", "code": 500})]), "out of memory"),
        (drop, "the stream broke after 2 tokens \\(ReadError: connection reset by peer\\)"),
        (lambda: iter([]), "ended after 2 tokens without a finish_reason or \\[DONE\\]"),
        (lambda: iter([b"data: {nope\n\n"]), "unreadable event from the server mid-answer"),
        (lambda: iter([chunk({"delta": {}, "finish_reason": "error"})]), "finish 'error'"),
    ],
)
def test_a_fault_mid_stream_raises_and_is_not_retried(end: Callable[[], Iterator[bytes]], message: str) -> None:
    handler, seen = flaky([], streaming(answer(["a", "b", "c"]), broken(2, end)))
    got, hook = collect()
    with pytest.raises(HTTPBackendError, match=message):
        make(handler, top_logprobs=3).generate(["q"], on_token=hook)
    assert len(got) == 2 and len(seen) == 1


def test_faults_before_the_stream_starts_are_retried() -> None:
    handler, seen = flaky([status(503), status(429)], streaming(server))
    got, hook = collect()
    (t,) = make(handler).generate(["q"], on_token=hook)
    assert t.text == "Paris." and len(seen) == 3 and len(got) == 2
    with pytest.raises(HTTPBackendError, match="HTTP 400: bad prompt"):
        make(status(400, text="bad prompt")).generate(["q"], on_token=hook)


def test_a_stream_without_log_probs_says_what_to_fix() -> None:
    no_logprobs = [chunk({"delta": {"content": "Paris"}}), chunk({"delta": {}, "finish_reason": "stop"})]
    with pytest.raises(LogprobsUnavailableError, match="--max-logprobs"):
        make(lambda r: sse_response([*no_logprobs, b"data: [DONE]\n\n"])).generate(["q"], on_token=collect()[1])
    no_top = {"content": [{"token": "Paris", "logprob": math.log(0.9), "top_logprobs": []}]}
    events = [chunk({"delta": {"content": "Paris"}, "logprobs": no_top, "finish_reason": "stop"}), b"data: [DONE]\n\n"]
    with pytest.raises(LogprobsUnavailableError, match="no top-k alternatives"):
        make(lambda r: sse_response(events)).generate(["q"], on_token=collect()[1])
