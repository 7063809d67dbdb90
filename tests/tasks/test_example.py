"""`tracecal.tasks.example`: examples, raw rows and the task errors (all of them `TracecalError`)."""

from __future__ import annotations

from tracecal.errors import TracecalError
from tracecal.tasks.example import (
    AmbiguousTaskError,
    EmptyTaskFileError,
    Example,
    MalformedRowError,
    RowError,
    TaskDataError,
    TaskFileNotFoundError,
    TaskNameCollisionError,
    UnknownTaskError,
)


def test_task_errors_derive_from_tracecal_error_and_their_builtin() -> None:
    for cls in (TaskDataError, EmptyTaskFileError, UnknownTaskError, AmbiguousTaskError, TaskNameCollisionError):
        assert issubclass(cls, TracecalError) and issubclass(cls, ValueError)
    assert issubclass(TaskFileNotFoundError, FileNotFoundError) and issubclass(RowError, TracecalError)
    e = MalformedRowError("f.jsonl", "line 3", "missing field 'q'", line=3)
    assert str(e) == "f.jsonl, line 3: missing field 'q'" and e.line == 3 and isinstance(e, TracecalError)


def test_example_fields() -> None:
    ex = Example(id="1", task="t", question="q", golds=["a"])
    assert ex.golds == ["a"] and ex.choices == [] and ex.id == "1"
