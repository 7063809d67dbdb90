"""The llama.cpp backend (llama-cpp-python, in-process) on the real default GGUF (SmolLM2-135M-Instruct Q4_1).

llama.cpp loads the 135M GGUF in a fraction of a second, so every test here runs the real model; the HF
comparison uses the session's ``tiny_model`` (same tokenizer, for the prompt ids) and the real ``model``
(fp32, for the s_t / H_t agreement).
"""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import numpy as np
import pytest
from scipy.special import logsumexp

from tracecal.backends import load_model
from tracecal.backends.arguments import PromptTooLongError
from tracecal.backends.base import Backend, BackendUnsupportedError, LocalBackend
from tracecal.backends.hf import DEFAULT_MODEL, default_gguf_path
from tracecal.backends.llamacpp import LlamaCppModel, logits_stats
from tracecal.backends.llamacpp_steps import top_k

ROOT = Path(__file__).resolve().parents[2]
PROMPTS = [
    "What is the capital of France?",
    "What is 2 + 2?",
    "Who wrote the play Romeo and Juliet? Answer with the name only.",
    "Explain in one sentence why the sky looks blue during the day.",
]
MESSAGES = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Largest planet?"}]


@pytest.fixture(scope="module")
def lcpp(tokenizer) -> LlamaCppModel:  # type: ignore[no-untyped-def]
    return LlamaCppModel.load(n_threads=1, tokenizer=tokenizer)


@pytest.fixture(scope="module")
def traces(lcpp):  # type: ignore[no-untyped-def]
    return lcpp.generate(PROMPTS, max_new_tokens=16)


def pinned_spec() -> str:
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["llamacpp"]
    (spec,) = [s for s in extra if s.startswith("llama-cpp-python")]
    return spec


def test_installed_llama_cpp_python_is_the_pinned_one() -> None:
    spec = pinned_spec()
    m = re.fullmatch(r"llama-cpp-python==([0-9.]+)", spec)
    assert m, f"the llamacpp extra must pin an exact version (0.3.36 segfaults), got {spec!r}"
    assert importlib.metadata.version("llama-cpp-python") == m.group(1), "run: bash scripts/setup.sh"
    assert f'"llama-cpp-python[server]=={m.group(1)}"' in (ROOT / "scripts" / "setup.sh").read_text()


def test_logits_stats_is_logsumexp_and_entropy() -> None:
    x = np.random.default_rng(0).normal(0, 5, 49152)
    lse, h = logits_stats(x)
    p = np.exp(x - logsumexp(x))
    assert lse == pytest.approx(logsumexp(x), abs=1e-9)
    assert h == pytest.approx(-(p * np.log(p)).sum(), abs=1e-9)
    x[:100] = -np.inf  # masked tokens have p = 0 and contribute nothing
    assert np.isfinite(logits_stats(x)[1])
    assert logits_stats(np.zeros(8))[1] == pytest.approx(np.log(8))


def test_protocol_and_load_model_dispatch(lcpp, tokenizer) -> None:  # type: ignore[no-untyped-def]
    assert isinstance(lcpp, Backend) and not isinstance(lcpp, LocalBackend)
    assert lcpp.model_id == DEFAULT_MODEL and lcpp.vocab_size == 49152 and lcpp.context_length == 4096
    assert lcpp.chat and lcpp.stop_ids == sorted(set(lcpp.stop_ids))
    m = load_model(default_gguf_path(), backend="llamacpp", n_threads=1, n_ctx=256, tokenizer=tokenizer)
    assert isinstance(m, LlamaCppModel) and m.context_length == 256 and m.model_id == str(default_gguf_path())
    with pytest.raises(ValueError, match="does not apply"):
        load_model(backend="llamacpp", dtype="float32")
    with pytest.raises(ValueError, match=r"\.gguf"):
        load_model(ROOT / "README.md", backend="llamacpp")
    with pytest.raises(ValueError, match="hf, http or llamacpp"):
        load_model(backend="onnx")
    with pytest.raises(BackendUnsupportedError, match="beam"):
        lcpp.beam_scores(PROMPTS[:1])


