"""LangChain's ``ChatOpenAI`` against the gateway, unchanged (``base_url``, any ``api_key``), on a real uvicorn server
(127.0.0.1, a free port) with the tiny random model: ``.invoke`` and ``.stream`` get the gateway's answer, and its
``confidence`` reaches the message as ``response_metadata["logprobs"]["confidence"]`` (LangChain keeps only OpenAI's
choice fields: `tracecal.serve.routes`), equal to the one the raw JSON carries.
"""

from __future__ import annotations

import functools
import operator

import httpx
import pytest
from langchain_openai import ChatOpenAI

from tests.serve.helpers import MODEL, PROMPTS, Server
from tracecal.serve import ServeConfig, create_app

pytestmark = pytest.mark.integration

MNT = 8


@pytest.fixture(scope="module")
def server(tiny_model):  # type: ignore[no-untyped-def]
    with Server(create_app(tiny_model, config=ServeConfig(abstain_below=0.5))) as s:
        yield s


def _llm(server: Server, **kw: object) -> ChatOpenAI:
    return ChatOpenAI(base_url=server.url + "/v1", api_key="x", model=MODEL, max_tokens=MNT, max_retries=0, **kw)  # type: ignore[arg-type]


def _raw(server: Server, prompt: str, **extra: object) -> dict:  # type: ignore[type-arg]
    """The gateway's own JSON choice for ``prompt`` (the reference)."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": prompt}], "max_tokens": MNT} | extra
    r = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]  # type: ignore[no-any-return]


def test_invoke_carries_the_confidence(server: Server) -> None:
    for prompt in PROMPTS[:2]:
        ref = _raw(server, prompt)
        msg = _llm(server).invoke(prompt)
        assert msg.content == ref["message"]["content"]
        assert msg.response_metadata["finish_reason"] == ref["finish_reason"]
        conf = msg.response_metadata["logprobs"]["confidence"]
        assert conf == ref["confidence"] and conf["tokens"] == msg.usage_metadata["output_tokens"]  # type: ignore[index]
        assert 0 < conf["c_trace"] <= 1 and isinstance(conf["abstain"], bool)
        assert msg.response_metadata["logprobs"]["content"] == []  # no token list unless asked for
    # with logprobs=True LangChain gets the tokens too, and still the confidence
    msg = _llm(server, logprobs=True).invoke(PROMPTS[0])
    lp = msg.response_metadata["logprobs"]
    assert len(lp["content"]) == lp["confidence"]["tokens"] > 0
    assert "".join(x["token"] for x in lp["content"]) == msg.content


def test_stream_ends_with_the_confidence(server: Server) -> None:
    ref = _raw(server, PROMPTS[0])
    chunks = list(_llm(server).stream(PROMPTS[0]))
    assert len(chunks) > 2
    text = "".join(str(c.content) for c in chunks)
    assert text == ref["message"]["content"]
    last = next(c for c in reversed(chunks) if c.response_metadata.get("finish_reason"))
    assert last.response_metadata["finish_reason"] == ref["finish_reason"]
    assert last.response_metadata["logprobs"]["confidence"] == ref["confidence"]
    assert all("logprobs" not in c.response_metadata for c in chunks if c is not last)  # only the last one
    whole = functools.reduce(operator.add, chunks)  # the aggregated message, as LangChain merges chunks
    assert whole.content == ref["message"]["content"]
    assert whole.response_metadata["logprobs"]["confidence"] == ref["confidence"]
    # with logprobs=True the token chunks carry theirs and the merged list is the whole answer's
    chunks = list(_llm(server, logprobs=True).stream(PROMPTS[0]))
    whole = functools.reduce(operator.add, chunks)
    lp = whole.response_metadata["logprobs"]
    assert lp["confidence"] == ref["confidence"] and len(lp["content"]) == ref["confidence"]["tokens"]
