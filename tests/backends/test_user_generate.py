"""Recording a user's own ``model.generate(...)`` (tracecal.backends.user_generate) on a model loaded with plain
transformers calls (the random Llama of tests/backends/conftest.py, ``lively_net``): sampled answers' s_t and H_t
equal a teacher-forced pass of the sampled tokens under the sampling distribution (tempered; and, with
``distribution="sampled"``, truncated by top-k / top-p), greedy recording equals the HF backend's, beams, the
streaming hook, and what it refuses."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from tracecal.backends.base import BackendUnsupportedError
from tracecal.backends.user_generate import Recording, record, sampling_warpers

PROMPTS = ["What is the capital of France?", "Name a colour.", "Why is the sky blue? Explain in a sentence."]
TOL = 1e-4  # nats, fp32


@pytest.fixture(scope="module")
def inputs(tokenizer: Any) -> dict[str, torch.Tensor]:
    """The prompts through the chat template, left padded: what a user hands ``model.generate``."""
    texts = [
        tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False)
        for p in PROMPTS
    ]
    return dict(tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False))


def teacher_forced(net: Any, t: Any, temperature: float, top_k: int = 0, top_p: float = 1.0) -> tuple[Any, Any]:
    """s_t, H_t of a trace's tokens from one unpadded forward pass, under softmax(x/τ) truncated to the top-k and
    the top-p nucleus (the smallest set of most likely tokens whose mass reaches top_p), written out here."""
    ids = torch.tensor([[*t.prompt_ids.tolist(), *t.token_ids.tolist()]])
    with torch.no_grad():
        x = net(ids).logits[0, len(t.prompt_ids) - 1 : -1].double() / temperature
    if top_k:
        kth = torch.topk(x, top_k, dim=-1).values[:, -1:]
        x = x.masked_fill(x < kth, -torch.inf)
    if top_p < 1.0:
        srt, idx = torch.sort(x, descending=True, dim=-1)
        p = torch.softmax(srt, -1)
        drop = (torch.cumsum(p, -1) - p) >= top_p  # mass before this token already reaches top_p
        x = torch.full_like(x, -torch.inf).scatter(1, idx, srt.masked_fill(drop, -torch.inf))
    logp = torch.log_softmax(x, -1)
    s = -logp.gather(1, torch.tensor(t.token_ids.tolist())[:, None]).squeeze(1)
    h = -torch.where(logp > -torch.inf, logp.exp() * logp, torch.zeros_like(logp)).sum(-1)
    return s.numpy(), h.numpy()


def test_sampling_with_temperature_and_top_p(lively_net: Any, tokenizer: Any, inputs: dict[str, torch.Tensor]) -> None:
    torch.manual_seed(0)
    with record(lively_net, tokenizer) as rec:
        out = lively_net.generate(
            **inputs, do_sample=True, temperature=0.7, top_p=0.9, max_new_tokens=10, pad_token_id=tokenizer.eos_token_id
        )
    assert "generate" not in vars(lively_net)  # the model is as it was after the block
    assert len(rec.traces) == len(PROMPTS) and isinstance(out, torch.Tensor)
    greedy = lively_net.generate(**inputs, do_sample=False, max_new_tokens=10, pad_token_id=tokenizer.eos_token_id)
    assert not torch.equal(out, greedy), "the answers were sampled"
    for b, t in enumerate(rec.traces):
        assert t.length > 0 and t.decoding["strategy"] == "sample" and t.decoding["temperature"] == 0.7
        new = out[b, inputs["input_ids"].shape[1] :].tolist()
        assert (
            t.token_ids.tolist() == new[: t.length]
            and t.prompt_ids.tolist() == inputs["input_ids"][b][inputs["attention_mask"][b].bool()].tolist()
        )
        s, h = teacher_forced(lively_net, t, 0.7)  # the tempered distribution, before truncation (the default)
        assert np.abs(s - t.surprisal).max() <= TOL and np.abs(h - t.entropy).max() <= TOL
        s1, h1 = teacher_forced(lively_net, t, 1.0)
        assert np.abs(h1 - t.entropy).max() > 0.05  # the check sees the temperature


def test_sampled_distribution_is_the_truncated_one(lively_net: Any, tokenizer: Any, inputs: dict[str, Any]) -> None:
    torch.manual_seed(1)
    rec = Recording(lively_net, tokenizer, distribution="sampled", top_logprobs=2)
    rec.generate(
        **inputs,
        do_sample=True,
        temperature=0.7,
        top_p=0.9,
        top_k=40,
        max_new_tokens=8,
        pad_token_id=tokenizer.eos_token_id,
    )
    for t in rec.traces:
        s, h = teacher_forced(lively_net, t, 0.7, top_k=40, top_p=0.9)
        assert np.abs(s - t.surprisal).max() <= TOL and np.abs(h - t.entropy).max() <= TOL
        untruncated = teacher_forced(lively_net, t, 0.7)[1]
        assert np.all(t.entropy <= untruncated + TOL) and np.any(t.entropy < untruncated - 0.05)
        assert t.topk_ids.shape == (t.length, 2) and "sampled distribution" in t.decoding["recorded_logits"]


def test_greedy_recording_equals_the_hf_backend(
    lively_net: Any, lively_model: Any, tokenizer: Any, inputs: dict[str, Any]
) -> None:
    with record(lively_net, tokenizer, model_id="lively-random-llama") as rec:
        lively_net.generate(
            **inputs, max_new_tokens=8, pad_token_id=tokenizer.eos_token_id, return_dict_in_generate=True
        )
    ours = lively_model.generate(PROMPTS, max_new_tokens=8)
    for a, b in zip(rec.traces, ours, strict=True):
        assert a.token_ids.tolist() == b.token_ids.tolist() and a.text == b.text and a.stop_reason == b.stop_reason
        assert np.abs(a.surprisal - b.surprisal).max() <= TOL and np.abs(a.entropy - b.entropy).max() <= TOL
        assert a.decoding["strategy"] == "greedy" and a.model_id == "lively-random-llama"


def test_beams_are_traced_by_a_teacher_forced_pass(lively_net: Any, tokenizer: Any, inputs: dict[str, Any]) -> None:
    with record(lively_net, tokenizer) as rec:
        out = lively_net.generate(
            **inputs, num_beams=3, num_return_sequences=2, max_new_tokens=6, pad_token_id=tokenizer.eos_token_id
        )
    assert len(rec.traces) == out.shape[0] == 2 * len(PROMPTS)
    for r, t in enumerate(rec.traces):
        assert t.prompt_ids.tolist() == rec.traces[2 * (r // 2)].prompt_ids.tolist()  # two sequences per prompt
        s, h = teacher_forced(lively_net, t, 1.0)
        assert np.abs(s - t.surprisal).max() <= TOL and np.abs(h - t.entropy).max() <= TOL
        assert t.decoding["strategy"] == "beam_search" and "teacher-forced" in t.decoding["recorded_logits"]
    assert [t.id for t in rec.traces] == [str(i) for i in range(6)]


def test_the_streaming_hook_sees_each_step_and_can_stop(
    lively_net: Any, tokenizer: Any, inputs: dict[str, Any]
) -> None:
    steps: list[tuple[list[int], list[int], Any, Any]] = []

    def on_step(rows: Any, tokens: Any, s: Any, h: Any) -> Any:
        steps.append((rows.tolist(), tokens.tolist(), s.copy(), h.copy()))
        return rows == 1  # end the second answer after its first token

    with record(lively_net, tokenizer, on_step=on_step) as rec:
        lively_net.generate(**inputs, max_new_tokens=5, pad_token_id=tokenizer.eos_token_id)
    a, b, c = rec.traces
    assert b.length == 1 and b.stop_reason == "stopped" and a.length == c.length == 5
    assert steps[0][0] == [0, 1, 2] and all(1 not in rows for rows, *_ in steps[1:])
    seen_s = np.array([st[2][st[0].index(0)] for st in steps])
    np.testing.assert_array_equal(seen_s, a.surprisal)  # the streamed numbers are the trace's


def test_what_recording_refuses(lively_net: Any, tokenizer: Any, inputs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="distribution must be one of temperature, sampled"):
        record(lively_net, tokenizer, distribution="truncated")
    with pytest.raises(ValueError, match="top_logprobs must be at most the model's vocabulary of"):
        record(lively_net, tokenizer, top_logprobs=10**9)  # refused before torch's "selected index k out of range"
    for tau in (float("inf"), 1e-30):
        with pytest.raises(ValueError, match=r"temperature must be a finite number in \[0.01, 100\]"):
            with record(lively_net, tokenizer):
                lively_net.generate(**inputs, max_new_tokens=2, do_sample=True, temperature=tau)
    with pytest.raises(BackendUnsupportedError, match="num_beams=1"):
        Recording(lively_net, tokenizer, on_step=lambda *a: None).generate(**inputs, num_beams=2, max_new_tokens=2)
    with pytest.raises(BackendUnsupportedError, match="typical_p"):
        sampling_warpers({"typical_p": 0.5, "epsilon_cutoff": 0.0, "eta_cutoff": 0.0})
    with pytest.raises(BackendUnsupportedError, match="input_ids"):
        Recording(lively_net, tokenizer).generate(inputs_embeds=torch.zeros((1, 2, 64)), max_new_tokens=2)
    with record(lively_net, tokenizer) as outer, record(lively_net, tokenizer) as inner:
        lively_net.generate(**inputs, max_new_tokens=2, pad_token_id=tokenizer.eos_token_id)
    assert len(inner.traces) == len(outer.traces) == 3 and "generate" not in vars(lively_net)  # both record it
    for a, b in zip(inner.traces, outer.traces, strict=True):
        np.testing.assert_array_equal(a.surprisal, b.surprisal)
