"""The backend contract, for every registered backend: a loader and a declaration that only uses known capabilities
and load keywords; a capability claimed is honoured (on the tiny random model for the HF backend, on the default
GGUF for llama.cpp where llama-cpp-python is installed), one not claimed raises `BackendUnsupportedError`. A toy
backend registered at test time runs ``evaluate`` on a task, the passes it cannot compute reported as not run."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.common.toys import ToyBackend
from tracecal.backends import registry as caps
from tracecal.backends.base import Backend, BackendUnsupportedError, LocalBackend
from tracecal.backends.registry import CAPABILITIES, REGISTRY, backend_of, get_backend, register_backend
from tracecal.evaluation.config import ConfigError, EvalConfig

LOAD_OPTIONS = {"batch_size", "dtype", "n_threads", "threads"}
"""The `load_model` keywords the harness may pass a backend (`tracecal.evaluation.scheduler.model_options`)."""
PROMPTS = ["What is the capital of France?", "Name a colour."]


def _beams(m: Any) -> None:
    b = m.beam_scores(PROMPTS[:1], num_beams=2, max_new_tokens=2)
    assert np.asarray(b).shape == (1, 2) and np.all(np.diff(b, axis=1) <= 0)  # best first


def _exact(m: Any) -> None:
    assert {t.entropy_kind for t in m.generate(PROMPTS[:1], max_new_tokens=2)} == {"exact"}


def _gradients(m: Any) -> None:
    import torch

    ids = torch.tensor([m.encode_prompt(PROMPTS[0])])
    m.model.zero_grad()
    m.model(ids, labels=ids).loss.backward()
    assert any(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in m.model.parameters())
    m.model.zero_grad()


def _hidden(m: Any) -> None:
    import torch

    with torch.no_grad():
        out = m.model(torch.tensor([m.encode_prompt(PROMPTS[0])]), output_hidden_states=True)
    assert len(out.hidden_states) == m.model.config.num_hidden_layers + 1


def _batching(m: Any) -> None:
    out = m.generate([*PROMPTS, PROMPTS[0]], max_new_tokens=2, batch_size=2, ids=["a", "b", "c"])
    assert [t.id for t in out] == ["a", "b", "c"]


def _forced(m: Any) -> None:
    (t,) = m.trace_answers(PROMPTS[:1], ["Paris"])
    assert t.length > 0 and np.all(np.isfinite(t.surprisal))


def _next_token(m: Any) -> None:
    lp = m.next_token_logprobs([m.encode_prompt(PROMPTS[0])], [1, 2])
    assert np.asarray(lp).shape == (1, 2) and np.all(np.asarray(lp) <= 0)


def _in_process(m: Any) -> None:
    assert isinstance(m, LocalBackend) or hasattr(m, "llm")


def _dtype(m: Any) -> None:
    assert "dtype" in get_backend(backend_of(m) or "").options  # the harness passes --dtype to its loader


def _sampling(m: Any) -> None:
    (one,) = m.sample_answers(PROMPTS[:1], 3, max_new_tokens=2, seeds=[0])
    assert len(one.traces) == 3 and all(np.all(np.isfinite(t.surprisal)) for t in one.traces)


HONOURED: dict[str, Callable[[Any], None]] = {
    caps.BEAMS: _beams,
    caps.EXACT_ENTROPY: _exact,
    caps.GRADIENTS: _gradients,
    caps.HIDDEN_STATES: _hidden,
    caps.BATCHING: _batching,
    caps.TEACHER_FORCED: _forced,
    caps.NEXT_TOKEN_LOGPROBS: _next_token,
    caps.IN_PROCESS: _in_process,
    caps.DTYPE: _dtype,
    caps.SAMPLING: _sampling,
}
"""How each capability is seen to hold on a loaded model (every capability has one)."""
REFUSED: dict[str, Callable[[Any], Any]] = {
    caps.BEAMS: lambda m: m.beam_scores(PROMPTS[:1], num_beams=2, max_new_tokens=2),
    caps.NEXT_TOKEN_LOGPROBS: lambda m: m.next_token_logprobs([[1, 2]], [1]),
}
"""How a backend that does not claim a capability refuses it (where a method stands for it)."""


def test_every_capability_has_a_check() -> None:
    assert set(HONOURED) == set(CAPABILITIES)


@pytest.mark.parametrize("name", list(REGISTRY))
def test_a_backend_declares_a_loader_and_known_capabilities(name: str) -> None:
    spec = REGISTRY[name]
    assert spec.name == name and callable(spec.loader) and spec.label
    assert spec.capabilities <= set(CAPABILITIES) and not (set(spec.lacks) & spec.capabilities)
    assert spec.options <= LOAD_OPTIONS and "batch_size" in spec.options
    assert spec.can(caps.IN_PROCESS) or spec.claims is not None, "a server must be reachable through backend='auto'"
    for cap in set(CAPABILITIES) - spec.capabilities:
        assert spec.why_not(cap)


@pytest.fixture(scope="module")
def loaded(request: pytest.FixtureRequest, tokenizer: Any) -> Iterator[dict[str, Any]]:
    """The backends this machine can load cheaply, by name: HF (the tiny random model), HTTP (a client of a server that
    is never asked: what it refuses, it refuses before any request) and llama.cpp where it is installed."""
    from tracecal.backends import load_model

    out: dict[str, Any] = {
        "hf": request.getfixturevalue("tiny_model"),
        "http": load_model("http://127.0.0.1:9/v1", model="m", max_retries=0),
    }
    try:
        import llama_cpp  # noqa: F401

        out["llamacpp"] = load_model(backend="llamacpp", n_threads=1, tokenizer=tokenizer)
    except ImportError:
        pass
    yield out


@pytest.mark.parametrize(("name", "capability"), [(n, c) for n in REGISTRY for c in CAPABILITIES])
def test_a_claimed_capability_is_honoured_and_another_refused(name: str, capability: str, loaded: Any) -> None:
    spec = REGISTRY[name]
    if name not in loaded:
        pytest.skip(f"the {name} backend does not load on this machine")
    model = loaded[name]
    assert isinstance(model, Backend) and backend_of(model) == name
    if spec.can(capability):
        if name == "http" and capability in (caps.BATCHING, caps.TEACHER_FORCED):
            pytest.skip("needs a server")
        HONOURED[capability](model)
    elif capability in REFUSED:
        with pytest.raises(BackendUnsupportedError):
            REFUSED[capability](model)


@pytest.fixture()
def toy() -> Iterator[list[ToyBackend]]:
    """A backend registered from outside the library for one test: it computes traces, no beams, no P(True)."""
    made: list[ToyBackend] = []

    def load(ref: Any, batch_size: int = 4) -> ToyBackend:
        made.append(ToyBackend(str(ref), batch_size))
        return made[-1]

    register_backend("toy", load, {caps.BATCHING, caps.IN_PROCESS}, "a toy backend", options={"batch_size"})
    yield made
    del REGISTRY["toy"]


@pytest.mark.filterwarnings("ignore::tracecal.stats.metrics.SingleClassWarning")  # the toy answers are wrong
def test_a_toy_backend_registered_at_test_time_runs_evaluate(toy: list[ToyBackend], tmp_path: Path) -> None:
    from tracecal.evaluation.run import evaluate

    settings = dict(limit=8, n_seeds=3, shard_size=4, max_new_tokens=6, batch_size=3, cal_frac=0.5)
    cfg = EvalConfig(
        ["triviaqa"], model="toy-1", backend="toy", estimators=["trace", "beam_ratio", "p_true"], **settings
    )
    res = evaluate(tmp_path / "run", cfg)
    assert len(toy) == 1 and toy[0].calls == 8 / 4 and res is not None  # one load, one call per shard
    info = res.tasks["triviaqa"]
    assert info["n"] == 8 and set(info["not_run"]) == {"beam_ratio", "p_true"}
    assert info["not_run_reasons"] == {
        "beam_ratio": "the toy backend has no beam search scores (beam_scores)",
        "p_true": "the toy backend has no log-probs of given next tokens (next_token_logprobs)",
    }
    stored = json.loads((tmp_path / "run" / "config.json").read_text())
    assert stored["config"]["backend"] == "toy" and "backend" not in stored["identity"]  # not an in_identity backend
    with pytest.raises(ConfigError, match="dtype: the toy backend has no choice of weight dtype"):
        EvalConfig(["triviaqa"], backend="toy", dtype="bfloat16").validate()
    with pytest.raises(ConfigError, match="backend must be one of auto, hf, llamacpp, toy, got 'onnx'"):
        EvalConfig(["triviaqa"], backend="onnx").validate()
