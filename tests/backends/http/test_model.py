"""OpenAI-compatible HTTP backend against mock servers (httpx.MockTransport): traces, retries, backoff,
Retry-After, timeouts, concurrency, missing log-probs, malformed answers, API keys. No real sleeping: the
backend's ``sleep``/``clock`` are injected."""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable

import httpx
import numpy as np
import pytest

from tracecal.backends.base import Backend, BackendUnsupportedError, LocalBackend, topk_entropy
from tracecal.backends.http import HTTPBackendError, HTTPModel, LogprobsUnavailableError
from tracecal.backends.topk import DEFAULT_TOPK_ESTIMATOR

Handler = Callable[[httpx.Request], httpx.Response]
TOP = [{"token": "Paris", "logprob": math.log(0.9)}, {"token": "Lyon", "logprob": math.log(0.05)}]


def chat_ok(text: str = "Paris.") -> httpx.Response:
    content = [
        {"token": "Paris", "logprob": math.log(0.9), "top_logprobs": TOP},
        {
            "token": ".",
            "logprob": math.log(0.6),
            "top_logprobs": [{"token": ".", "logprob": math.log(0.6)}, {"token": "!", "logprob": math.log(0.3)}],
        },
    ]
    return httpx.Response(
        200,
        json={"choices": [{"message": {"content": text}, "finish_reason": "stop", "logprobs": {"content": content}}]},
    )


def server(request: httpx.Request) -> httpx.Response:
    if not request.url.path.startswith("/v1/"):
        return httpx.Response(404, text="nope")
    if request.url.path.endswith("/models"):
        return httpx.Response(200, json={"object": "list", "data": [{"id": "served-name", "object": "model"}]})
    body = json.loads(request.content)
    if request.url.path.endswith("/chat/completions"):
        assert body["logprobs"] is True and body["top_logprobs"] == 2
        return chat_ok()
    if request.url.path.endswith("/completions"):
        lp = {"tokens": [" Rome"], "token_logprobs": [math.log(0.7)], "top_logprobs": [{" Rome": math.log(0.7)}]}
        return httpx.Response(200, json={"choices": [{"text": " Rome", "finish_reason": "length", "logprobs": lp}]})
    return httpx.Response(404, text="nope")


class Fake:
    """A fake clock and sleep: records every wait, never sleeps."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0
        self.waits: list[float] = []

    def sleep(self, s: float) -> None:
        self.waits.append(s)
        self.now += s

    def clock(self) -> float:
        return self.now


def make(handler: Handler = server, fake: Fake | None = None, **kw) -> HTTPModel:  # type: ignore[no-untyped-def]
    fake = fake or Fake()
    kw = {"model": "m", "vocab_size": 1000, "top_logprobs": 2, "sleep": fake.sleep, "clock": fake.clock} | kw
    return HTTPModel("http://127.0.0.1:9/v1", client=httpx.Client(transport=httpx.MockTransport(handler)), **kw)


def flaky(failures: list[Handler], then: Handler = server) -> tuple[Handler, list[httpx.Request]]:
    """A handler that answers with each of ``failures`` in turn, then with ``then``; and the requests seen."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return failures[len(seen) - 1](request) if len(seen) <= len(failures) else then(request)

    return handler, seen


def status(code: int, headers: dict[str, str] | None = None, text: str = "busy") -> Handler:
    return lambda request: httpx.Response(code, headers=headers, text=text)


def raises(exc: type[Exception]) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc("boom", request=request)  # type: ignore[call-arg]

    return handler


# ------------------------------------------------------------------------------------------ traces
def test_chat_traces() -> None:
    (t,) = make().generate(["Capital of France?"], max_new_tokens=4)
    assert t.entropy_kind == "topk" and t.text == "Paris." and t.stop_reason == "eos"
    np.testing.assert_allclose(t.surprisal, [-math.log(0.9), -math.log(0.6)])
    assert t.token_strings == ["Paris", "."] and list(t.offsets) == [0, 5]
    assert t.entropy[0] == pytest.approx(topk_entropy(np.log([[0.9, 0.05]]), 1000, DEFAULT_TOPK_ESTIMATOR)[0])
    assert t.decoding["endpoint"] == "chat" and t.decoding["entropy_estimator"] == DEFAULT_TOPK_ESTIMATOR
    assert t.decoding["top_logprobs"] == 2 and t.decoding["vocab_size_for_tail"] == 1000


