"""The HF recording backend.

Plumbing (trace fields, batching, stop handling, top-k, beams, input validation) runs on ``tiny_model`` (a
random-weight 2-layer Llama with the real tokenizer); the recorded-equals-teacher-forced check, where a real
distribution matters, runs on the real default model (SmolLM2-135M-Instruct, offline).
"""

from __future__ import annotations

import numpy as np
import pytest

import tracecal
from tracecal.backends import Backend, HFModel, LocalBackend
from tracecal.backends.arguments import PromptTooLongError

PROMPTS = [
    "What is the capital of France?",
    "Name a colour.",
    "Explain in one sentence why the sky looks blue during the day, and mention Rayleigh scattering.",
    "Who wrote the play Romeo and Juliet? Answer with the name only.",
]


@pytest.fixture(scope="module")
def tiny_traces(tiny_model):  # type: ignore[no-untyped-def]
    return tiny_model.generate(PROMPTS, max_new_tokens=12, batch_size=4)


def test_recorded_trace_equals_teacher_forced_pass(model) -> None:  # type: ignore[no-untyped-def]
    traces = model.generate(PROMPTS, max_new_tokens=20, batch_size=4)
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
    assert traces[0].model_id == "smollm2-135m-instruct"
    assert model.tokenizer.decode(traces[0].prompt_ids).startswith("<|im_start|>")  # the chat template


def test_protocols(tiny_model) -> None:  # type: ignore[no-untyped-def]
    assert isinstance(tiny_model, Backend) and isinstance(tiny_model, LocalBackend)
    assert isinstance(tiny_model, HFModel)


def test_trace_fields(tiny_model, tiny_traces) -> None:  # type: ignore[no-untyped-def]
    t = tiny_traces[0]
    assert t.token_ids.dtype == np.int64 and t.surprisal.dtype == np.float64 and t.entropy.dtype == np.float64
    assert t.entropy_kind == "exact" and t.model_id == "tiny-random-llama"
    assert "".join(t.token_strings) == t.text
    assert all(t.text[o:].startswith(s) for o, s in zip(t.offsets, t.token_strings, strict=True))
    assert not np.isin(t.token_ids, tiny_model.stop_ids).any(), "stop tokens are not part of the answer"
    assert t.stop_reason in ("eos", "length") and [x.id for x in tiny_traces] == ["0", "1", "2", "3"]
    assert np.all(t.surprisal >= 0) and np.all(t.entropy >= 0)
    assert np.all(t.entropy <= np.log(tiny_model.vocab_size) + 1e-6)
    assert tiny_model.tokenizer.decode(t.prompt_ids).startswith("<|im_start|>")  # the chat template
    conf = tracecal.trace_confidence(tiny_traces)
    assert conf.shape == (4,) and np.all((conf > 0) & (conf <= 1))


def test_tiny_recorded_equals_teacher_forced(tiny_model, tiny_traces) -> None:  # type: ignore[no-untyped-def]
    for t in tiny_traces:  # left padded in one batch of four prompts of different lengths
        s, h = tiny_model.teacher_forced(t.prompt_ids, t.token_ids)
        assert np.abs(s - t.surprisal).max() <= 1e-4 and np.abs(h - t.entropy).max() <= 1e-4


def test_batching_does_not_change_greedy_answers(tiny_model, tiny_traces) -> None:  # type: ignore[no-untyped-def]
    single = tiny_model.generate(PROMPTS[:2], max_new_tokens=12, batch_size=1)
    for a, b in zip(single, tiny_traces[:2], strict=True):
        assert a.text == b.text
        np.testing.assert_allclose(a.entropy, b.entropy, atol=2e-3)


def test_prompt_ids_rerun_reproduces_answer(tiny_model, tiny_traces) -> None:  # type: ignore[no-untyped-def]
    (again,) = tiny_model.generate([{"prompt_ids": tiny_traces[1].prompt_ids.tolist()}], max_new_tokens=12)
    assert again.text == tiny_traces[1].text
    np.testing.assert_array_equal(again.prompt_ids, tiny_traces[1].prompt_ids)


def test_length_stop_and_topk(tiny_model) -> None:  # type: ignore[no-untyped-def]
    saved = tiny_model.stop_ids
    tiny_model.stop_ids = [tiny_model.pad_id]  # no end-of-turn: the answer runs to the length limit
    try:
        (t,) = tiny_model.generate(["Count from one to one hundred in words."], max_new_tokens=5, top_logprobs=3)
    finally:
        tiny_model.stop_ids = saved
    assert t.length == 5 and t.stop_reason == "length"
    assert t.topk_ids.shape == (5, 3)
    # greedy: the chosen token is the top-1 alternative and its log-prob is −s_t
    np.testing.assert_array_equal(t.topk_ids[:, 0], t.token_ids)
    np.testing.assert_allclose(-t.topk_logprobs[:, 0], t.surprisal, atol=1e-5)


