"""Task names -> :class:`~tracecal.tasks.base.Task`: registered (built-in) names and user file paths.

Rules of :func:`get_task` (``spec`` is what a user types after ``--task`` / ``--tasks``):

1. A :class:`Task` is returned as it is.
2. A registered name (the eight built-in tasks, or one added with ``register_task``; case-insensitive,
   ``-`` == ``_``) is that task - unless a file of exactly that name also exists, which raises
   :class:`AmbiguousTaskError` (rename the file, or give it a ``.jsonl``/``.json``/``.csv`` suffix).
3. Anything that looks like a path - it ends in ``.jsonl``/``.json``/``.csv``, contains a ``/``, or
   starts with ``~`` - or that is an existing file, is a user file: ``task_from_file(path)`` (alias
   labeller), named ``file-<stem>`` (:func:`~tracecal.tasks.user.file_task_name`) so that it never shares
   a name - or a run-directory folder - with a built-in task (``triviaqa.jsonl`` is ``file-triviaqa``).
   A missing file raises :class:`TaskFileNotFoundError` ("no such file"), an unsupported suffix
   :class:`TaskDataError`.
4. Anything else raises :class:`UnknownTaskError` listing the known names and the closest one.

:func:`get_tasks` resolves a list and refuses two different tasks with one name
(:class:`TaskNameCollisionError`, e.g. ``a/my.jsonl`` and ``b/my.jsonl``, both ``file-my``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import tracecal.tasks.builtin  # noqa: F401  (registers the built-in tasks)
from tracecal._inputs import user_path
from tracecal._validation import closest
from tracecal.tasks.base import TASKS, Task
from tracecal.tasks.example import (
    AmbiguousTaskError,
    TaskFileNotFoundError,
    TaskNameCollisionError,
    UnknownTaskError,
)
from tracecal.tasks.sources import FILE_SUFFIXES
from tracecal.tasks.user import USER_TASK_PREFIX, task_from_file

__all__ = ["get_task", "get_tasks", "looks_like_path"]


def looks_like_path(spec: str) -> bool:
    """True when a task spec is meant as a file path: a ``.jsonl``/``.json``/``.csv`` suffix, a ``/`` (or the
    platform's separator), or a leading ``~``."""
    s = spec.strip()
    seps = {"/", os.sep} | ({os.altsep} if os.altsep else set())
    return Path(s).suffix.lower() in FILE_SUFFIXES or any(c in s for c in seps) or s.startswith("~")


def _registered(spec: str) -> Task | None:
    if spec in TASKS:
        return TASKS[spec]
    return TASKS.get(spec.strip().lower().replace("-", "_"))


def _user_file(spec: str) -> Task:
    p = user_path(spec.strip())
    if p.is_dir():
        raise TaskFileNotFoundError(
            f"task {spec!r} is a directory: give the path of a {'/'.join(FILE_SUFFIXES)} file (or a built-in "
            f"task name: {', '.join(sorted(TASKS))})"
        )
    if not p.is_file():
        hint = ""
        builtin_name = _registered(p.stem)
        if builtin_name is not None:
            hint = f" (the built-in task of that name is {builtin_name.name!r}, without a suffix)"
        raise TaskFileNotFoundError(
            f"no such file: {str(p)!r} (a task ending in {'/'.join(FILE_SUFFIXES)} or containing '/' is read as "
            f"a file path){hint}"
        )
    return task_from_file(p)


def _unknown(spec: str) -> UnknownTaskError:
    key = spec.strip().lower().replace("-", "_")
    close = closest(key, TASKS, cutoff=0.5)
    hint = f" Did you mean {close!r}?" if close else ""
    if key.startswith(USER_TASK_PREFIX.replace("-", "_")):
        hint += f" A name {USER_TASK_PREFIX}<stem> is a user file's task name: pass the file's path instead."
    else:
        files = [spec + s for s in FILE_SUFFIXES if Path(spec + s).is_file()]
        if files:
            hint += f" The file {files[0]!r} exists: pass that path to use it."
    return UnknownTaskError(
        f"unknown task {spec!r}; known tasks: {', '.join(sorted(TASKS))}, or the path of a "
        f"{'/'.join(FILE_SUFFIXES)} file.{hint}"
    )


def get_task(spec: str | os.PathLike[str] | Task) -> Task:
    """The task a user means by ``spec``: a registered name or a user file path (rules: module docstring).

    The returned task's ``name`` is safe as a folder name; its ``ref`` resolves to it again (the registered
    name, or the file's absolute path). Errors are ``ValueError`` / ``FileNotFoundError`` subclasses whose
    message says what to fix.
    """
    if isinstance(spec, Task):
        return spec
    if not isinstance(spec, str | os.PathLike):
        raise UnknownTaskError(f"a task is a name or a file path, not {type(spec).__name__} ({spec!r})")
    s = os.fspath(spec)
    if not s.strip():
        raise UnknownTaskError(f"empty task name; known tasks: {', '.join(sorted(TASKS))}, or a file path")
    task = _registered(s)
    if task is not None:
        if user_path(s).is_file():
            raise AmbiguousTaskError(
                f"{s!r} is both the built-in task {task.name!r} and a file in {str(Path.cwd())!r}: rename the file "
                f"or give it a {'/'.join(FILE_SUFFIXES)} suffix to use it, or run from another directory to use "
                "the built-in task"
            )
        return task
    if looks_like_path(s) or user_path(s).is_file():
        return _user_file(s)
    raise _unknown(s)


def get_tasks(specs: Iterable[str | os.PathLike[str] | Task]) -> list[Task]:
    """:func:`get_task` of each spec, in order; a task given twice (same ``ref``) is kept once.

    Two *different* tasks with the same ``name`` (two user files with the same stem) raise
    :class:`TaskNameCollisionError` naming both - their results would share a run-directory folder.
    """
    if isinstance(specs, str | os.PathLike | Task):
        specs = [specs]
    out: dict[str, Task] = {}
    for spec in specs:
        task = get_task(spec)
        other = out.get(task.name)
        if other is None:
            out[task.name] = task
        elif other.ref != task.ref:
            raise TaskNameCollisionError(
                f"{other.ref!r} and {task.ref!r} would both be stored as task {task.name!r}: rename one of the "
                "files (or build the tasks with task_from_file(path, name=...))"
            )
    return list(out.values())