def test_entropy_estimator_is_selectable() -> None:
    (t,) = make(entropy_estimator="uniform_tail").generate(["q"])
    assert t.entropy[0] == pytest.approx(topk_entropy(np.log([[0.9, 0.05]]), 1000)[0])
    assert t.decoding["entropy_estimator"] == "uniform_tail"
    with pytest.raises(ValueError, match="entropy_estimator must be one of uniform_tail, head_only"):
        make(entropy_estimator="magic")


def test_completions_traces_and_order() -> None:
    traces = make(chat=False).generate(["a", "b", "c"], max_new_tokens=1, ids=["x", "y", "z"])
    assert [t.id for t in traces] == ["x", "y", "z"] and traces[0].stop_reason == "length"


def test_served_model_name_is_asked_once_when_not_given() -> None:
    handler, seen = flaky([], server)
    m = make(handler, model=None)
    traces = m.generate(["a", "b"])
    assert m.model_id == "served-name" and all(t.model_id == "served-name" for t in traces)
    assert [r.url.path for r in seen].count("/v1/models") == 1
    assert all(json.loads(r.content)["model"] == "served-name" for r in seen if r.method == "POST")
    with pytest.raises(HTTPBackendError, match=r"could not ask .*/models .*pass model='NAME'"):
        make(status(404, text="no such route"), model=None).generate(["q"])


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


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="base_url must be an http"):
        HTTPModel("127.0.0.1:8000")
    with pytest.raises(ValueError, match="top_logprobs must be a positive integer"):
        HTTPModel("http://x/v1", top_logprobs=0)
    with pytest.raises(ValueError, match="max_retries must be a whole number ≥ 0"):
        HTTPModel("http://x/v1", max_retries=-1)
    with pytest.raises(ValueError, match="timeout must be a number of seconds > 0"):
        HTTPModel("http://x/v1", timeout="soon")
    with pytest.raises(ValueError, match="timeout must be a number of seconds > 0"):
        HTTPModel("http://x/v1", timeout=0)
    with pytest.raises(ValueError, match="backoff must be a number of seconds ≥ 0"):
        HTTPModel("http://x/v1", backoff=-1)
    with pytest.raises(ValueError, match=r"prompt 0, message 0: expected \{'role': str, 'content': str\}"):
        make().generate([[{"content": "no role"}]])


# ------------------------------------------------------------------------------------------ bad answers
def test_missing_logprobs_say_what_to_fix() -> None:
    def no_logprobs(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"choices": [{"message": {"content": "Paris"}, "finish_reason": "stop"}]})

    def no_top(request: httpx.Request) -> httpx.Response:
        content = [{"token": "Paris", "logprob": -0.1, "top_logprobs": []}]
        choice = {"message": {"content": "Paris"}, "logprobs": {"content": content}}
        return httpx.Response(200, json={"choices": [choice]})

    def completion_without(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"choices": [{"text": " Rome", "logprobs": None}]})

    vllm_limit = status(400, text='{"message": "Requested top logprobs of 50, which is greater than max allowed: 20"}')
    llama_500 = status(500, text="logprobs is not supported for models created with logits_all=False")
    for handler, what, chat in [
        (no_logprobs, "no log-probs", True),
        (no_top, "no top-k alternatives", True),
        (completion_without, "no log-probs", False),
        (vllm_limit, "refused to return log-probs", True),
        (llama_500, "refused to return log-probs", True),
    ]:
        h, seen = flaky([], handler)
        with pytest.raises(LogprobsUnavailableError, match=what) as err:
            make(h, chat=chat).generate(["q"])
        assert isinstance(err.value, ValueError) and isinstance(err.value, HTTPBackendError)
        assert "--logits_all true" in str(err.value) and "--max-logprobs" in str(err.value)
        assert len(seen) == 1  # not retried: a setting to fix, not a transient fault


def test_malformed_answers() -> None:
    def wrong_shape(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"choices": [{"message": {}, "logprobs": {"content": [{"tok": "x"}]}}]})

    def lengths_differ(request: httpx.Request) -> httpx.Response:
        lp = {"tokens": ["a", "b"], "token_logprobs": [-0.1], "top_logprobs": [{"a": -0.1}, {"b": -0.2}]}
        return httpx.Response(200, json={"choices": [{"text": "ab", "logprobs": lp}]})

    def positive_logprob(request: httpx.Request) -> httpx.Response:
        content = [{"token": "x", "logprob": -0.1, "top_logprobs": [{"token": "x", "logprob": 3.5}]}]
        return httpx.Response(200, json={"choices": [{"message": {"content": "x"}, "logprobs": {"content": content}}]})

    for handler, message in [
        (status(200, text="<html>not json</html>"), "no JSON"),
        (positive_logprob, "unexpected answer .*must be ≤ 0"),
        (lambda r: httpx.Response(200, json={"error": "overloaded"}), "no 'choices'"),
        (lambda r: httpx.Response(200, json=[1, 2]), "expected a JSON object"),
        (wrong_shape, "unexpected answer"),
        (lengths_differ, "2 tokens but 1 log-probs"),
    ]:
        h, seen = flaky([], handler)
        with pytest.raises(HTTPBackendError, match=message):
            make(h, chat=handler is not lengths_differ).generate(["x"])
        assert len(seen) == 1