def test_zero_token_answer(tiny_model) -> None:  # type: ignore[no-untyped-def]
    (first,) = tiny_model.generate(["Name a colour."], max_new_tokens=3)
    saved = tiny_model.stop_ids
    tiny_model.stop_ids = sorted({*saved, int(first.token_ids[0])})  # the first token now ends the answer
    try:
        (t,) = tiny_model.generate(["Name a colour."], max_new_tokens=3)
    finally:
        tiny_model.stop_ids = saved
    assert t.length == 0 and t.text == "" and t.stop_reason == "eos" and t.is_empty
    assert np.isnan(tracecal.trace_confidence([t])[0])  # documented: no trace, NaN confidence


def test_plain_prompt_for_base_mode_and_stop_strings(tiny_model) -> None:  # type: ignore[no-untyped-def]
    tiny_model.chat = False
    try:
        (full,) = tiny_model.generate(["The capital of Italy is"], max_new_tokens=8)
        stop = full.token_strings[0] + full.token_strings[1]  # completed by the second token at the latest
        (t,) = tiny_model.generate(["The capital of Italy is"], max_new_tokens=8, stop_strings=[stop])
    finally:
        tiny_model.chat = True
    assert not tiny_model.tokenizer.decode(t.prompt_ids).startswith("<|im_start|>")
    assert t.stop_reason == "stop_string" and stop not in t.text and t.length <= 1
    assert full.text.startswith(t.text) and t.decoding["stop_strings"] == [stop]
    s, h = tiny_model.teacher_forced(full.prompt_ids, full.token_ids)
    assert np.abs(h - full.entropy).max() <= 1e-4


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_new_tokens": 0}, r"max_new_tokens must be a positive integer \(≥ 1\), got 0"),
        ({"max_new_tokens": "8"}, r"max_new_tokens must be a positive integer, got '8' \(str\)"),
        ({"max_new_tokens": 2.5}, r"max_new_tokens must be a positive integer, got 2.5 \(float\)"),
        ({"max_new_tokens": True}, r"max_new_tokens must be a positive integer, got True \(bool\)"),
        ({"batch_size": 0}, r"batch_size must be a positive integer \(≥ 1\), got 0"),
        ({"batch_size": 1.0}, r"batch_size must be a positive integer, got 1.0 \(float\)"),
        ({"top_logprobs": -1}, r"top_logprobs must be a positive integer"),
        ({"ids": ["a", "b"]}, r"ids must have one entry per prompt: 2 ids for 1 prompts"),
    ],
)
def test_generate_rejects_bad_arguments(tiny_model, kwargs, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=message):
        tiny_model.generate(["hi"], **kwargs)


def test_bad_prompts_and_beam_arguments(tiny_model) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="prompts is empty"):
        tiny_model.generate([])
    with pytest.raises(PromptTooLongError, match="context"):
        tiny_model.generate(["word " * (tiny_model.context_length + 10)], max_new_tokens=4)
    with pytest.raises(ValueError, match=r"prompt 1, message 0: expected \{'role': str, 'content': str\}"):
        tiny_model.generate(["ok", [{"role": "user"}]])
    with pytest.raises(ValueError, match="prompt 0 has type int"):
        tiny_model.generate([3])
    with pytest.raises(ValueError, match="'prompt_ids' must be a list of token ids"):
        tiny_model.generate([{"prompt_ids": "1 2 3"}])
    with pytest.raises(ValueError, match="num_beams must be a positive integer"):
        tiny_model.beam_scores(["hi"], num_beams=0)
    with pytest.raises(ValueError, match=r"max_new_tokens must be a positive integer, got '4' \(str\)"):
        tiny_model.beam_scores(["hi"], max_new_tokens="4")
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        tiny_model.next_token_logprobs([[1, 2]], [3], batch_size=-2)
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        HFModel(tiny_model.model, tiny_model.tokenizer, model_id="x", batch_size=0)


def test_load_rejects_an_unknown_dtype_before_loading() -> None:
    with pytest.raises(ValueError, match="unknown dtype 'float8': use auto, float32, bfloat16, float16"):
        HFModel.load(dtype="float8")


