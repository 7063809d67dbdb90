"""`tracecal.passes.builtin`: the generation, self-evaluation and beam passes on a fake model."""

from __future__ import annotations

from typing import Any

import numpy as np

from tracecal.passes.builtin import BeamPass, GenerationPass
from tracecal.tasks.example import Example
from tracecal.traces.trace import Trace


class FakeTask:
    name = "toy"
    max_new_tokens = 24

    def prompt(self, ex: Example, chat: bool) -> str:
        return f"Q: {ex.question}"

    def stop_strings(self, chat: bool) -> tuple[str, ...]:
        return ("\n",)


class FakeModel:
    chat = False

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def generate(self, prompts: list[str], **kw: Any) -> list[Trace]:
        self.calls.append({"prompts": prompts, **kw})
        return [Trace(text="a", token_ids=[1], surprisal=[0.1], entropy=[0.2], id=i) for i in kw["ids"]]

    def beam_scores(self, prompts: list[str], num_beams: int, max_new_tokens: int) -> np.ndarray:
        self.calls.append({"beam": max_new_tokens})
        return np.zeros((len(prompts), num_beams))


def test_generation_pass_generates_with_the_task_settings() -> None:
    m, ex = FakeModel(), [Example(id="q1", task="toy", question="2+2?", golds=["4"])]
    traces = GenerationPass().compute(m, FakeTask(), ex, [])
    assert traces[0].id == "q1" and traces[0].meta["task"] == "toy"
    assert m.calls[0]["max_new_tokens"] == 24 and m.calls[0]["stop_strings"] == ("\n",)
    assert GenerationPass().to_table(["q1"], traces).num_rows == 1


def test_beam_pass_is_capped() -> None:
    m, ex = FakeModel(), [Example(id="q1", task="toy", question="2+2?", golds=["4"])]
    out = BeamPass(num_beams=3, max_new_tokens=100, cap=8).compute(m, FakeTask(), ex, [])
    assert out["beam"].shape == (1, 3) and m.calls[-1]["beam"] == 8
