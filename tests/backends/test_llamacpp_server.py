"""A real llama.cpp server (llama-cpp-python's ``python -m llama_cpp.server``) answering the HTTP backend, against
the in-process llama.cpp backend on the same prompt ids (default GGUF, greedy, 1 thread each).

How the same prompt reaches both: the in-process backend builds the ids with the HF chat template; the server
gets their text on ``/v1/completions`` (it tokenizes with special tokens and, for this GGUF, no BOS, so it
evaluates the same ids: checked below). ``repeat_penalty`` is set to 1.0: the server's default is 1.1, which
changes greedy answers (6 of 12 TriviaQA answers differed, docs/backends.md). Measured over 12 TriviaQA answers
(24 tokens), the server's s_t equal the in-process ones to ≤ 4e-7 nats (float32 log-softmax in the server,
float64 here): the tolerance below, 1e-5, is 25× that.

Two servers: the stock command (llama.cpp's extra buffer types on, as llama.cpp loads by default) against the
in-process backend with ``extra_buffers=True`` - the same kernels; with AMX those kernels depend on how tokens
are batched, so both see the same prompts in the same order - and a server through
:func:`~tracecal.backends.llamacpp_server.run_server` with them off, against the in-process default (batch-invariant:
any order), where the server's own chat template (``/v1/chat/completions``) is compared too.
"""

from __future__ import annotations

import numpy as np
import pytest

from tracecal.backends import load_model
from tracecal.backends.llamacpp import LlamaCppModel
from tracecal.backends.llamacpp_server import serve_gguf

pytestmark = pytest.mark.integration

PROMPTS = [
    "What is the capital of France?",
    "What is 2 + 2?",
    "Which planet is known as the Red Planet?",
    "Who painted the Mona Lisa?",
    "Name the largest ocean on Earth.",
]
MNT = 16


def _cpu_flags() -> set[str]:
    try:
        line = next(ln for ln in open("/proc/cpuinfo") if ln.startswith("flags"))
    except (OSError, StopIteration):
        return set()
    return set(line.split(":", 1)[1].split())


#: With AMX, llama.cpp's kernels here give the same numbers however a prompt is split between a reused KV-cache prefix
#: and new tokens. On CPUs without it (AVX2 only) they do not: the same prompt evaluated after another one (the server
#: and the in-process backend both keep the shared prefix) differs by up to 0.15 nats in s_t (measured; the answers stay
#: identical), so there the comparison is of answers plus a tolerance of 0.25 nats (0.15 seen at most).
BATCH_INVARIANT = bool({"amx_tile", "amx_bf16", "amx_int8"} & _cpu_flags())
TOL_S = 1e-5 if BATCH_INVARIANT else 0.25


def start(tmp_path_factory, extra_buffers: bool):  # type: ignore[no-untyped-def]
    log_path = tmp_path_factory.mktemp("llamacpp") / "server.log"
    with open(log_path, "w") as log, serve_gguf(n_threads=1, n_ctx=2048, log=log, extra_buffers=extra_buffers) as url:
        yield url


@pytest.fixture(scope="module")
def stock_server(tmp_path_factory):  # type: ignore[no-untyped-def]
    """``python -m llama_cpp.server --model GGUF --host 127.0.0.1 --port FREE --n_threads 1 --logits_all true
    --model_alias smollm2 --n_ctx 2048``, ready when GET /v1/models lists smollm2."""
    yield from start(tmp_path_factory, extra_buffers=True)


@pytest.fixture(scope="module")
def server(tmp_path_factory):  # type: ignore[no-untyped-def]
    """The same server with llama.cpp's extra buffer types off (the in-process backend's default)."""
    yield from start(tmp_path_factory, extra_buffers=False)


def http_model(url: str, chat: bool = False):  # type: ignore[no-untyped-def]
    # raw_prompts: these prompts are the chat template rendered here, control tokens meant as such
    kw = {"model": "smollm2", "vocab_size": 49152, "chat": chat, "batch_size": 1, "timeout": 300.0, "raw_prompts": True}
    return load_model(url, backend="http", extra_body={"repeat_penalty": 1.0}, **kw)  # llama.cpp's default is 1.1