@pytest.fixture(scope="module")
def scripted(tokenizer):
    """A random-weight Llama whose greedy output is forced to a script of token ids (one per forward call)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from tracecal.backends.hf import HFModel

    class Scripted(LlamaForCausalLM):
        script: list[int] = []
        calls = 0

        def forward(self, *args, **kwargs):
            out = super().forward(*args, **kwargs)
            out.logits[:, -1, self.script[min(self.calls, len(self.script) - 1)]] += 1e4
            self.calls += 1
            return out

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=512,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True,
    )
    return HFModel(Scripted(cfg).eval(), tokenizer, model_id="scripted", chat=False, batch_size=1)


def run_script(scripted, tokenizer, pieces: list[str], stops: tuple[str, ...] = ("\n",), max_new_tokens: int = 8):
    """Generate once with the scripted model emitting ``pieces`` (each one token), then end-of-sequence."""
    ids = [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(p))[0] for p in pieces]
    assert tokenizer.decode(ids) == "".join(pieces)
    scripted.model.script, scripted.model.calls = [*ids, tokenizer.eos_token_id], 0
    (t,) = scripted.generate(["Question: x\nAnswer:"], max_new_tokens=max_new_tokens, stop_strings=stops)
    return t


def test_hf_backend_keeps_an_answer_that_opens_with_a_newline(scripted, tokenizer) -> None:
    t = run_script(scripted, tokenizer, ["\n", "Paris", "\n", "Question"])
    assert (t.length, t.text, t.stop_reason) == (2, "\nParis", "stop_string")  # was 0 tokens, "" before the fix
    assert np.all(np.isfinite(t.surprisal)) and t.token_strings == ["\n", "Paris"]
    t = run_script(scripted, tokenizer, ["Paris", "\n", "Question"])
    assert (t.length, t.text, t.stop_reason) == (1, "Paris", "stop_string")  # a newline after content still stops


def test_hf_backend_whitespace_only_answer_runs_to_its_end(scripted, tokenizer) -> None:
    t = run_script(scripted, tokenizer, ["\n", "\n"])
    assert (t.text, t.stop_reason) == ("\n\n", "eos")


def test_load_tokenizer_resolves_names_like_load_and_says_when_it_cannot(tokenizer, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`load_tokenizer` (what ``serve --upstream URL --tokenizer NAME`` renders prompts with) resolves a named model
    as `HFModel.load` does, without the weights; a name that resolves to nothing is a `ModelLoadError`."""
    from tracecal.backends.hf import ModelLoadError, load_tokenizer

    tok = load_tokenizer("smollm2-135m-instruct")
    text = "Hi <|im_end|> there"
    assert tok(text)["input_ids"] == tokenizer(text)["input_ids"] and tok.chat_template == tokenizer.chat_template
    with pytest.raises(ModelLoadError, match="could not load the tokenizer of .*nothing"):
        load_tokenizer(str(tmp_path / "nothing"))


def test_sample_answers_share_the_prompt_record_the_sampled_distribution_and_repeat_by_seed(tiny_model) -> None:  # type: ignore[no-untyped-def]
    """K samples per prompt in one batch (shared prefill): each trace is the teacher-forced trace at the same
    temperature (the distribution it was drawn from), a seed repeats the samples, and the cost is counted."""
    sets = tiny_model.sample_answers(PROMPTS[:2], 6, 5, temperature=3.0, seeds=[11, 12])
    assert [len(s.traces) for s in sets] == [6, 6] and len({t.text for t in sets[0].traces}) > 1
    again = tiny_model.sample_answers(PROMPTS[1:2], 6, 5, temperature=3.0, seeds=[12])[0]
    assert [t.text for t in again.traces] == [t.text for t in sets[1].traces]  # not depending on the prompts before
    forced = tiny_model.trace_answers([PROMPTS[0]] * 6, [t.token_ids for t in sets[0].traces], temperature=3.0)
    for t, f in zip(sets[0].traces, forced, strict=True):
        np.testing.assert_allclose(t.surprisal, f.surprisal, atol=1e-4)
        np.testing.assert_allclose(t.entropy, f.entropy, atol=1e-4)
        assert t.decoding["strategy"] == "sample" and t.decoding["temperature"] == 3.0
    cost = sets[0].cost
    steps = cost["forward_passes"] - 1  # the shared prefill, then one forward pass per step over the 6 rows
    assert cost["decode_tokens"] == 6 * steps and 1 <= steps <= 5
    assert cost["answer_tokens"] == sum(t.length for t in sets[0].traces) <= cost["decode_tokens"]
    assert cost["prefill_tokens"] == len(sets[0].traces[0].prompt_ids) and cost["cpu_seconds"] > 0
    for tau in (0.0, 1e-30, float("inf"), float("nan")):
        with pytest.raises(ValueError, match=r"temperature must be a finite number in \[0.01, 100\], got"):
            tiny_model.sample_answers(["hi"], 2, temperature=tau)
    with pytest.raises(ValueError, match="num_samples must be a positive integer"):
        tiny_model.sample_answers(["hi"], 0)
    with pytest.raises(ValueError, match="seeds must have one entry per prompt"):
        tiny_model.sample_answers(["hi"], 2, seeds=[1, 2])
