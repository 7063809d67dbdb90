"""Core task types: :class:`Example`, :class:`Task`, the registry, data-dir resolution and row readers."""

from __future__ import annotations

import csv
import difflib
import io
import json
import os
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from tracecal.tasks import prompts
from tracecal.tasks.labels import Labeller, get_labeller

__all__ = [
    "DATA_ENV_VAR",
    "EmptyTaskFileError",
    "Example",
    "MalformedRowError",
    "MalformedRowWarning",
    "RawRow",
    "RowError",
    "TASKS",
    "Task",
    "TaskDataError",
    "UnknownTaskError",
    "data_dir",
    "get_task",
    "register_task",
]

DATA_ENV_VAR = "TRACECAL_DATA"


# ------------------------------------------------------------------------------------------- errors


class TaskDataError(ValueError):
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


class UnknownTaskError(ValueError):
    """``get_task`` was given a name that is not registered."""


class RowError(ValueError):
    """Raised by a row parser for a malformed row (the loader adds file and line)."""


# ------------------------------------------------------------------------------------------ Example


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


# ------------------------------------------------------------------------------------------ data dir


def data_dir(override: str | Path | None = None) -> Path:
    """The evaluation-data folder (``shared/data`` with MANIFEST.md), resolved in this order:

    1. ``override`` (e.g. a CLI ``--data-dir``), 2. the ``TRACECAL_DATA`` environment variable,
    3. ``../shared/data`` relative to the current working directory, 4. the first ``shared/data`` folder
    found walking up from this source file. A path given explicitly (1 or 2) that does not exist is an
    error, never silently replaced; if nothing is found, FileNotFoundError lists every place tried.
    """
    if override is not None and str(override) != "":
        p = Path(override).expanduser()
        if p.is_dir():
            return p.resolve()
        raise FileNotFoundError(f"data directory {str(p)!r} (given explicitly) does not exist")
    env = os.environ.get(DATA_ENV_VAR, "")
    if env:
        p = Path(env).expanduser()
        if p.is_dir():
            return p.resolve()
        raise FileNotFoundError(f"data directory {str(p)!r} (from ${DATA_ENV_VAR}) does not exist")
    tried = [Path.cwd() / ".." / "shared" / "data"]
    tried += [parent / "shared" / "data" for parent in Path(__file__).resolve().parents]
    for p in tried:
        if p.is_dir():
            return p.resolve()
    places = "\n  ".join(str(p) for p in tried)
    raise FileNotFoundError(
        f"evaluation data not found: no data_dir given, ${DATA_ENV_VAR} unset, and none of these exist:\n  "
        f"{places}\nPass data_dir=... (CLI: --data-dir) or set {DATA_ENV_VAR}."
    )


# ------------------------------------------------------------------------------------------- readers


class RawRow(NamedTuple):
    """One row as read from a source, before parsing. ``error`` is set when it could not be read."""

    path: str
    where: str  # "line 7", "list index 3 (line 22)", "row 5"
    line: int | None
    index: int  # 0-based position among the data rows
    record: Any
    error: str | None = None


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as e:
        raise TaskDataError(f"{path}: not UTF-8 text ({e})") from None


def iter_jsonl(path: Path) -> Iterator[RawRow]:
    """Rows of a JSON-lines file; blank lines are skipped, line numbers are 1-based."""
    index = 0
    # split on "\n" only: str.splitlines() would also break at U+0085 etc., which occur inside strings
    for lineno, line in enumerate(_read_text(path).split("\n"), start=1):
        line = line.removesuffix("\r")
        if not line.strip():
            continue
        where = f"line {lineno}"
        try:
            rec, err = json.loads(line), None
        except json.JSONDecodeError as e:
            rec, err = None, f"invalid JSON ({e.msg} at column {e.colno})"
        yield RawRow(str(path), where, lineno, index, rec, err)
        index += 1


def iter_json_list(path: Path) -> Iterator[RawRow]:
    """Items of a file holding one JSON list, with their list index and starting line.

    A syntax error inside the list cannot be skipped (the rest is unreadable): it always raises
    :class:`MalformedRowError` with the line of the error.
    """
    text = _read_text(path)
    dec = json.JSONDecoder()
    n = len(text)

    def skip_ws(i: int) -> int:
        while i < n and text[i] in " \t\r\n":
            i += 1
        return i

    i = skip_ws(0)
    if i == n:
        return
    if text[i] != "[":
        raise TaskDataError(f"{path}: expected a JSON list of objects")
    i = skip_ws(i + 1)
    if i < n and text[i] == "]":
        return
    index, line, pos = 0, 1, 0
    while True:
        line += text.count("\n", pos, i)
        pos = i
        try:
            rec, end = dec.raw_decode(text, i)
        except json.JSONDecodeError as e:
            raise MalformedRowError(
                str(path),
                f"list index {index} (line {e.lineno})",
                f"invalid JSON ({e.msg}); cannot read on",
                line=e.lineno,
                index=index,
            ) from None
        yield RawRow(str(path), f"list index {index} (line {line})", line, index, rec)
        i = skip_ws(end)
        if i < n and text[i] == ",":
            i, index = skip_ws(i + 1), index + 1
            continue
        if i < n and text[i] == "]" and skip_ws(i + 1) == n:
            return
        bad_line = text.count("\n", 0, i) + 1
        raise MalformedRowError(
            str(path),
            f"line {bad_line}",
            "invalid JSON (expected ',' or a final ']')",
            line=bad_line,
            index=index,
        )