def check_same(local: list, remote: list) -> None:
    assert [r.text for r in remote] == [t.text for t in local]
    for a, b in zip(local, remote, strict=True):
        assert b.entropy_kind == "topk" and b.stop_reason == a.stop_reason and b.length == a.length
        assert "".join(b.token_strings) == b.text
        np.testing.assert_allclose(b.surprisal, a.surprisal, atol=TOL_S, rtol=0)
        # the server's top-1 log-prob is the greedy token's: −s_t
        np.testing.assert_allclose(b.topk_logprobs[:, 0], -a.surprisal, atol=TOL_S, rtol=0)


def test_stock_server_answers_equal_the_in_process_backend(stock_server, tokenizer) -> None:  # type: ignore[no-untyped-def]
    lcpp = LlamaCppModel.load(n_threads=1, extra_buffers=True, tokenizer=tokenizer)
    local = lcpp.generate(PROMPTS, max_new_tokens=MNT)
    texts = [tokenizer.decode(t.prompt_ids) for t in local]
    for t, text in zip(local, texts, strict=True):  # the server evaluates exactly these ids
        assert lcpp.llm.tokenize(text.encode(), add_bos=False, special=True) == list(t.prompt_ids)
    assert lcpp.llm.metadata.get("tokenizer.ggml.add_bos_token") == "false"
    check_same(local, http_model(stock_server).generate(texts, max_new_tokens=MNT))


def test_server_matches_the_default_backend_and_its_chat_template(server, tokenizer) -> None:  # type: ignore[no-untyped-def]
    lcpp = LlamaCppModel.load(n_threads=1, tokenizer=tokenizer)
    local = lcpp.generate(PROMPTS, max_new_tokens=MNT)
    texts = [tokenizer.decode(t.prompt_ids) for t in local]
    check_same(local, http_model(server).generate(texts[::-1], max_new_tokens=MNT)[::-1])  # order: no matter
    # the server's own chat template (the GGUF's) gives the same prompts for these messages
    check_same(local, http_model(server, chat=True).generate(PROMPTS, max_new_tokens=MNT))


@pytest.mark.xfail(
    not BATCH_INVARIANT,
    reason="without AMX the llama.cpp server's greedy answer to a prompt depends on the prompt before it (KV-prefix "
    "reuse rounds differently), so the gateway's reply and a reference taken from the same server earlier can differ",
    strict=False,
)
def test_gateway_proxies_the_server_for_the_openai_client(server) -> None:  # type: ignore[no-untyped-def]
    """`tracecal serve --upstream URL` in front of the real server, spoken to by the official client: the answer is
    the server's own, and its confidence is c_TRACE of the trace the HTTP backend builds from the same reply
    (streamed and non-streamed alike)."""
    import openai
    from fastapi.testclient import TestClient

    from tracecal.serve import create_app
    from tracecal.serve.proxy import proxy_backends
    from tracecal.signals.operators import trace_confidence

    chat, text = proxy_backends(server, "smollm2", vocab_size=49152, extra_body={"repeat_penalty": 1.0})
    ref = http_model(server, chat=True).generate(PROMPTS[:2], max_new_tokens=MNT)
    with TestClient(create_app(chat, text_model=text)) as http:
        client = openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=http, max_retries=0)
        assert [m.id for m in client.models.list().data] == ["smollm2"]
        for prompt, want in zip(PROMPTS[:2], ref, strict=True):
            msgs = [{"role": "user", "content": prompt}]
            r = client.chat.completions.create(model="smollm2", messages=msgs, max_tokens=MNT)  # type: ignore[arg-type]
            conf = r.choices[0].model_extra["confidence"]  # type: ignore[index]
            assert r.choices[0].message.content == want.text and conf["entropy_kind"] == "topk"
            rel = 1e-6 if BATCH_INVARIANT else 0.3  # see BATCH_INVARIANT
            assert conf["c_trace"] == pytest.approx(float(trace_confidence([want])[0]), rel=rel)
            chunks = list(client.chat.completions.create(model="smollm2", messages=msgs, max_tokens=MNT, stream=True))  # type: ignore[arg-type]
            assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == want.text
            streamed = chunks[-1].choices[0].model_extra["confidence"]  # type: ignore[index]
            assert streamed["c_trace"] == pytest.approx(conf["c_trace"], rel=rel)
            assert streamed["tokens"] == conf["tokens"]
            if BATCH_INVARIANT:
                assert streamed == conf
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
