"""`HTTPModel.trace_answers` through vLLM's ``prompt_logprobs`` (tracecal.backends.http.answers), against a fake vLLM
server (httpx.MockTransport) that answers ``/tokenize`` and ``/v1/completions`` as vLLM's OpenAI-compatible server
documents them; servers that cannot score a given answer get `BackendUnsupportedError`. The real-server check is in
tests/backends/test_vllm.py (integration)."""

from __future__ import annotations

import json
import math

import httpx
import numpy as np
import pytest

from tracecal.backends.base import BackendUnsupportedError
from tracecal.backends.http import HTTPBackendError, HTTPModel, LogprobsUnavailableError
from tracecal.backends.topk import DEFAULT_TOPK_ESTIMATOR, topk_entropy
from tracecal.errors import ValidationError

V = 1000
CHAT_IDS = [1, 2, 3]  # what /tokenize gives for the chat prompt
TEXT_IDS = [1, 4]  # … for the plain-text prompt
ANSWER = {"Paris.": [10, 11], " Rome": [12], "Paris<|im_end|>": [10, 99]}
TOKENS = {10: "Paris", 11: ".", 12: " Rome", 99: "<|im_end|>"}
END = {11}  # after these the fake model would end its answer


def entry(token: int, rank: int, k: int) -> dict[str, dict[str, object]]:
    """vLLM's per-position dict: the k most likely tokens (log-probs of a fixed shape) and the actual one."""
    lps = np.log(np.array([0.5, 0.2, 0.1, 0.05, 0.05]))
    out = {str(900 + r): {"logprob": float(lps[r]), "rank": r + 1, "decoded_token": f"t{r}"} for r in range(k)}
    out.pop(str(900 + rank - 1), None)  # the actual token takes its rank's place (one entry per token id)
    lp = float(lps[rank - 1]) if rank <= len(lps) else math.log(0.001)
    out[str(token)] = {"logprob": lp, "rank": rank, "decoded_token": TOKENS.get(token, f"t{token}")}
    return out


def vllm(seen: list[dict[str, object]], with_prompt_logprobs: bool = True):  # type: ignore[no-untyped-def]
    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else {}
        seen.append({"path": request.url.path} | body)
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "served"}]})
        if request.url.path == "/tokenize":
            if "messages" in body:
                assert body["add_generation_prompt"] is True
                return httpx.Response(200, json={"tokens": CHAT_IDS, "count": 3})
            if body.get("add_special_tokens") is False:
                return httpx.Response(200, json={"tokens": ANSWER[body["prompt"]]})
            return httpx.Response(200, json={"tokens": TEXT_IDS})
        if request.url.path == "/v1/completions":
            ids, k = body["prompt"], body["prompt_logprobs"]
            assert body["max_tokens"] == 1 and body["temperature"] == 0.0 and isinstance(ids, list)
            choice = {"text": "" if ids[-1] in END else " and", "finish_reason": "stop" if ids[-1] in END else "length"}
            if with_prompt_logprobs:  # "Paris" and " Rome" rank 1, every other token 7 (outside the top k)
                choice["prompt_logprobs"] = [None] + [entry(t, 1 if t in (10, 12) else 7, k) for t in ids[1:]]
            return httpx.Response(200, json={"choices": [choice]})
        return httpx.Response(404, json={"detail": "Not Found"})

    return handler


def make(handler, **kw) -> HTTPModel:  # type: ignore[no-untyped-def]
    kw = {"model": "m", "vocab_size": V, "top_logprobs": 3, "max_retries": 0} | kw
    return HTTPModel("http://127.0.0.1:9/v1", client=httpx.Client(transport=httpx.MockTransport(handler)), **kw)