def iter_csv(path: Path) -> Iterator[RawRow]:
    """Rows of a CSV file with a header, as ``{column: cell}``; ``line`` is where the record starts."""
    text = _read_text(path)
    reader = csv.reader(io.StringIO(text, newline=""))  # \n, \r\n, \r only (not U+0085 etc.)
    try:
        header = next(reader)
    except StopIteration:
        return
    except csv.Error as e:
        raise TaskDataError(f"{path}: unreadable CSV header ({e})") from None
    header = [h.strip() for h in header]
    index, prev_end = 0, reader.line_num
    while True:
        start = prev_end + 1
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            raise MalformedRowError(str(path), f"line {start}", f"unreadable CSV ({e})", line=start) from None
        prev_end = reader.line_num
        if not any(c.strip() for c in cells):
            continue
        where = f"line {start}"
        if len(cells) != len(header):
            err = f"expected {len(header)} fields (as in the header), got {len(cells)}"
            yield RawRow(str(path), where, start, index, None, err)
        else:
            yield RawRow(str(path), where, start, index, dict(zip(header, cells, strict=True)))
        index += 1


_READERS: dict[str, Callable[[Path], Iterator[RawRow]]] = {
    "jsonl": iter_jsonl,
    "json": iter_json_list,
    "csv": iter_csv,
}


def reader_for(path: Path, fmt: str | None = None) -> Callable[[Path], Iterator[RawRow]]:
    """The row reader for a file format (``jsonl``, ``json`` list, ``csv``), by default from the suffix."""
    fmt = (fmt or path.suffix.lstrip(".")).lower()
    if fmt in ("jsonlines", "ndjson"):
        fmt = "jsonl"
    if fmt not in _READERS:
        raise ValueError(f"{path}: unsupported file format {fmt!r}; use .jsonl, .json (a list) or .csv")
    return _READERS[fmt]


@dataclass(frozen=True)
class FileSource:
    """Rows from one file; ``relative`` paths are resolved inside :func:`data_dir`."""

    path: str
    fmt: str | None = None
    relative: bool = True

    def describe(self) -> str:
        return f"<data_dir>/{self.path}" if self.relative else self.path

    def resolve(self, data_dir_override: str | Path | None = None) -> Path:
        if not self.relative:
            p = Path(self.path).expanduser()
        else:
            p = data_dir(data_dir_override) / self.path
        if not p.is_file():
            raise FileNotFoundError(f"task data file not found: {p}")
        return p

    def rows(self, data_dir_override: str | Path | None = None) -> tuple[str, Iterator[RawRow]]:
        p = self.resolve(data_dir_override)
        return str(p), reader_for(p, self.fmt)(p)


# --------------------------------------------------------------------------------------------- Task

Parser = Callable[[Any, int, str], Example]


@dataclass(frozen=True, eq=False)
class Task:
    """An evaluation task: where its rows come from, how to prompt, how to label answers.

    Attributes: ``name``; ``kind`` (``qa``, ``math``, ``extractive``, ``truthful``, ``mc``: selects the
    prompt template); ``labeller`` (a :class:`~tracecal.tasks.labels.Labeller`); ``max_new_tokens``;
    ``language``; ``description``. Use :meth:`load`, :meth:`prompt`, :meth:`stop_strings`, :meth:`label`
    and :attr:`label_rule`.
    """

    name: str
    kind: str
    labeller: Labeller
    source: Any  # FileSource or another object with rows(data_dir) -> (label, Iterator[RawRow]) / describe()
    parser: Parser
    max_new_tokens: int = 0
    language: str = "en"
    description: str = ""

    def __post_init__(self) -> None:
        if self.kind not in prompts.KINDS:
            raise ValueError(f"unknown task kind {self.kind!r}; known: {', '.join(prompts.KINDS)}")
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
        if on_error not in ("skip", "raise"):
            raise ValueError(f"on_error must be 'skip' or 'raise', not {on_error!r}")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise ValueError(f"limit must be a non-negative int or None, not {limit!r}")
        if limit == 0:
            return []
        label, rows = self.source.rows(data_dir)
        out: list[Example] = []
        seen: set[str] = set()
        n_rows = n_bad = 0
        for raw in rows:
            n_rows += 1
            reason = raw.error
            ex = None
            if reason is None:
                try:
                    ex = self.parser(raw.record, raw.index, self.name)
                except RowError as e:
                    reason = str(e)
                except KeyError as e:
                    reason = f"missing field {e.args[0]!r}"
                except (TypeError, ValueError, AttributeError, IndexError) as e:
                    reason = f"{type(e).__name__}: {e}"
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
            raise ValueError(f"{len(examples)} examples but {len(answers)} answers")
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
        raise ValueError(f"a task named {task.name!r} is already registered (pass overwrite=True)")
    TASKS[task.name] = task
    return task


def get_task(name: str | Task) -> Task:
    """A registered task by name (case-insensitive, ``-`` == ``_``), or a task made from a user file.

    A name that is not registered but is the path of an existing ``.jsonl``/``.json``/``.csv`` file gives
    ``task_from_file(name)`` (alias labeller). Otherwise :class:`UnknownTaskError` lists the known names
    and suggests the closest one.
    """
    if isinstance(name, Task):
        return name
    if name in TASKS:
        return TASKS[name]
    key = str(name).strip().lower().replace("-", "_")
    if key in TASKS:
        return TASKS[key]
    p = Path(str(name)).expanduser()
    if p.suffix.lower() in (".jsonl", ".json", ".csv") and p.is_file():
        from tracecal.tasks.user import task_from_file

        return task_from_file(p)
    close = difflib.get_close_matches(key, list(TASKS), n=1, cutoff=0.5)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise UnknownTaskError(f"unknown task {name!r}; known tasks: {', '.join(sorted(TASKS))}.{hint}")
