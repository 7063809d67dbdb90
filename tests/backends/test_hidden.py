"""Hidden-state summaries: what generation records equals a teacher-forced forward pass of the same tokens."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from tracecal.backends.answers import check_answer_args, why_not
from tracecal.backends.base import BackendUnsupportedError
from tracecal.backends.hidden import decoder_layers, resolve_layers
from tracecal.backends.registry import HIDDEN_STATES, get_backend
from tracecal.errors import ValidationError

SAMPLED: dict[str, Any] = {"do_sample": True, "seed": 0}
PROMPTS = ["What is 2 + 2?", "Name a colour.", "Say something long about the sea and the sky", "Hi"]


@pytest.fixture(scope="module")
def deep_model(tokenizer: Any) -> Any:
    """A random-weight Llama with 4 layers (so "auto" reads layers 1, 2, 3, all before the final norm), fp32."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from tracecal.backends.hf import HFModel

    torch.manual_seed(1)
    cfg = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True,
    )
    net = LlamaForCausalLM(cfg).eval()  # answers are sampled: varied tokens (greedy repeats one token here)
    return HFModel(net, tokenizer, model_id="tiny-deep-llama", batch_size=3)


def reference(model: Any, prompt_ids: np.ndarray, answer_ids: np.ndarray, layers: tuple[int, ...]) -> np.ndarray:
    """The summary from transformers' own ``output_hidden_states`` of one unpadded forward pass."""
    ids = torch.tensor([[*prompt_ids.tolist(), *answer_ids.tolist()]])
    with torch.no_grad():
        hs = model.model(ids, output_hidden_states=True).hidden_states
    L, T = len(prompt_ids), len(answer_ids)
    first = np.stack([hs[ell][0, L - 1].numpy() for ell in layers])
    mean = np.stack([hs[ell][0, L - 1 : L - 1 + T].mean(0).numpy() for ell in layers]) if T else first
    return np.stack([mean, first])


