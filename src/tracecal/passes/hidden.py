"""The hidden pass: per answer, a compact summary of the model's residual stream (`tracecal.backends.hidden`).

Stats (each a float vector per answer, layer-major: the k chosen layers' d-vectors one after the other):

* ``hidden_mean``: the mean over the answer's decoding states, (1/T)·Σ_{t<T} h^ℓ_{L−1+t}, per layer ℓ;
* ``hidden_first``: the state before the first answer token, h^ℓ_{L−1} (the prompt's last position).

Size per answer: 2·k·d float32 (stored as float32 lists): k = 3 "auto" layers (round(n/4), round(n/2), round(3n/4))
→ 2·3·576 = 3,456 numbers (13.5 KiB) for SmolLM2-135M, 2·3·1536 = 9,216 (36 KiB) for Qwen2.5-1.5B. The column
``hidden_layers`` records which layers (1-based) each row holds.

Where they come from: when the generation pass runs in this process with the hidden pass scheduled, the summaries
are recorded during generation (`GenerationPass.hidden_layers`, set by the scheduler) and kept in `MEMO` until this
pass stores them (one decoding pass, no second forward pass); otherwise (a stored run, a resumed one, another
worker) they are computed teacher-forced over the stored answer tokens (`trace_answers(hidden_layers=...)`, one
forward pass per batch over prompt + answer; equal to the recorded ones to float round-off). Needs a backend that
declares ``hidden_states`` and ``teacher_forced`` (HF); llama.cpp and HTTP runs report its estimators as not run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from tracecal.backends.hidden import decoder_layers, resolve_layers
from tracecal.backends.registry import HIDDEN_STATES, TEACHER_FORCED
from tracecal.passes.base import VECTOR, Pass, register_pass
from tracecal.traces.trace import Trace

__all__ = ["HiddenPass", "MEMO", "remember"]

MEMO: dict[tuple[str, str, str, bytes], np.ndarray] = {}
"""Summaries recorded during generation in this process, by (model id, task, answer id, answer token bytes), until
the hidden pass stores them (`remember`, `HiddenPass.compute` pops them)."""


def _key(task: str, t: Trace) -> tuple[str, str, str, bytes]:
    return (t.model_id, task, t.id, np.asarray(t.token_ids, dtype=np.int64).tobytes())


def remember(task: str, traces: Sequence[Trace]) -> None:
    """Keep the summaries the traces carry (recorded during generation) for the hidden pass."""
    for t in traces:
        if t.hidden is not None:
            MEMO[_key(task, t)] = t.hidden


@register_pass
class HiddenPass(Pass):
    """Hidden-state summaries per answer (module docstring); opt-in: estimators ``hidden_probe*``."""

    name = "hidden"
    provides = {"hidden_mean": VECTOR, "hidden_first": VECTOR}
    cost_weight = 0.5  # one teacher-forced forward pass over prompt + answer (nothing when recorded in generation)
    description = "hidden-state summaries: mean over the answer's decoding states and the state before it"
    requires = frozenset({HIDDEN_STATES, TEACHER_FORCED})

    def __init__(self, layers: str | Sequence[int] = "auto") -> None:
        self.layers = layers

    def compute(self, model: Any, task: Any, examples: Sequence[Any], traces: Sequence[Any]) -> dict[str, Any]:
        """The summaries of the stored answers ``traces``: recorded ones from `MEMO`, the rest teacher-forced."""
        got: list[np.ndarray | None] = [MEMO.pop(_key(task.name, t), None) for t in traces]
        todo = [i for i, h in enumerate(got) if h is None]
        if todo:
            forced = model.trace_answers(
                [task.prompt(examples[i], chat=model.chat) for i in todo],
                [traces[i].token_ids for i in todo],
                hidden_layers=self.layers,
            )
            for i, f in zip(todo, forced, strict=True):
                got[i] = f.hidden
        layers = list(resolve_layers(self.layers, len(decoder_layers(model.model))))
        summaries = [np.asarray(h) for h in got]
        return {
            "hidden_mean": [h[0].ravel() for h in summaries],
            "hidden_first": [h[1].ravel() for h in summaries],
            "hidden_layers": [layers] * len(summaries),
        }

    def to_table(self, ids: Sequence[str], columns: dict[str, Any]) -> pa.Table:
        """``id``, the two stats as float32 lists (half the bytes of float64; the states are float32) and the
        layers."""
        f32 = pa.list_(pa.float32())
        return pa.table(
            {
                "id": list(ids),
                "hidden_mean": pa.array([np.asarray(v, np.float32) for v in columns["hidden_mean"]], type=f32),
                "hidden_first": pa.array([np.asarray(v, np.float32) for v in columns["hidden_first"]], type=f32),
                "hidden_layers": pa.array(columns["hidden_layers"], type=pa.list_(pa.int64())),
            }
        )