def test_empty_answer_is_a_zero_token_trace() -> None:
    def empty(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, json={"choices": [{"message": {"content": ""}, "finish_reason": "stop", "logprobs": {"content": []}}]}
        )

    (t,) = make(empty).generate(["q"])
    assert t.length == 0 and t.text == "" and t.topk_logprobs is None


# ------------------------------------------------------------------------------------------ concurrency
def test_bounded_concurrency_and_prompt_order() -> None:
    lock, state = threading.Lock(), {"now": 0, "max": 0}

    def slow(request: httpx.Request) -> httpx.Response:
        q = json.loads(request.content)["messages"][0]["content"]
        with lock:
            state["now"] += 1
            state["max"] = max(state["max"], state["now"])
        time.sleep(0.002 * (20 - int(q)))  # later prompts answer first
        with lock:
            state["now"] -= 1
        return chat_ok(text=f"answer {q}")

    traces = make(slow, max_concurrency=3).generate([str(i) for i in range(12)])
    assert [t.text for t in traces] == [f"answer {i}" for i in range(12)]
    assert 1 <= state["max"] <= 3
    state["max"] = 0
    make(slow, max_concurrency=8).generate([str(i) for i in range(6)], batch_size=2)
    assert state["max"] <= 2


def test_a_failed_prompt_stops_the_rest() -> None:
    seen: list[str] = []

    def fails_on_3(request: httpx.Request) -> httpx.Response:
        q = json.loads(request.content)["messages"][0]["content"]
        seen.append(q)
        if q == "3":
            return status(400, text="bad prompt")(request)
        time.sleep(0.01)  # the others take a moment: the failure is seen while most prompts are still queued
        return chat_ok()

    with pytest.raises(HTTPBackendError, match="HTTP 400: bad prompt"):
        make(fails_on_3, max_concurrency=2).generate([str(i) for i in range(50)])
    assert len(seen) < 12


def test_a_trailing_end_of_turn_token_is_not_part_of_the_trace() -> None:
    """vLLM lists ``<|im_end|>`` (with its log-prob) after the text on a ``stop``; the trace ends before it, as the
    in-process backends' do. A server that puts it in the text keeps it."""

    def handler(text: str) -> Handler:
        def h(request: httpx.Request) -> httpx.Response:
            top = [[{"token": "Paris", "logprob": -0.1}], [{"token": "<|im_end|>", "logprob": -0.2}]]
            content = [{"token": t[0]["token"], "logprob": t[0]["logprob"], "top_logprobs": t} for t in top]
            choice = {"message": {"content": text}, "finish_reason": "stop", "logprobs": {"content": content}}
            return httpx.Response(200, json={"choices": [choice]})

        return h

    t = make(handler("Paris")).generate(["q"])[0]
    assert t.length == 1 and t.token_strings == ["Paris"] and t.surprisal.tolist() == [0.1]
    assert make(handler("Paris<|im_end|>")).generate(["q"])[0].length == 2


def test_full_distribution_asks_for_every_token_and_stores_the_head() -> None:
    V = 50
    lp = np.log(np.full(V, 1.0 / V))

    def h(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        assert body["top_logprobs"] == V
        top = [{"token": f"t{i}", "logprob": float(x)} for i, x in enumerate(lp)]
        content = [{"token": "t0", "logprob": float(lp[0]), "top_logprobs": top}]
        choice = {"message": {"content": "t0"}, "finish_reason": "length", "logprobs": {"content": content}}
        return httpx.Response(200, json={"choices": [choice]})

    t = make(h, vocab_size=V, full_distribution=True).generate(["q"])[0]
    assert t.entropy_kind == "exact" and t.topk_logprobs.shape == (1, 2)
    np.testing.assert_allclose(t.entropy, [np.log(V)], rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="full_distribution"):
        make(full_distribution="yes")
