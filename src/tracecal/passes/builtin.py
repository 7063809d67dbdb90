"""The built-in passes: the generation (traces), self-evaluation, sentence embeddings and the beam search.

Their shard folders keep the names earlier run directories used (``traces``, ``extra``, ``semantic``, ``beam``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from tracecal.backends.registry import BEAMS, NEXT_TOKEN_LOGPROBS
from tracecal.passes.base import ANSWER, TOKEN, VECTOR, Pass, register_pass
from tracecal.tasks.prompts import self_eval_question
from tracecal.traces.io import traces_to_table
from tracecal.traces.trace import Trace, TraceBatch

__all__ = ["GenerationPass", "SelfEvalPass", "EmbeddingPass", "BeamPass"]


@register_pass
class GenerationPass(Pass):
    """The one decoding pass that produces each answer and its trace (s_t, H_t per token; docs/method.md §1)."""

    name = "traces"
    depends = ()
    provides = {"surprisal": TOKEN, "entropy": TOKEN}
    description = "greedy answer with its decoding trace"

    def __init__(self, max_new_tokens: int | None = None, hidden_layers: Any = None) -> None:
        self.max_new_tokens = max_new_tokens
        self.hidden_layers = hidden_layers  # set (by the scheduler) when the hidden pass runs: record them here

    @classmethod
    def from_config(cls, cfg: Any) -> GenerationPass:
        return cls(max_new_tokens=cfg.max_new_tokens)

    def compute(self, model: Any, task: Any, examples: Sequence[Any], traces: Sequence[Any]) -> list[Trace]:  # type: ignore[override]
        """The traces themselves (``traces`` is unused: this pass makes them); with ``hidden_layers``, each answer's
        hidden-state summary recorded in the same decoding pass and kept for the hidden pass
        (`tracecal.passes.hidden.remember`)."""
        hidden = {} if self.hidden_layers is None else {"hidden_layers": self.hidden_layers}
        out = model.generate(
            [task.prompt(ex, chat=model.chat) for ex in examples],
            max_new_tokens=self.max_new_tokens or task.max_new_tokens,
            stop_strings=tuple(task.stop_strings(model.chat)),
            ids=[ex.id for ex in examples],
            **hidden,
        )
        for t in out:
            t.meta["task"] = task.name
        if hidden:
            from tracecal.passes.hidden import remember

            remember(task.name, out)
        return out

    def to_table(self, ids: Sequence[str], columns: Any) -> pa.Table:
        return traces_to_table(columns)


@register_pass
class SelfEvalPass(Pass):
    """P(True) and verbalised confidence: the model judges its own answer (docs/method.md §4 "Broader").

    Both prompts show the question as `self_eval_question` builds it (options and context included), the same
    text SECL and the service use; the same prompt ids on the HF and llama.cpp backends (`tracecal.passes.selfeval`).
    """

    name = "extra"
    provides = {"p_true": ANSWER, "verbalized": ANSWER, "digit_mass": ANSWER}
    cost_weight = 0.65
    description = "P(True) and verbalised confidence (two extra forward passes per answer)"
    requires = frozenset({NEXT_TOKEN_LOGPROBS})

    def compute(self, model: Any, task: Any, examples: Sequence[Any], traces: Sequence[Any]) -> dict[str, Any]:
        from tracecal.passes.selfeval import p_true, verbalized_confidence

        qs = [self_eval_question(ex) for ex in examples]
        ans = [t.text for t in traces]
        v, _, mass = verbalized_confidence(model, qs, ans)
        return {"p_true": p_true(model, qs, ans), "verbalized": v, "digit_mass": mass}


@register_pass
class EmbeddingPass(Pass):
    """TokenSAR relevances R̃_t and MARS importances u_t from leave-one-out sentence embeddings (docs/method.md §4)."""

    name = "semantic"
    provides = {"tokensar_rel": TOKEN, "mars_u": TOKEN}
    resource = "embedder"
    cost_weight = 2.5
    description = "leave-one-token-out all-MiniLM-L6-v2 similarities"

    def compute(self, model: Any, task: Any, examples: Sequence[Any], traces: Sequence[Any]) -> dict[str, Any]:
        from tracecal.passes.semantic import relevance

        rel, u = relevance(list(traces), [ex.question for ex in examples], model)
        off = TraceBatch.from_traces(list(traces)).offsets
        split = lambda x: [x[off[i] : off[i + 1]] for i in range(len(traces))]  # noqa: E731
        return {"tokensar_rel": split(rel), "mars_u": split(u)}


@register_pass
class BeamPass(Pass):
    """Length-normalised log-scores of the final beams of one beam search per prompt, best first (docs/method.md §4)."""

    name = "beam"
    provides = {"beam": VECTOR}
    cost_weight = 1.5
    description = "one B-beam search per prompt (length-normalised beam scores)"
    requires = frozenset({BEAMS})

    def __init__(self, num_beams: int = 5, max_new_tokens: int | None = None, cap: int | None = 32) -> None:
        self.num_beams, self.max_new_tokens, self.cap = num_beams, max_new_tokens, cap

    @classmethod
    def from_config(cls, cfg: Any) -> BeamPass:
        return cls(cfg.num_beams, cfg.max_new_tokens, cfg.beam_max_new_tokens)

    def compute(self, model: Any, task: Any, examples: Sequence[Any], traces: Sequence[Any]) -> dict[str, Any]:
        prompts = [task.prompt(ex, chat=model.chat) for ex in examples]
        # our choice for cost: the beam pass is capped at `cap` tokens (the s_i are length-normalised)
        mnt = self.max_new_tokens or task.max_new_tokens
        if self.cap:
            mnt = min(mnt, self.cap)
        scores = model.beam_scores(prompts, num_beams=self.num_beams, max_new_tokens=mnt)
        return {"beam": np.asarray(scores, dtype=np.float64)}
