"""The SECL stream (docs/method.md §6): its questions, and what the model reads off each one.

A stream is an ordered list of questions, domain after domain (`build_stream`). Per question SECL needs the
model's answer with its decoding trace (`generate_answers`), the detector's input statistic of that trace
(`answer_statistic`), the label-free target NormPTrue τ (`read_tau`) and the prompt of the verbalised
confidence v (`verbal_prompts`). The question is shown to the model, when it judges its own answer, as
`tracecal.tasks.prompts.self_eval_question` builds it (the one builder evaluate, SECL and the service share).

The two passes over a stream live next door: the frozen base model in `tracecal.secl.frozen`, SECL itself in
`tracecal.secl.run`, and their scoring in `tracecal.secl.result`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tracecal._validation import Interval, check_param
from tracecal.errors import ValidationError
from tracecal.secl.cost import CostMeter
from tracecal.tasks.prompts import self_eval_question

if TYPE_CHECKING:
    from tracecal.backends.hf import HFModel
    from tracecal.tasks import Example, Task

__all__ = [
    "Progress",
    "StreamItem",
    "Answers",
    "build_stream",
    "answer_statistic",
    "generate_answers",
    "read_tau",
    "read_p_true",
    "order_domains",
    "verbal_prompts",
]

Progress = Callable[[str, int, int], None]  # (stage, done, total)


@dataclass
class StreamItem:
    """One question of the stream: its domain (task name), the task and the example."""

    domain: str
    task: Task
    example: Example

    @property
    def id(self) -> str:
        return f"{self.domain}/{self.example.id}"


def build_stream(
    tasks: str | Sequence[str],
    per_domain: int,
    data_dir: str | Path | None = None,
    sample_seed: int | None = None,
) -> list[StreamItem]:
    """``per_domain`` questions of each task, domain after domain, in the order given.

    ``tasks``: names (or a comma-separated string). ``sample_seed``: None takes the first rows in file
    order; an int takes a seeded random subset (`Task.load`).
    """
    from tracecal.tasks import get_task

    names = [t.strip() for t in tasks.split(",")] if isinstance(tasks, str) else list(tasks)
    names = [n for n in names if n]
    if not names:
        raise ValidationError("the stream needs at least one task")
    check_param("per_domain", per_domain, Interval(int, 1, None))
    items: list[StreamItem] = []
    tasks_ = [get_task(name) for name in names]
    for k, task in enumerate(tasks_):  # twice: the same questions twice, and one domain's metrics of both
        if task.name in {t.name for t in tasks_[:k]}:
            raise ValidationError(f"the stream names the domain {task.name!r} twice: give each domain once")
    for task in tasks_:
        examples = task.load(limit=per_domain, data_dir=data_dir, seed=sample_seed)
        items += [StreamItem(task.name, task, ex) for ex in examples]
    return items


def order_domains(tasks: str | Sequence[str], order: str | None) -> list[str]:
    """The stream's domains (``tasks``) in the order ``order`` gives (the domain-ordering ablation).

    ``order``: None or ``"given"`` keeps them; ``"reverse"`` reverses them; otherwise a comma-separated
    permutation of the domains, by name (``svamp,triviaqa,…``) or by 1-based position in ``tasks`` (``2,1,4,3``).
    A `ValidationError` unless every domain is named exactly once.
    """
    names = [t.strip() for t in tasks.split(",")] if isinstance(tasks, str) else list(tasks)
    names = [n for n in names if n]
    if order is None or order.strip() in ("", "given"):
        return names
    if order.strip() == "reverse":
        return names[::-1]
    parts = [p.strip() for p in order.split(",") if p.strip()]
    picked = [names[int(p) - 1] if p.isdigit() and 1 <= int(p) <= len(names) else p for p in parts]
    if sorted(picked) != sorted(names) or len(set(picked)) != len(names):
        raise ValidationError(
            f"--domain-order must name each of the stream's {len(names)} domains ({', '.join(names)}) once, by "
            f"name or 1-based position, or be 'reverse'; got {order!r}"
        )
    return picked


def answer_statistic(entropy: np.ndarray, surprisal: np.ndarray, name: str = "mean_entropy") -> float:
    """Per-question detector input from the answer's trace (NaN for a zero-token answer)."""
    if len(entropy) == 0:
        return float("nan")
    if name == "mean_entropy":
        return float(np.mean(entropy))
    if name == "max_entropy":
        return float(np.max(entropy))
    if name == "mean_surprisal":
        return float(np.mean(surprisal))
    if name == "first_entropy":
        return float(entropy[0])
    raise ValidationError(f"unknown statistic {name!r}")


@dataclass
class Answers:
    """Answers of a run of questions: texts and per-token entropy H and surprisal s of their traces."""

    texts: list[str]
    entropy: list[np.ndarray]
    surprisal: list[np.ndarray]

    def extend(self, other: Answers) -> None:
        self.texts += other.texts
        self.entropy += other.entropy
        self.surprisal += other.surprisal


def generate_answers(lm: HFModel, items: Sequence[StreamItem], batch_size: int, cost: CostMeter) -> Answers:
    """Greedy answers with traces, grouped by task (each task has its own budget and stop strings)."""
    out: list[Any] = [None] * len(items)
    by_task: dict[str, list[int]] = {}
    for i, it in enumerate(items):
        by_task.setdefault(it.task.name, []).append(i)
    for idx in by_task.values():
        task = items[idx[0]].task
        traces = lm.generate(
            [task.prompt(items[i].example, chat=lm.chat) for i in idx],
            max_new_tokens=task.max_new_tokens,
            stop_strings=task.stop_strings(lm.chat),
            batch_size=batch_size,
            ids=[items[i].id for i in idx],
        )
        for i, t in zip(idx, traces, strict=True):
            out[i] = t
            cost.add("generate", len(t.prompt_ids) + len(t.token_ids) + (t.stop_reason == "eos"))
    return Answers([t.text for t in out], [t.entropy for t in out], [t.surprisal for t in out])


def read_tau(
    lm: HFModel, items: Sequence[StreamItem], answers: Sequence[str], batch_size: int
) -> tuple[np.ndarray, list[int]]:
    """NormPTrue τ of each answer under the model as it is now, and the P(True) prompt length of each."""
    tau, _, toks = read_p_true(lm, items, answers, batch_size)
    return tau, toks


def read_p_true(
    lm: HFModel, items: Sequence[StreamItem], answers: Sequence[str], batch_size: int
) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """NormPTrue τ and raw P(yes) of each answer (one forward pass each), and the P(True) prompt length of each."""
    from tracecal.passes.selfeval import p_true_prompt_ids, p_true_with_raw

    qs = [self_eval_question(it.example) for it in items]
    toks = [len(p_true_prompt_ids(lm, q, a)) for q, a in zip(qs, answers, strict=True)]
    tau, p_yes = p_true_with_raw(lm, qs, list(answers), batch_size=batch_size)
    return tau, p_yes, toks


def verbal_prompts(lm: HFModel, items: Sequence[StreamItem], answers: Sequence[str]) -> list[list[int]]:
    """Token ids of the verbalised-confidence prompt of each (question, answer)."""
    from tracecal.passes.selfeval import verbalized_prompt_ids

    return [verbalized_prompt_ids(lm, self_eval_question(it.example), a) for it, a in zip(items, answers, strict=True)]
