"""The plain data types of :mod:`tracecal.tasks`: :class:`Example`, :class:`RawRow` and the error types.

This module imports nothing from ``tracecal``: every other module of the package imports it (and none of
them imports the package ``tracecal.tasks`` itself), so there is no import cycle inside ``tasks/``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

from tracecal.errors import TracecalError

__all__ = [
    "AmbiguousTaskError",
    "EmptyTaskFileError",
    "Example",
    "MalformedRowError",
    "MalformedRowWarning",
    "RawRow",
    "RowError",
    "TaskDataError",
    "TaskFileNotFoundError",
    "TaskNameCollisionError",
    "UnknownTaskError",
]


# ------------------------------------------------------------------------------------------- errors


class TaskDataError(TracecalError, ValueError):
    """A task's data file cannot be used."""


class MalformedRowError(TaskDataError):
    """A row of a task file is malformed; ``path``, ``line`` (1-based, or None), ``index``, ``reason``."""

    def __init__(self, path: str, where: str, reason: str, line: int | None = None, index: int | None = None):
        self.path, self.where, self.reason, self.line, self.index = path, where, reason, line, index
        super().__init__(f"{path}, {where}: {reason}")


class MalformedRowWarning(UserWarning):
    """Warned (with file and line) for each malformed row skipped under ``on_error="skip"``."""


class EmptyTaskFileError(TaskDataError):
    """A task file has no rows, or no usable rows."""


class UnknownTaskError(TracecalError, ValueError):
    """``get_task`` was given a name that is neither registered nor a file."""


class AmbiguousTaskError(TracecalError, ValueError):
    """``get_task`` was given a string that names both a built-in task and an existing file."""


class TaskNameCollisionError(TracecalError, ValueError):
    """Two different tasks would be stored under the same name (e.g. two user files with the same stem)."""


class TaskFileNotFoundError(TracecalError, FileNotFoundError):
    """A task given as a file path (or a name ending in .jsonl/.json/.csv) names no existing file."""


class RowError(TracecalError, ValueError):
    """Raised by a row parser for a malformed row (the loader adds file and line)."""


# ------------------------------------------------------------------------------------------- rows


@dataclass
class Example:
    """One evaluation item.

    ``golds``: the correct answers - aliases (TriviaQA), one canonical number string (math: ``"51"``),
    gold spans (MLQA), correct references (TruthfulQA), or ``[gold_letter, gold_option_text]`` (multiple
    choice). ``choices``: option texts in letter order (A, B, ...). ``incorrect``: TruthfulQA's incorrect
    references. ``meta``: everything else from the row (source file/line, original fields).
    """

    id: str
    task: str
    question: str
    golds: list[str]
    context: str = ""
    choices: list[str] = field(default_factory=list)
    incorrect: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def gold(self) -> str:
        """The first gold (the canonical answer, number, or letter)."""
        return self.golds[0]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``Example(**d)`` rebuilds it)."""
        return asdict(self)


class RawRow(NamedTuple):
    """One row as read from a source, before parsing. ``error`` is set when it could not be read."""

    path: str
    where: str  # "line 7", "list index 3 (line 22)", "row 5"
    line: int | None
    index: int  # type: ignore[assignment]  # a field that shadows tuple.index; 0-based position among the data rows
    record: Any
    error: str | None = None
