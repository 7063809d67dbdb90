"""The :class:`Task` type and the task registry (:data:`TASKS`, :func:`register_task`).

Name resolution (a registered name or a user file path -> Task) lives in :mod:`tracecal.tasks.resolve`,
which can import both this module and :mod:`tracecal.tasks.user` without a cycle.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

import tracecal.tasks.prompts as prompts
from tracecal._validation import SEED, Constraint, Interval, Options, check_params, check_text
from tracecal.errors import ValidationError
from tracecal.tasks.example import EmptyTaskFileError, Example, MalformedRowError, MalformedRowWarning, RowError
from tracecal.tasks.labellers import Labeller, get_labeller

__all__ = ["TASKS", "TASK_NAME_RE", "Parser", "Task", "check_task_name", "register_task"]

#: A task name is used as a folder name in run directories: letters, digits, ``.``, ``_`` and ``-``, not
#: starting with ``.`` or ``-``, at most 100 characters.
TASK_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,99}")


LOAD_CONSTRAINTS: dict[str, Constraint] = {
    "on_error": Options("skip", "raise"),
    "limit": (Interval(int, 0, None), None),
    "seed": (SEED, None),
}
"""The settings of `Task.load` (`tracecal._validation`)."""


def check_task_name(name: Any) -> str:
    """``name`` if it is safe as a folder name (:data:`TASK_NAME_RE`), else `ValidationError` saying what to fix."""
    if not isinstance(name, str) or not TASK_NAME_RE.fullmatch(name):
        raise ValidationError(
            f"task name {name!r} cannot be used as a folder name: use 1-100 letters, digits, '.', '_' or '-', "
            "not starting with '.' or '-'"
        )
    return name


# --------------------------------------------------------------------------------------------- Task

Parser = Callable[[Any, int, str], Example]


@dataclass(frozen=True, eq=False)
class Task:
    """An evaluation task: where its rows come from, how to prompt, how to label answers.

    Attributes: ``name`` (safe as a folder name, see :func:`check_task_name`: run directories store a
    task's shards under it); ``kind`` (``qa``, ``math``, ``extractive``, ``truthful``, ``mc``: selects the
    prompt template); ``labeller`` (a :class:`~tracecal.tasks.labels.Labeller`); ``max_new_tokens``;
    ``language``; ``description``; ``ref``: the string that :func:`~tracecal.tasks.get_task` resolves to
    this task again (the registered name of a built-in task, the absolute path of a user file; default:
    ``name``) - store it, not ``name``, to find the task again in another process. Use :meth:`load`,
    :meth:`prompt`, :meth:`stop_strings`, :meth:`label` and :attr:`label_rule`.
    """

    name: str
    kind: str
    labeller: Labeller
    source: Any  # FileSource or another object with rows(data_dir) -> (label, Iterator[RawRow]) / describe()
    parser: Parser
    max_new_tokens: int = 0
    language: str = "en"
    description: str = ""
    ref: str = ""

    def __post_init__(self) -> None:
        check_task_name(self.name)
        if not self.ref:
            object.__setattr__(self, "ref", self.name)
        if self.kind not in prompts.KINDS:
            raise ValidationError(f"unknown task kind {self.kind!r}; known: {', '.join(prompts.KINDS)}")
        object.__setattr__(self, "labeller", get_labeller(self.labeller))
        if not self.max_new_tokens:
            object.__setattr__(self, "max_new_tokens", prompts.MAX_NEW_TOKENS[self.kind])

    def __repr__(self) -> str:
        return (
            f"Task({self.name!r}, kind={self.kind!r}, labeller={self.labeller.name!r}, "
            f"source={self.source.describe()!r})"
        )

    # -- loading --------------------------------------------------------------------------------

    def load(
        self,
        limit: int | None = None,
        data_dir: str | Path | None = None,
        on_error: str = "skip",
        seed: int | None = None,
    ) -> list[Example]:
        """Read the task's rows from their original file format.

        ``limit``: keep the first ``limit`` valid rows in file order. ``seed``: shuffle the valid rows with
        ``numpy.random.default_rng(seed)`` first (then ``limit`` takes a random subset); ``None`` keeps
        file order. ``on_error="skip"`` warns (:class:`MalformedRowWarning`, naming file and line) and
        skips a malformed row; ``"raise"`` raises :class:`MalformedRowError`. A file with no rows, or with
        no valid row, raises :class:`EmptyTaskFileError`.
        """
        check_params({"on_error": on_error, "limit": limit, "seed": seed}, LOAD_CONSTRAINTS)
        if limit == 0:
            return []
        label, rows = self.source.rows(data_dir)
        out: list[Example] = []
        seen: set[str] = set()
        n_rows = n_bad = 0
        for raw in rows:
            n_rows += 1
            ex, reason = self._parse(raw.record, raw.index) if raw.error is None else (None, raw.error)
            if ex is not None and ex.id in seen:
                reason, ex = f"duplicate id {ex.id!r}", None
            if ex is None:
                n_bad += 1
                err = MalformedRowError(raw.path, raw.where, str(reason), line=raw.line, index=raw.index)
                if on_error == "raise":
                    raise err
                warnings.warn(f"{err} (row skipped)", MalformedRowWarning, stacklevel=2)
                continue
            seen.add(ex.id)
            ex.meta.setdefault("line", raw.line)
            out.append(ex)
            if seed is None and limit is not None and len(out) >= limit:
                break
        if n_rows == 0:
            raise EmptyTaskFileError(f"{label}: no rows (empty file?)")
        if not out:
            raise EmptyTaskFileError(f"{label}: no usable rows ({n_bad} malformed rows skipped)")
        if seed is not None:
            order = np.random.default_rng(seed).permutation(len(out))
            out = [out[i] for i in order[: len(out) if limit is None else limit]]
        return out

    def _parse(self, record: Any, index: int) -> tuple[Example | None, str | None]:
        """(the parsed example, None), or (None, why the row is malformed)."""
        try:
            ex = self.parser(record, index, self.name)
            for what, text in (("id", ex.id), ("question", ex.question), ("context", ex.context)):
                check_text(text, f"field {what!r}", RowError)  # a lone surrogate reaches no tokenizer
            for text in ex.choices:
                check_text(text, "field 'choices'", RowError)
            return ex, None
        except RowError as e:
            return None, str(e)
        except KeyError as e:
            return None, f"missing field {e.args[0]!r}"
        except (TypeError, ValueError, AttributeError, IndexError) as e:
            return None, f"{type(e).__name__}: {e}"

    # -- prompting ------------------------------------------------------------------------------

    def prompt(self, example: Example, chat: bool = True) -> str | list[dict[str, str]]:
        """Chat messages (``chat=True``) or a plain base-model prompt for ``example``."""
        return prompts.render(self.kind, example, chat, self.language)

    def stop_strings(self, chat: bool = True) -> tuple[str, ...]:
        """Stop strings for generation: ``()`` for chat prompts, e.g. ``("\\n",)`` for base prompts."""
        return prompts.stop_strings(self.kind, chat)

    # -- labelling ------------------------------------------------------------------------------

    @property
    def label_rule(self) -> str:
        """The correctness rule in words (for reports)."""
        return self.labeller.rule

    def label(self, example: Example, answer_text: str | None) -> int:
        """1 if ``answer_text`` is correct for ``example`` under this task's labeller, else 0."""
        return self.labeller(example, answer_text)

    def label_all(self, examples: list[Example], answers: list[str | None]) -> list[int]:
        """:meth:`label` over aligned lists."""
        if len(examples) != len(answers):
            raise ValidationError(f"{len(examples)} examples but {len(answers)} answers")
        return [self.label(e, a) for e, a in zip(examples, answers, strict=True)]

    def with_labeller(self, labeller: str | Labeller) -> Task:
        """A copy of this task with another labeller (a name from ``LABELLERS`` or a ``Labeller``)."""
        return replace(self, labeller=get_labeller(labeller))


# ----------------------------------------------------------------------------------------- registry

#: Registered tasks by name (the eight built-in ones plus any added with :func:`register_task`).
TASKS: dict[str, Task] = {}


def register_task(task: Task, overwrite: bool = False) -> Task:
    """Add ``task`` to :data:`TASKS` under ``task.name``."""
    if task.name in TASKS and not overwrite:
        raise ValidationError(f"a task named {task.name!r} is already registered (pass overwrite=True)")
    TASKS[task.name] = task
    return task