def test_same_prompt_ids_as_the_hf_backend(lcpp, tiny_model, traces) -> None:  # type: ignore[no-untyped-def]
    """One chat-template path: HF and llama.cpp feed identical ids for chat, plain and message prompts."""
    cases = [*PROMPTS, MESSAGES, {"prompt": PROMPTS[0]}, {"messages": MESSAGES}, {"prompt_ids": [1, 2, 3]}]
    for chat in (True, False):
        tiny_model.chat = lcpp.chat = chat
        try:
            for p in cases:
                assert lcpp.encode_prompt(p) == tiny_model.encode_prompt(p), (chat, p)
        finally:
            tiny_model.chat = lcpp.chat = True
    # the ids the traces record are those HF records, and what llama.cpp evaluated
    hf = tiny_model.generate(PROMPTS, max_new_tokens=2)
    for a, b in zip(traces, hf, strict=True):
        np.testing.assert_array_equal(a.prompt_ids, b.prompt_ids)
    (t,) = lcpp.generate([MESSAGES], max_new_tokens=1)
    np.testing.assert_array_equal(lcpp.llm.input_ids[: len(t.prompt_ids)], t.prompt_ids)
    assert lcpp.tokenizer.decode(t.prompt_ids).startswith("<|im_start|>system\nAnswer briefly.")


def test_trace_fields(lcpp, traces) -> None:  # type: ignore[no-untyped-def]
    assert [t.id for t in traces] == ["0", "1", "2", "3"]
    for t, p in zip(traces, PROMPTS, strict=True):
        assert t.length > 0 and t.entropy_kind == "exact" and t.model_id == DEFAULT_MODEL and t.prompt == p
        assert t.token_ids.dtype == np.int64 and t.surprisal.dtype == np.float64
        assert "".join(t.token_strings) == t.text == lcpp.tokenizer.decode(t.token_ids)
        assert all(t.text[o:].startswith(s) for o, s in zip(t.offsets, t.token_strings, strict=True))
        assert not np.isin(t.token_ids, lcpp.stop_ids).any()
        assert t.stop_reason in ("eos", "length") and (t.stop_reason == "length") == (t.length == 16)
        assert np.all(t.surprisal >= 0) and np.all(t.entropy >= 0) and np.all(t.entropy <= np.log(49152))
        assert t.decoding["strategy"] == "greedy" and t.decoding["backend"] == "llama.cpp"
    assert any(t.stop_reason == "eos" for t in traces)


def test_greedy_answers_are_llama_cpp_greedy_decoding(lcpp, traces) -> None:  # type: ignore[no-untyped-def]
    """The tokens are those llama.cpp's own greedy sampler picks (Llama.generate, temp=0)."""
    for t in traces[:2]:
        ours = list(t.token_ids) + ([] if t.stop_reason == "length" else [-1])
        theirs = []
        for tok in lcpp.llm.generate(list(t.prompt_ids), temp=0.0, repeat_penalty=1.0, reset=True):
            theirs.append(int(tok) if tok not in lcpp.stop_ids else -1)
            if len(theirs) == len(ours) or theirs[-1] == -1:
                break
        assert theirs == ours


def test_recorded_equals_teacher_forced_and_next_token(lcpp, traces) -> None:  # type: ignore[no-untyped-def]
    for t in traces:
        s, h = lcpp.teacher_forced(t.prompt_ids, t.token_ids)
        np.testing.assert_allclose(s, t.surprisal, atol=1e-6)
        np.testing.assert_allclose(h, t.entropy, atol=1e-6)
        if t.length > 2:  # an off-by-one is large: the check is able to fail
            assert np.abs(h[1:] - t.entropy[:-1]).max() >= 0.1
    lp = lcpp.next_token_logprobs([t.prompt_ids for t in traces], [int(t.token_ids[0]) for t in traces])
    np.testing.assert_allclose(-np.diag(lp), [t.surprisal[0] for t in traces], atol=1e-6)


def test_agrees_with_hf_fp32_up_to_quantised_arithmetic(lcpp, model, traces) -> None:  # type: ignore[no-untyped-def]
    """HF (fp32, the GGUF dequantised) teacher-forced on llama.cpp's answers. llama.cpp multiplies Q4_1 weights
    with activations rounded to 8 bits, so the numbers differ a little: on 64 TriviaQA answers the per-answer max
    |Δs_t| was ≤ 0.32 nats and |ΔH_t| ≤ 0.64 (with the same weights in F32, ≤ 0.009; docs/backends.md). 1 nat
    allows for that and still fails the broken AMX path (median per-answer |ΔH_t| 1.45, up to 4 nats)."""
    worst_s = worst_h = 0.0
    for t in traces:
        s, h = model.teacher_forced(t.prompt_ids, t.token_ids)
        worst_s, worst_h = max(worst_s, np.abs(s - t.surprisal).max()), max(worst_h, np.abs(h - t.entropy).max())
        if t.length > 2:
            assert np.abs(h[1:] - t.entropy[:-1]).max() >= 1.0  # a shifted alignment fails the bound
    assert worst_s <= 1.0 and worst_h <= 1.0, (worst_s, worst_h)


