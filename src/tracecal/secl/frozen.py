"""The frozen pass: the base model over a SECL stream, batched (docs/method.md §6, baselines (a) and (b)).

For every question of the stream: the answer with its trace (one generation), NormPTrue τ and the verbalised
confidence v, with their cost. It gives the baselines frozen v and τ, and SECL reuses it wherever the model
equals the base model (`tracecal.secl.run`). It is reusable across SECL runs on the same stream and model
(`FrozenPass.save` / `FrozenPass.load`, `FrozenPass.select` for a sub-stream). No label is read.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tracecal._inputs import UserFileError, read_json
from tracecal.errors import ValidationError
from tracecal.secl.adapter import V_TOKENS_EXTRA
from tracecal.secl.cost import CostMeter
from tracecal.secl.stream import Answers, Progress, StreamItem, generate_answers, read_p_true, verbal_prompts
from tracecal.tasks.prompts import self_eval_question

if TYPE_CHECKING:
    from tracecal.backends.hf import HFModel

__all__ = ["FrozenPass", "frozen_pass", "weights_dtype", "FROZEN_FORMAT"]

FROZEN_FORMAT = 1


@dataclass
class FrozenPass:
    """The base model over the stream: answers (texts, per-token H and s), τ, v, and their cost.

    ``p_yes``: the raw P(yes) of each answer, read in the same forward pass as τ (the ``ptrue`` target); None in a
    pass saved before it was recorded. ``dtype``: the weights' dtype (part of the pass's identity: bf16 changes
    answers); a pass saved before it was recorded reads as ``float32``, the only dtype `tracecal secl` loaded then.
    """

    ids: list[str]
    domains: list[str]
    model_id: str
    answers: list[str]
    entropy: list[np.ndarray]
    surprisal: list[np.ndarray]
    tau: np.ndarray
    v: np.ndarray
    tau_tokens: np.ndarray
    v_tokens: np.ndarray
    cost: CostMeter = field(default_factory=CostMeter)
    p_yes: np.ndarray | None = None
    dtype: str = "float32"

    def __len__(self) -> int:
        return len(self.ids)

    def check(self, items: Sequence[StreamItem], model_id: str | None = None) -> None:
        """Raise ValueError unless this pass was computed for exactly these items (and model)."""
        ids = [it.id for it in items]
        if ids != self.ids:
            raise ValidationError(
                f"the frozen pass is for a different stream ({len(self.ids)} vs {len(ids)} questions)"
            )
        if model_id is not None and model_id != self.model_id:
            raise ValidationError(f"the frozen pass was computed with {self.model_id!r}, not {model_id!r}")

    def select(self, items: Sequence[StreamItem]) -> FrozenPass:
        """The pass restricted to ``items`` (a sub-stream, e.g. fewer questions per domain), in their order.

        Costs are re-summed from the per-question token counts (generation and seconds pro rata).
        """
        pos = {q: i for i, q in enumerate(self.ids)}
        missing = [it.id for it in items if it.id not in pos]
        if missing:
            raise ValidationError(
                f"the frozen pass lacks {len(missing)} of the stream's questions (e.g. {missing[0]!r})"
            )
        idx = [pos[it.id] for it in items]
        frac = len(idx) / max(len(self.ids), 1)
        cost = CostMeter()
        tau_tok, v_tok = self.tau_tokens[idx], self.v_tokens[idx]
        cost.add("tau", int(tau_tok.sum()), passes=len(idx))
        cost.add("v", int(v_tok.sum()), passes=len(idx))
        cost.add("generate", round(self.cost.forward_tokens.get("generate", 0) * frac), passes=len(idx))
        shares = {
            "tau": tau_tok.sum() / max(self.tau_tokens.sum(), 1),
            "v": v_tok.sum() / max(self.v_tokens.sum(), 1),
            "generate": frac,
        }
        for k, sec in self.cost.seconds.items():
            cost.seconds[k] = float(sec * shares.get(k, frac))
        return FrozenPass(
            ids=[self.ids[i] for i in idx],
            domains=[self.domains[i] for i in idx],
            model_id=self.model_id,
            answers=[self.answers[i] for i in idx],
            entropy=[self.entropy[i] for i in idx],
            surprisal=[self.surprisal[i] for i in idx],
            tau=self.tau[idx],
            v=self.v[idx],
            tau_tokens=tau_tok,
            v_tokens=v_tok,
            cost=cost,
            p_yes=None if self.p_yes is None else self.p_yes[idx],
            dtype=self.dtype,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FROZEN_FORMAT,
            "model_id": self.model_id,
            "dtype": self.dtype,
            "ids": self.ids,
            "domains": self.domains,
            "answers": self.answers,
            "entropy": [e.tolist() for e in self.entropy],
            "surprisal": [s.tolist() for s in self.surprisal],
            "tau": self.tau.tolist(),
            "v": self.v.tolist(),
            "tau_tokens": self.tau_tokens.tolist(),
            "v_tokens": self.v_tokens.tolist(),
            "cost": self.cost.to_dict(),
            **({} if self.p_yes is None else {"p_yes": self.p_yes.tolist()}),
        }

    def save(self, path: str | Path) -> Path:
        """Write the pass as JSON (floats round-trip exactly), with `tracecal._outputs.atomic_write` (a full disk
        or a crash never leaves a half-written cache)."""
        from tracecal._outputs import atomic_write

        path, text = Path(path), json.dumps(self.to_dict())
        atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
        return path

    @classmethod
    def load(cls, path: str | Path) -> FrozenPass:
        d = read_json(path, "SECL frozen-pass file")  # the one checked opener: a folder, FIFO, non-JSON named
        fmt = d.get("format") if isinstance(d, dict) else type(d).__name__
        if fmt != FROZEN_FORMAT:
            raise UserFileError(f"{path}: not a SECL frozen-pass file (format {fmt!r})")
        return cls(
            ids=list(d["ids"]),
            domains=list(d["domains"]),
            model_id=d["model_id"],
            answers=list(d["answers"]),
            entropy=[np.asarray(e, dtype=np.float64) for e in d["entropy"]],
            surprisal=[np.asarray(s, dtype=np.float64) for s in d["surprisal"]],
            tau=np.asarray(d["tau"], dtype=np.float64),
            v=np.asarray(d["v"], dtype=np.float64),
            tau_tokens=np.asarray(d["tau_tokens"], dtype=np.int64),
            v_tokens=np.asarray(d["v_tokens"], dtype=np.int64),
            cost=CostMeter.from_dict(d["cost"]),
            p_yes=np.asarray(d["p_yes"], dtype=np.float64) if "p_yes" in d else None,
            dtype=str(d.get("dtype", "float32")),
        )


def weights_dtype(lm: Any) -> str:
    """The dtype of ``lm``'s weights as a name (``float32``, ``bfloat16``…); ``float32`` when it has none.

    >>> from types import SimpleNamespace
    >>> weights_dtype(SimpleNamespace(model=SimpleNamespace(dtype="torch.bfloat16")))
    'bfloat16'
    """
    dtype = getattr(getattr(lm, "model", None), "dtype", None)
    return "float32" if dtype is None else str(dtype).replace("torch.", "")


CHECKPOINT_FORMAT = "tracecal-frozen-answers/1"


def _answers_checkpoint(path: Path | None, lm: Any, items: Sequence[StreamItem]) -> tuple[Answers, CostMeter]:
    """The answers (and their cost) a checkpoint holds for a prefix of ``items`` under this model and dtype;
    nothing when there is no checkpoint or it is of another model, dtype or stream (it is then overwritten)."""
    empty = Answers([], [], []), CostMeter()
    if path is None or not path.is_file():
        return empty
    try:
        d = read_json(path, "SECL checkpoint")
        ok = isinstance(d, dict) and d.get("format") == CHECKPOINT_FORMAT
        ok = ok and (d["model_id"], d["dtype"]) == (lm.model_id, weights_dtype(lm))
        ok = ok and d["ids"] == [it.id for it in items[: len(d["ids"])]]
        if not ok:
            return empty
        entropy = [np.asarray(e, dtype=np.float64) for e in d["entropy"]]
        surprisal = [np.asarray(x, dtype=np.float64) for x in d["surprisal"]]
        return Answers(list(d["answers"]), entropy, surprisal), CostMeter.from_dict(d["cost"])
    except (ValueError, KeyError, TypeError):  # unreadable or half-formed: start again
        return empty


def _save_answers_checkpoint(path: Path, lm: Any, items: Sequence[StreamItem], a: Answers, cost: CostMeter) -> None:
    from tracecal._outputs import atomic_write

    d = {"format": CHECKPOINT_FORMAT, "model_id": lm.model_id, "dtype": weights_dtype(lm)}
    d |= {"ids": [it.id for it in items[: len(a.texts)]], "answers": a.texts, "cost": cost.to_dict()}
    d |= {"entropy": [e.tolist() for e in a.entropy], "surprisal": [x.tolist() for x in a.surprisal]}
    text = json.dumps(d)
    atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def frozen_pass(
    lm: HFModel,
    items: Sequence[StreamItem],
    batch_size: int = 8,
    progress: Progress | None = None,
    checkpoint: str | Path | None = None,
) -> FrozenPass:
    """Answers (with traces), τ and v of the base model for every question, in batches (labels not used).

    ``checkpoint``: a file the answers are saved to after every chunk of ``4 × batch_size`` questions and resumed
    from (a long pass interrupted loses at most one chunk; greedy answers do not depend on where it resumed).
    The caller removes it once the finished pass is saved.
    """
    from tracecal.passes.selfeval import verbalized_confidence

    if getattr(lm.model, "peft_config", None):
        raise RuntimeError("the model carries a peft adapter; the frozen pass needs the base model")
    n, ckpt = len(items), None if checkpoint is None else Path(checkpoint)
    answers, cost = _answers_checkpoint(ckpt, lm, items)
    if progress and answers.texts:
        progress("answering", len(answers.texts), n)
    for s in range(len(answers.texts), n, batch_size * 4):
        chunk = items[s : s + batch_size * 4]
        with cost.timer("generate"):
            answers.extend(generate_answers(lm, chunk, batch_size, cost))
        if ckpt is not None:
            _save_answers_checkpoint(ckpt, lm, items, answers, cost)
        if progress:
            progress("answering", s + len(chunk), n)
    with cost.timer("tau"):
        tau, p_yes, tau_tok = read_p_true(lm, items, answers.texts, batch_size)
    cost.add("tau", sum(tau_tok), passes=n)
    if progress:
        progress("tau", n, n)
    qs = [self_eval_question(it.example) for it in items]
    with cost.timer("v"):
        v, _, _ = verbalized_confidence(lm, qs, answers.texts, batch_size=batch_size)
    v_tok = [len(p) + V_TOKENS_EXTRA for p in verbal_prompts(lm, items, answers.texts)]
    cost.add("v", sum(v_tok), passes=n)
    if progress:
        progress("v", n, n)
    return FrozenPass(
        ids=[it.id for it in items],
        domains=[it.domain for it in items],
        model_id=lm.model_id,
        answers=answers.texts,
        entropy=answers.entropy,
        surprisal=answers.surprisal,
        tau=np.asarray(tau, dtype=np.float64),
        v=np.asarray(v, dtype=np.float64),
        tau_tokens=np.asarray(tau_tok, dtype=np.int64),
        v_tokens=np.asarray(v_tok, dtype=np.int64),
        cost=cost,
        p_yes=np.asarray(p_yes, dtype=np.float64),
        dtype=weights_dtype(lm),
    )