@pytest.mark.parametrize("cut", [False, True])
def test_generation_records_what_a_teacher_forced_pass_gives(deep_model: Any, cut: bool) -> None:
    stops: tuple[str, ...] = ()
    if cut:  # a stop string inside one of the answers (the mean must stop where the trace is cut)
        text = deep_model.generate(PROMPTS, max_new_tokens=12, **SAMPLED)[0].text.strip()
        stops = (text[len(text) // 2],)
    traces = deep_model.generate(PROMPTS, max_new_tokens=12, stop_strings=stops, hidden_layers="auto", **SAMPLED)
    layers = resolve_layers("auto", 4)
    assert layers == (1, 2, 3)
    reasons = {t.stop_reason for t in traces}
    assert ("stop_string" in reasons) == bool(stops)
    for t in traces:
        assert t.hidden is not None and t.hidden.shape == (2, 3, 64) and t.hidden.dtype == np.float32
        want = reference(deep_model, t.prompt_ids, t.token_ids, layers)
        np.testing.assert_allclose(t.hidden, want, atol=1e-4, rtol=0)
    assert any(t.length > 1 for t in traces)  # a mean over several states was checked
    forced = deep_model.trace_answers(PROMPTS, [t.token_ids for t in traces], hidden_layers="auto")
    for t, f in zip(traces, forced, strict=True):
        np.testing.assert_allclose(f.hidden, t.hidden, atol=1e-4, rtol=0)


def test_recording_leaves_generation_unchanged_and_is_off_by_default(deep_model: Any) -> None:
    hooks = [len(layer._forward_hooks) for layer in decoder_layers(deep_model.model)]
    plain = deep_model.generate(PROMPTS, max_new_tokens=8, **SAMPLED)
    with_states = deep_model.generate(PROMPTS, max_new_tokens=8, hidden_layers=[2], **SAMPLED)
    assert all(t.hidden is None for t in plain)
    for a, b in zip(plain, with_states, strict=True):
        np.testing.assert_array_equal(a.token_ids, b.token_ids)
        np.testing.assert_array_equal(a.surprisal, b.surprisal)
        assert b.hidden is not None and b.hidden.shape == (2, 1, 64)
    assert [len(layer._forward_hooks) for layer in decoder_layers(deep_model.model)] == hooks  # ours removed


def test_an_empty_answer_summarises_the_state_before_it(deep_model: Any) -> None:
    (t,) = deep_model.trace_answers(["Hi"], [[]], hidden_layers=[1, 3])
    assert t.length == 0
    np.testing.assert_array_equal(t.hidden[0], t.hidden[1])
    np.testing.assert_allclose(t.hidden, reference(deep_model, t.prompt_ids, t.token_ids, (1, 3)), atol=1e-4)


@pytest.mark.parametrize("bad", ["all", [], [0], [5], [2, 2]])
def test_layers_are_checked(bad: Any) -> None:
    with pytest.raises(ValidationError, match="hidden_layers"):
        resolve_layers(bad, 4)


def test_auto_layers_spread_over_depth() -> None:
    assert resolve_layers("auto", 28) == (7, 14, 21)
    assert resolve_layers("auto", 30) == (8, 15, 22)
    assert resolve_layers("auto", 1) == (1,)


@pytest.mark.parametrize("pad", ["eos", "other"])
def test_with_a_step_hook_an_ended_answer_is_summarised_over_the_tokens_it_keeps(
    deep_model: Any, pad: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gateway's streaming and early stopping (`on_step`) record the summaries in the same pass: an answer the
    hook ends after n tokens has the teacher-forced summary of those n tokens; the others are as without a hook.
    ``pad="other"``: the rows the hook ended are padded with a token that is no stop token (so only the hook's
    ``kept`` count can end their summaries)."""
    if pad == "other":
        monkeypatch.setattr(deep_model, "pad_id", next(i for i in range(3, 100) if i not in deep_model.stop_ids))
    ends = {0: 3, 2: 5}  # prompt row -> the step after which the hook ends it

    def hook(rows: np.ndarray, tokens: np.ndarray, s: np.ndarray, h: np.ndarray) -> list[bool]:
        seen.update({int(r): seen.get(int(r), 0) + 1 for r in rows})
        return [seen[int(r)] == ends.get(int(r)) for r in rows]

    seen: dict[int, int] = {}
    kw: dict[str, Any] = {"max_new_tokens": 12, "hidden_layers": "auto", **SAMPLED}
    hooked = deep_model.generate(PROMPTS, on_step=hook, **kw)
    plain = deep_model.generate(PROMPTS, **kw)
    layers = resolve_layers("auto", 4)
    for i, t in enumerate(hooked):
        assert t.stop_reason == "stopped" if i in ends else t.stop_reason != "stopped"
        assert t.length == ends.get(i, plain[i].length)
        np.testing.assert_allclose(t.hidden, reference(deep_model, t.prompt_ids, t.token_ids, layers), atol=1e-4)
        if i not in ends:
            np.testing.assert_allclose(t.hidden, plain[i].hidden, atol=1e-5)


@pytest.mark.parametrize("backend", ["llamacpp", "http"])
def test_backends_without_hidden_states_refuse_them(backend: str) -> None:
    spec = get_backend(backend)
    assert not spec.can(HIDDEN_STATES) and get_backend("hf").can(HIDDEN_STATES)
    model: Any = object.__new__(type("Fake", (), {"backend_name": backend}))
    why = why_not(model, HIDDEN_STATES)
    assert why == spec.why_not(HIDDEN_STATES) and "hidden states" in why
    with pytest.raises(BackendUnsupportedError, match="hidden_layers: .*hidden states.*--backend hf"):
        check_answer_args(["q"], ["a"], {"hidden_layers": "auto"}, 4, hidden=why)
    assert check_answer_args(["q"], ["a"], {}, 4, hidden=why).answers == ["a"]  # without it: as before
