"""Fixtures of the backend tests: ``lively_net``, a tiny random Llama whose greedy answers vary.

The session's ``tiny_model`` ties its input and output embeddings (scaled ×20), so its greedy answers repeat one
token with H_t ≈ 0: right for plumbing, too flat to show that two computations of s_t and H_t agree position by
position. ``lively_net`` unties them and scales the output layer instead: answers of distinct tokens, H_t of a few
nats that change from step to step (built with plain transformers calls, as a user loads a model).
"""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="session")
def lively_net(tiny_model: Any) -> Any:
    """A random-weight Llama of ``tiny_model``'s shape (2 layers, hidden 64) with an untied output layer ×20,
    deterministic (seed 0), fp32."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig.from_dict(tiny_model.model.config.to_dict() | {"tie_word_embeddings": False})
    net = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        net.lm_head.weight.mul_(20.0)
    return net


@pytest.fixture(scope="session")
def lively_model(lively_net: Any, tokenizer: Any) -> Any:
    """``lively_net`` behind the HF backend."""
    from tracecal.backends.hf import HFModel

    return HFModel(lively_net, tokenizer, model_id="lively-random-llama", batch_size=8)
