"""Tests of the self-evaluation batches (`tracecal.backends.prefill`)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tracecal.backends.prefill import contiguous_head_input, last_logits_only, length_batches, row_major_strides


@settings(max_examples=200, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 3000), max_size=80),
    batch_size=st.integers(1, 40),
    max_tokens=st.integers(1, 20000),
)
def test_length_batches_cover_each_row_once_within_both_bounds(lengths, batch_size, max_tokens):
    batches = length_batches(lengths, batch_size, max_tokens)
    flat = np.concatenate(batches) if batches else np.zeros(0, np.int64)
    assert sorted(flat.tolist()) == list(range(len(lengths)))  # every row once
    assert [lengths[i] for i in flat] == sorted(lengths, reverse=True)  # longest first
    for b in batches:
        assert 1 <= len(b) <= batch_size
        longest = max(lengths[i] for i in b)
        assert len(b) == 1 or len(b) * longest <= max_tokens  # a prompt longer than the budget goes alone


def test_last_logits_only_follows_the_forward_signature():
    class Keeps:
        def forward(self, input_ids, logits_to_keep=0): ...

    class Plain:
        def forward(self, input_ids): ...

    assert last_logits_only(Keeps()) == {"logits_to_keep": 1}
    assert last_logits_only(Plain()) == {}
    assert last_logits_only(object()) == {}


def _tiny_llama(vocab: int = 5000):  # type: ignore[no-untyped-def]
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=False,
    )
    return LlamaForCausalLM(cfg).eval()


def test_frozen_weights_give_the_trainable_models_last_logits_bit_for_bit():
    """Without the hook, frozen weights (a peft model's) took torch's broadcast-and-copy matmul for the strided
    last-position slice: other bits (and, at Qwen's vocabulary, 100–1,000× the time)."""
    import torch

    net = _tiny_llama()
    ids = torch.randint(0, 5000, (8, 30), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        trainable = net(input_ids=ids, logits_to_keep=1).logits
        net.requires_grad_(False)
        unhooked = net(input_ids=ids, logits_to_keep=1).logits
        assert contiguous_head_input(net)
        frozen = net(input_ids=ids, logits_to_keep=1).logits
    assert not torch.equal(unhooked, trainable)  # what the hook is for (fp32, this shape)
    assert torch.equal(frozen, trainable)


def test_contiguous_head_input_hooks_once_and_only_a_head():
    import torch

    net = _tiny_llama()
    seen: list[bool] = []
    assert contiguous_head_input(net) and contiguous_head_input(net)
    assert len(net.lm_head._forward_pre_hooks) == 1  # installed once
    net.lm_head.register_forward_pre_hook(lambda m, args: seen.append(args[0].stride() == (64, 64, 1)))
    with torch.no_grad():
        for rows in (3, 1):  # one row: a "contiguous" view that still has the parent's batch stride
            net(input_ids=torch.zeros(rows, 7, dtype=torch.long), logits_to_keep=1)
    assert seen == [True, True]
    assert not contiguous_head_input(object())  # nothing to hook


def test_the_hf_backend_hooks_its_models_head(tiny_model):  # type: ignore[no-untyped-def]
    assert getattr(tiny_model.model.get_output_embeddings(), "_tracecal_contiguous_input", False)


@given(shape=st.lists(st.integers(0, 5), max_size=4))
def test_row_major_strides_are_a_fresh_tensors(shape):
    import torch

    assert row_major_strides(shape) == torch.empty(shape).stride()