def test_deterministic_with_and_without_prefix_reuse(lcpp, traces) -> None:  # type: ignore[no-untyped-def]
    again = lcpp.generate(PROMPTS[::-1], max_new_tokens=16)[::-1]
    lcpp.reuse_prefix = False
    try:
        fresh = lcpp.generate(PROMPTS, max_new_tokens=16)
    finally:
        lcpp.reuse_prefix = True
    for a, b, c in zip(traces, again, fresh, strict=True):
        assert a.text == b.text == c.text
        np.testing.assert_allclose(b.surprisal, a.surprisal, atol=1e-5)
        np.testing.assert_allclose(c.entropy, a.entropy, atol=1e-5)


def test_top_logprobs_stop_strings_and_length(lcpp, traces) -> None:  # type: ignore[no-untyped-def]
    (t,) = lcpp.generate(PROMPTS[3:], max_new_tokens=16, top_logprobs=5)
    assert t.topk_ids.shape == (t.length, 5) and np.all(np.diff(t.topk_logprobs, axis=1) <= 0)
    np.testing.assert_array_equal(t.topk_ids[:, 0], t.token_ids)  # greedy: the chosen token is the top one
    np.testing.assert_allclose(t.topk_logprobs[:, 0], -t.surprisal, atol=1e-9)
    full = traces[3]
    cut = full.text[full.offsets[3] + len(full.token_strings[3]) // 2 :][:1] or full.token_strings[3]
    (s,) = lcpp.generate(PROMPTS[3:], max_new_tokens=16, stop_strings=[cut])
    assert s.stop_reason == "stop_string" and cut not in s.text and full.text.startswith(s.text)
    np.testing.assert_allclose(s.surprisal, full.surprisal[: s.length], atol=1e-5)
    (one,) = lcpp.generate(PROMPTS[3:], max_new_tokens=1)
    assert one.length == 1 and one.stop_reason == "length" and one.token_ids[0] == full.token_ids[0]


def test_kernels_are_batch_invariant_without_extra_buffers(lcpp, traces) -> None:  # type: ignore[no-untyped-def]
    """Default (no repacked/AMX weights): a prompt's logits do not depend on how its tokens were batched, so
    reusing a cached prefix changes no number. (With llama.cpp's extra buffer types on a CPU with AMX, the
    Q4_1 logits of this build move by nats with the split: docs/backends.md.)"""
    assert lcpp.llm.model_params.use_extra_bufts is False and traces[0].decoding["extra_buffers"] is False
    ids = list(traces[2].prompt_ids)
    lcpp.llm.reset()
    lcpp.llm.eval(ids)
    whole = lcpp._logits()
    lcpp.llm.reset()
    for chunk in (ids[:1], ids[1:24], ids[24:]):
        lcpp.llm.eval(chunk)
    np.testing.assert_array_equal(lcpp._logits(), whole)


def test_input_validation(lcpp) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="prompts is empty"):
        lcpp.generate([])
    with pytest.raises(ValueError, match="max_new_tokens"):
        lcpp.generate(PROMPTS[:1], max_new_tokens=0)
    with pytest.raises(ValueError, match="one entry per prompt"):
        lcpp.generate(PROMPTS[:2], ids=["a"])
    with pytest.raises(PromptTooLongError, match="n_ctx"):
        lcpp.generate({"prompt_ids": [1] * 4090}, max_new_tokens=8)
    with pytest.raises(BackendUnsupportedError, match="greedily"):
        lcpp.generate(PROMPTS[:1], do_sample=True, temperature=0.7)


def test_trace_answers_of_greedy_answers_are_the_generation_time_traces(lcpp, traces) -> None:  # type: ignore[no-untyped-def]
    """Teacher forcing one token per step (llama.cpp's decoding arithmetic): the generation-time traces, every field
    but ``decoding`` (|Δs_t|, |ΔH_t| ≤ 1e-4 nats; measured 0). The answers run in reverse order, so the prefixes
    reused from the cache come from other prompts than in generation. The cache is emptied first: a prefix left by
    `test_kernels_are_batch_invariant_without_extra_buffers`'s split evaluation (1 + 23 + 20 tokens) moves the
    logits of a prompt that reuses it by up to 0.11 nats (generation's too): KV entries depend on the batch split."""
    lcpp.llm.reset()
    forced = lcpp.trace_answers(PROMPTS[::-1], [t.token_ids for t in traces][::-1], max_new_tokens=16)[::-1]
    forced_ids = [str(len(PROMPTS) - 1 - i) for i in range(len(PROMPTS))]
    assert {t.stop_reason for t in traces} == {"eos", "length"}
    for a, b, bid in zip(traces, forced, forced_ids, strict=True):
        assert (b.text, b.token_strings, b.stop_reason, b.prompt, b.id) == (
            a.text,
            a.token_strings,
            a.stop_reason,
            a.prompt,
            bid,
        )
        np.testing.assert_array_equal(b.token_ids, a.token_ids)
        np.testing.assert_array_equal(b.offsets, a.offsets)
        np.testing.assert_array_equal(b.prompt_ids, a.prompt_ids)
        assert np.abs(b.surprisal - a.surprisal).max() <= 1e-4 and np.abs(b.entropy - a.entropy).max() <= 1e-4
        assert b.decoding["strategy"] == "teacher_forced" and b.decoding["backend"] == "llama.cpp"
    (t,) = lcpp.generate(PROMPTS[3:], max_new_tokens=6, top_logprobs=4)
    (f,) = lcpp.trace_answers(PROMPTS[3:], [t.token_ids], top_logprobs=4)
    np.testing.assert_array_equal(f.topk_ids, t.topk_ids)
    np.testing.assert_allclose(f.topk_logprobs, t.topk_logprobs, atol=1e-4)
    assert f.stop_reason == "unknown"  # no max_new_tokens given: the model would have gone on


