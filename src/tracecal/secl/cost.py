"""Compute accounting for SECL: forward/backward tokens per kind of work, and wall time.

Cost unit: the *token-forward*, one token through one forward pass of the model (≈ 2·N_params FLOPs).
A backward pass over n tokens is counted as 2n token-forwards (the usual backward ≈ 2× forward rule), so

    cost(kind) = Σ forward_tokens + 2 · Σ backward_tokens.

Kinds: ``generate`` (prompt + answer tokens), ``v`` (verbalised-confidence read: prompt + 11 KV-cached digit
tokens), ``v_grad`` (the same read with gradient, inside a burst), ``tau`` / ``tau_gated`` (P(True) prompt, for
every question / for gated questions), ``train`` (the backward pass of an update — over the layers from the
lowest LoRA layer up, so n·(L − l_min)/L tokens — plus any further forward of ``steps_per_update`` > 1),
``reread`` (v re-read after a step, including the rescaling reads of the step bound).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CostMeter"]


@dataclass
class CostMeter:
    """Counters per kind: passes, forward tokens, backward tokens, seconds."""

    passes: dict[str, int] = field(default_factory=dict)
    forward_tokens: dict[str, int] = field(default_factory=dict)
    backward_tokens: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def add(self, kind: str, forward_tokens: int, backward_tokens: int = 0, passes: int = 1) -> None:
        """Record ``passes`` forward passes over ``forward_tokens`` tokens (and a backward over ``backward_tokens``)."""
        self.passes[kind] = self.passes.get(kind, 0) + int(passes)
        self.forward_tokens[kind] = self.forward_tokens.get(kind, 0) + int(forward_tokens)
        self.backward_tokens[kind] = self.backward_tokens.get(kind, 0) + int(backward_tokens)

    @contextmanager
    def timer(self, kind: str) -> Iterator[None]:
        """Add the wall time of the ``with`` body to ``seconds[kind]``."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[kind] = self.seconds.get(kind, 0.0) + time.perf_counter() - t0

    def cost(self, *kinds: str) -> int:
        """Token-forward cost of the given kinds (all kinds when none given): fwd + 2·bwd."""
        ks = kinds or tuple(set(self.forward_tokens) | set(self.backward_tokens))
        return sum(self.forward_tokens.get(k, 0) + 2 * self.backward_tokens.get(k, 0) for k in ks)

    def time(self, *kinds: str) -> float:
        ks = kinds or tuple(self.seconds)
        return float(sum(self.seconds.get(k, 0.0) for k in ks))

    def to_dict(self) -> dict[str, Any]:
        kinds = sorted(set(self.passes) | set(self.seconds))
        return {
            k: {
                "passes": self.passes.get(k, 0),
                "forward_tokens": self.forward_tokens.get(k, 0),
                "backward_tokens": self.backward_tokens.get(k, 0),
                "cost": self.cost(k),
                "seconds": round(self.seconds.get(k, 0.0), 3),
            }
            for k in kinds
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CostMeter:
        m = cls()
        for k, r in d.items():
            m.passes[k] = int(r["passes"])
            m.forward_tokens[k] = int(r["forward_tokens"])
            m.backward_tokens[k] = int(r["backward_tokens"])
            m.seconds[k] = float(r["seconds"])
        return m
