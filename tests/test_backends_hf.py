"""The HF recording backend on the real default model (SmolLM2-135M-Instruct, offline)."""

from __future__ import annotations

import numpy as np
import pytest

import tracecal
from tracecal.backends.base import PromptTooLongError

PROMPTS = [
    "What is the capital of France?",
    "Name a colour.",
    "Explain in one sentence why the sky looks blue during the day, and mention Rayleigh scattering.",
    "Who wrote the play Romeo and Juliet? Answer with the name only.",
]


@pytest.fixture(scope="module")
def traces(model):  # type: ignore[no-untyped-def]
    return model.generate(PROMPTS, max_new_tokens=20, batch_size=4)


def test_recorded_trace_equals_teacher_forced_pass(model, traces) -> None:  # type: ignore[no-untyped-def]
    lengths = {len(t.prompt_ids) for t in traces}
    assert len(lengths) > 1, "prompts must have different lengths so that left padding is exercised"
    worst = 0.0
    for t in traces:
        assert t.length > 0
        s, h = model.teacher_forced(t.prompt_ids, t.token_ids)
        worst = max(worst, np.abs(s - t.surprisal).max(), np.abs(h - t.entropy).max())
        # an off-by-one in positions is large: the check is able to fail
        if t.length > 2:
            assert np.abs(h[1:] - t.entropy[:-1]).max() >= 0.1
    assert worst <= 2e-3, f"max |recorded − teacher-forced| = {worst:.2e} nats"


def test_trace_fields(model, traces) -> None:  # type: ignore[no-untyped-def]
    t = traces[0]
    assert t.token_ids.dtype == np.int64 and t.surprisal.dtype == np.float64 and t.entropy.dtype == np.float64
    assert t.entropy_kind == "exact" and t.model_id == "smollm2-135m-instruct"
    assert "".join(t.token_strings) == t.text
    assert all(t.text[o:].startswith(s) for o, s in zip(t.offsets, t.token_strings, strict=True))
    assert not np.isin(t.token_ids, model.stop_ids).any(), "stop tokens are not part of the answer"
    assert t.stop_reason in ("eos", "length")
    assert np.all(t.surprisal >= 0) and np.all(t.entropy >= 0)
    assert np.all(t.entropy <= np.log(model.vocab_size) + 1e-6)
    # prompt_ids are exactly what the model saw: the chat template
    assert model.tokenizer.decode(t.prompt_ids).startswith("<|im_start|>")
    conf = tracecal.trace_confidence(traces)
    assert conf.shape == (4,) and np.all((conf > 0) & (conf <= 1))


def test_batching_does_not_change_greedy_answers(model, traces) -> None:  # type: ignore[no-untyped-def]
    single = model.generate(PROMPTS[:2], max_new_tokens=20, batch_size=1)
    for a, b in zip(single, traces[:2], strict=True):
        assert a.text == b.text
        np.testing.assert_allclose(a.entropy, b.entropy, atol=2e-3)


def test_prompt_ids_rerun_reproduces_answer(model, traces) -> None:  # type: ignore[no-untyped-def]
    (again,) = model.generate([{"prompt_ids": traces[1].prompt_ids.tolist()}], max_new_tokens=20)
    assert again.text == traces[1].text
    np.testing.assert_array_equal(again.prompt_ids, traces[1].prompt_ids)


def test_length_stop_and_topk(model) -> None:  # type: ignore[no-untyped-def]
    (t,) = model.generate(["Count from one to one hundred in words."], max_new_tokens=5, top_logprobs=3)
    assert t.length == 5 and t.stop_reason == "length"
    assert t.topk_ids.shape == (5, 3)
    # greedy: the chosen token is the top-1 alternative and its log-prob is −s_t
    np.testing.assert_array_equal(t.topk_ids[:, 0], t.token_ids)
    np.testing.assert_allclose(-t.topk_logprobs[:, 0], t.surprisal, atol=1e-5)


def test_zero_token_answer(model) -> None:  # type: ignore[no-untyped-def]
    (first,) = model.generate(["Name a colour."], max_new_tokens=3)
    saved = model.stop_ids
    model.stop_ids = sorted({*saved, int(first.token_ids[0])})  # the first token now ends the answer
    try:
        (t,) = model.generate(["Name a colour."], max_new_tokens=3)
    finally:
        model.stop_ids = saved
    assert t.length == 0 and t.text == "" and t.stop_reason == "eos" and t.is_empty
    assert np.isnan(tracecal.trace_confidence([t])[0])  # documented: no trace, NaN confidence


def test_bad_inputs(model) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="empty prompt list"):
        model.generate([])
    with pytest.raises(PromptTooLongError, match="context"):
        model.generate(["word " * (model.context_length + 10)], max_new_tokens=4)
    with pytest.raises(ValueError, match="max_new_tokens"):
        model.generate(["hi"], max_new_tokens=0)


def test_plain_prompt_for_base_mode(model) -> None:  # type: ignore[no-untyped-def]
    model.chat = False
    try:
        (t,) = model.generate(["The capital of Italy is"], max_new_tokens=12, stop_strings=["\n"])
    finally:
        model.chat = True
    assert not model.tokenizer.decode(t.prompt_ids).startswith("<|im_start|>")
    assert "\n" not in t.text and t.length > 0 and t.stop_reason == "stop_string"
    s, h = model.teacher_forced(t.prompt_ids, t.token_ids)
    assert np.abs(h - t.entropy).max() <= 2e-3


def test_beam_scores_shared_prefill_equals_plain_beam_search(model) -> None:  # type: ignore[no-untyped-def]
    prompts = ["Who wrote Hamlet?", "What is the capital of Peru? Answer in one word, please."]
    plain = model.beam_scores(prompts, num_beams=3, max_new_tokens=6, shared_prefill=False)
    shared = model.beam_scores(prompts, num_beams=3, max_new_tokens=6, shared_prefill=True)
    assert plain.shape == (2, 3) and np.all(np.isfinite(plain))
    assert np.all(np.diff(plain, axis=1) <= 0), "best beam first"
    assert np.abs(plain - shared).max() <= 1e-4