def test_trace_answers_of_other_answers_are_finite_and_non_negative(lcpp) -> None:  # type: ignore[no-untyped-def]
    answers = ["Paris is the capital of France.", "", [5, 6, 7, 8], "4"]
    out = lcpp.trace_answers(PROMPTS, answers, top_logprobs=2)
    for t in out:
        assert np.all(np.isfinite(t.surprisal)) and np.all(t.surprisal >= 0)
        assert np.all(np.isfinite(t.entropy)) and np.all(t.entropy >= 0) and np.all(t.entropy <= np.log(49152))
        assert 0.0 <= t.meta["end_prob"] <= 1.0
    assert out[0].text == answers[0] and out[1].length == 0 and out[2].token_ids.tolist() == [5, 6, 7, 8]
    assert out[0].stop_reason == "eos"  # the model ends its turn after a finished sentence
    assert out[2].surprisal.mean() > out[0].surprisal.mean()  # random ids surprise it more than a fluent answer
    with pytest.raises(ValueError, match="unknown option"):
        lcpp.trace_answers(PROMPTS[:1], ["x"], beams=2)
    # the bounds of generate (issue #37): a temperature that makes every s_t log |V| or 10^30 nats, a top-k
    # larger than the vocabulary
    for kw, message in [
        ({"temperature": float("inf")}, r"temperature must be a finite number in \[0.01, 100\], got inf"),
        ({"temperature": 1e-30}, r"temperature must be a finite number in \[0.01, 100\], got 1e-30"),
        ({"top_logprobs": 10**9}, "top_logprobs must be at most the model's vocabulary of 49152"),
    ]:
        with pytest.raises(ValueError, match=message):
            lcpp.trace_answers(PROMPTS[:1], ["x"], **kw)
    with pytest.raises(ValueError, match="top_logprobs must be at most the model's vocabulary of 49152"):
        lcpp.generate(PROMPTS[:1], top_logprobs=10**9)
    x = np.array([0.0, 3.0, 1.0])
    assert top_k(x, float(logsumexp(x)), 2)[0].tolist() == [1, 2]


def test_sample_answers_record_the_sampled_distribution_and_repeat_by_seed(lcpp) -> None:  # type: ignore[no-untyped-def]
    sets = lcpp.sample_answers(PROMPTS[:2], 5, 6, temperature=2.0, seeds=[11, 12])
    again = lcpp.sample_answers(PROMPTS[1:2], 5, 6, temperature=2.0, seeds=[12])[0]
    assert [t.text for t in again.traces] == [t.text for t in sets[1].traces]  # a prompt's seed alone decides
    assert len({t.text for t in sets[0].traces}) > 1  # at τ = 2 the samples differ
    for st in sets:
        assert len(st.traces) == 5 and st.cost["decode_tokens"] >= sum(t.length for t in st.traces)
        assert st.cost["forward_passes"] == 1 + st.cost["decode_tokens"] and st.cost["cpu_seconds"] > 0
        for t in st.traces:
            lcpp.llm.n_tokens = 0  # the prompt evaluated as sampling does (all but its last token in one batch)
            lcpp.llm.eval(list(t.prompt_ids[:-1]))
            f = lcpp._forced(list(t.prompt_ids), list(t.token_ids), 2.0, 0)  # softmax(x / τ), teacher-forced
            np.testing.assert_allclose(t.surprisal, f.surprisal, atol=1e-6)
            np.testing.assert_allclose(t.entropy, f.entropy, atol=1e-6)
            assert t.decoding["strategy"] == "sample" and t.decoding["temperature"] == 2.0
    with pytest.raises(ValueError, match="temperature"):
        lcpp.sample_answers(["hi"], 2, temperature=float("inf"))
    with pytest.raises(ValueError, match="one entry per prompt"):
        lcpp.sample_answers(["hi"], 2, seeds=[1, 2])