def test_chat_prompt_and_text_answer() -> None:
    seen: list[dict[str, object]] = []
    (t,) = make(vllm(seen)).trace_answers(["Capital of France?"], ["Paris."], ids=["q1"])
    assert [s["path"] for s in seen] == ["/tokenize", "/tokenize", "/v1/completions"]
    assert seen[2]["prompt"] == [*CHAT_IDS, 10, 11] and seen[2]["prompt_logprobs"] == 3 and seen[2]["model"] == "m"
    assert (t.text, t.token_strings, t.id, t.stop_reason) == ("Paris.", ["Paris", "."], "q1", "eos")
    assert t.token_ids.tolist() == [10, 11] and t.prompt_ids.tolist() == CHAT_IDS and list(t.offsets) == [0, 5]
    np.testing.assert_allclose(t.surprisal, [-math.log(0.5), -math.log(0.001)])
    top = np.log([[0.5, 0.2, 0.1], [0.5, 0.2, 0.1]])  # rank 7 is not in the top 3: the estimate reads ranks ≤ k
    np.testing.assert_allclose(t.entropy, topk_entropy(top, V, DEFAULT_TOPK_ESTIMATOR))
    assert t.entropy_kind == "topk" and t.topk_logprobs.shape == (2, 3) and t.prompt == "Capital of France?"
    assert t.decoding["strategy"] == "teacher_forced" and t.decoding["endpoint"] == "completions (prompt_logprobs)"


def test_plain_prompt_token_ids_and_stop_reasons() -> None:
    seen: list[dict[str, object]] = []
    m = make(vllm(seen), chat=False)
    a, b, c = m.trace_answers(["The capital of Italy is"] * 3, [" Rome", [12], " Rome"], max_new_tokens=8)
    assert seen[0] == {"path": "/tokenize", "model": "m", "prompt": "The capital of Italy is"}
    assert a.token_ids.tolist() == b.token_ids.tolist() == [12] and a.stop_reason == "unknown"  # it would go on
    np.testing.assert_array_equal(a.surprisal, b.surprisal)
    (d,) = m.trace_answers(["x"], [" Rome"], max_new_tokens=1)
    assert d.stop_reason == "length"
    (e,) = m.trace_answers(["x"], [" Rome"], stop_strings=["and"])
    assert e.stop_reason == "stop_string"  # the greedy next token " and" completes the stop string
    (f,) = m.trace_answers(["x"], [[10, 99]])
    assert (f.text, f.length, f.stop_reason) == ("Paris", 1, "eos")  # the answer ends before its end-of-turn token
    with pytest.raises(ValidationError, match="the answer spells '<\\|im_end\\|>', a special-token string"):
        m.trace_answers(["x"], ["Paris<|im_end|>"])  # vLLM's /tokenize would parse it: not sent as text
    (g,) = m.trace_answers([{"prompt_ids": [7, 8]}], [[12]])
    assert g.prompt_ids.tolist() == [7, 8] and seen[-1]["prompt"] == [7, 8, 12]


def test_servers_that_cannot_score_answers() -> None:
    def no_tokenize(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404, json={"detail": "Not Found"})

    with pytest.raises(BackendUnsupportedError, match="has no /tokenize endpoint.*backend='hf' or 'llamacpp'") as err:
        make(no_tokenize).trace_answers(["q"], ["a"])
    assert isinstance(err.value, NotImplementedError)
    with pytest.raises(BackendUnsupportedError, match="returned no prompt_logprobs"):
        make(vllm([], with_prompt_logprobs=False)).trace_answers(["q"], ["Paris."])

    def limit(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/tokenize":
            return httpx.Response(200, json={"tokens": [1]})
        return httpx.Response(400, text='{"message": "Requested prompt logprobs of 50, greater than max allowed: 20"}')

    with pytest.raises(LogprobsUnavailableError, match="--max-logprobs"):
        make(limit).trace_answers(["q"], [[5]])

    def broken(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/tokenize":
            return httpx.Response(200, json={"tokens": [1]})
        return httpx.Response(200, json={"choices": [{"prompt_logprobs": [None, {"3": {"rank": 1}}]}]})

    with pytest.raises(HTTPBackendError, match="unexpected prompt_logprobs"):
        make(broken).trace_answers(["q"], [[3]])


def test_options_are_checked() -> None:
    with pytest.raises(ValueError, match="unknown option.s. temperature"):
        make(vllm([])).trace_answers(["q"], ["a"], temperature=0.7)  # prompt log-probs are at temperature 1
    with pytest.raises(ValueError, match="one entry per prompt"):
        make(vllm([])).trace_answers(["q", "r"], ["a"])
