"""Shared by the SECL tests: the two run configurations, SECL by its one-question-at-a-time definition and a
scripted gate."""

from __future__ import annotations

import numpy as np

from tracecal.secl import (
    GateStep,
    SECLAdapter,
    SECLConfig,
    answer_statistic,
    make_gate,
)
from tracecal.secl.stream import verbal_prompts

ALWAYS = SECLConfig(gate="always", seed=0)
# a detector that fires on the tiny stream: bursts of 2, closed gates in between, batches of 3
DETECTOR = SECLConfig(ph_min_samples=2, ph_lambda=0.5, burst_size=2, batch_size=3, seed=0)


def base_dist(lm, prompts):  # type: ignore[no-untyped-def]
    from tracecal.passes.selfeval import number_distribution

    return number_distribution(lm, prompts)[0]


def sequential_secl(lm, stream, cfg, frozen):  # type: ignore[no-untyped-def]
    """SECL by its definition: one question at a time, every v read alone, nothing reused from the frozen pass."""
    gate = make_gate(cfg)
    prompts = verbal_prompts(lm, stream, frozen.answers)
    v, updated, gate_open = np.full(len(stream), np.nan), np.zeros(len(stream), bool), np.zeros(len(stream), bool)
    with SECLAdapter(lm, cfg) as ad:
        for i in range(len(stream)):
            step = gate.observe(answer_statistic(frozen.entropy[i], frozen.surprisal[i], cfg.statistic))
            gate_open[i] = step.open
            if step.alarm and not cfg.accumulate and cfg.reset_at == "shift":
                ad.reset()  # a detected shift: back to the base model before this question's v
            if not step.open:
                v[i] = ad.confidence([prompts[i]])[0][0]
                continue
            info = ad.update(prompts[i], float(frozen.tau[i]))
            gate.feedback(info.updated)
            v[i], updated[i] = info.v_after, info.updated
            if info.updated and not cfg.accumulate and cfg.reset_at == "update":
                ad.reset()
    return v, updated, gate_open


class ScriptedGate:
    """A gate that lets through given questions and never announces a burst (not one of the package's gates)."""

    def __init__(self, open_at: set[int]) -> None:
        self.open_at, self.t, self.feedbacks = open_at, -1, []

    @property
    def in_burst(self) -> bool:
        return False

    def observe(self, x: float) -> GateStep:
        self.t += 1
        return GateStep(self.t in self.open_at, self.t in self.open_at, 0 if self.t in self.open_at else -1)

    def feedback(self, updated: bool) -> None:
        self.feedbacks.append(updated)
