"""Where task rows come from: the evaluation-data folder (:func:`data_dir`), the row readers of the three
file formats (JSON lines, one JSON list, CSV) and :class:`FileSource`."""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tracecal._inputs import loads, user_path
from tracecal._inputs import read_text as read_input_text
from tracecal.tasks.example import MalformedRowError, RawRow, TaskDataError, TaskFileNotFoundError

__all__ = [
    "DATA_ENV_VAR",
    "FILE_SUFFIXES",
    "FileSource",
    "data_dir",
    "data_dir_candidates",
    "iter_csv",
    "iter_json_list",
    "iter_jsonl",
    "read_text",
    "reader_for",
]

DATA_ENV_VAR = "TRACECAL_DATA"

#: File suffixes read as task files (a task name ending in one of them is a file path).
FILE_SUFFIXES = (".jsonl", ".json", ".csv")


# ------------------------------------------------------------------------------------------ data dir


def data_dir_candidates() -> list[Path]:
    """The fixed places :func:`data_dir` looks in when neither an argument nor ``$TRACECAL_DATA`` is given.

    1. ``<cwd>/../shared/data``: the ``shared/`` folder next to the repository you run from;
    2. ``<repo>/../shared/data`` where ``<repo>`` holds this package's ``src/`` folder (a source checkout or
       an editable install; nothing for a package installed into site-packages).

    No other folder is searched (in particular not every ancestor folder).
    """
    out = [Path.cwd() / ".." / "shared" / "data"]
    here = Path(__file__).resolve()  # <repo>/src/tracecal/tasks/sources.py
    if len(here.parents) > 3 and here.parents[2].name == "src":
        out.append(here.parents[3].parent / "shared" / "data")
    return out


def data_dir(override: str | Path | None = None) -> Path:
    """The evaluation-data folder (``shared/data`` with MANIFEST.md), resolved in this order:

    1. ``override`` (e.g. a CLI ``--data-dir``), 2. the ``TRACECAL_DATA`` environment variable,
    3. the fixed candidates of :func:`data_dir_candidates`, first existing one wins. A path given explicitly
    (1 or 2) that does not exist is an error, never silently replaced; if nothing is found,
    FileNotFoundError lists every place tried.
    """
    if override is not None and str(override) != "":
        p = user_path(override)
        if p.is_dir():
            return p.resolve()
        raise FileNotFoundError(f"data directory {str(p)!r} (given explicitly) does not exist")
    env = os.environ.get(DATA_ENV_VAR, "")
    if env:
        p = user_path(env)
        if p.is_dir():
            return p.resolve()
        raise FileNotFoundError(f"data directory {str(p)!r} (from ${DATA_ENV_VAR}) does not exist")
    tried = data_dir_candidates()
    for p in tried:
        if p.is_dir():
            return p.resolve()
    places = "\n  ".join(str(p) for p in tried)
    raise FileNotFoundError(
        f"evaluation data not found: no data_dir given, ${DATA_ENV_VAR} unset, and none of these exist:\n  "
        f"{places}\nPass data_dir=... (CLI: --data-dir) or set {DATA_ENV_VAR}."
    )


# ------------------------------------------------------------------------------------------- readers


def read_text(path: Path, role: str = "task file") -> str:
    """A file's text as UTF-8 (a byte-order mark, as Excel writes one, is dropped): every row reader of this
    module reads through it, by the one checked opener (`tracecal._inputs.read_text`: a folder, FIFO or device
    refused before opening, the size bounded). :class:`TaskDataError` naming ``role`` and the path if it is not
    a regular file or not UTF-8; a missing file is a ``FileNotFoundError``."""
    return read_input_text(path, role, "text", TaskDataError)


def iter_jsonl(path: Path, role: str = "task file") -> Iterator[RawRow]:
    """Rows of a JSON-lines file; blank lines are skipped, line numbers are 1-based."""
    index = 0
    # split on "\n" only: str.splitlines() would also break at U+0085 etc., which occur inside strings
    for lineno, line in enumerate(read_text(path, role).split("\n"), start=1):
        line = line.removesuffix("\r")
        if not line.strip():
            continue
        where = f"line {lineno}"
        try:
            rec, err = loads(line), None
        except json.JSONDecodeError as e:
            rec, err = None, f"invalid JSON ({e.msg} at column {e.colno})"
        yield RawRow(str(path), where, lineno, index, rec, err)
        index += 1


def iter_json_list(path: Path, role: str = "task file") -> Iterator[RawRow]:
    """Items of a file holding one JSON list, with their list index and starting line.

    A syntax error inside the list cannot be skipped (the rest is unreadable): it always raises
    :class:`MalformedRowError` with the line of the error.
    """
    text = read_text(path, role)
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


def iter_csv(path: Path, role: str = "task file") -> Iterator[RawRow]:
    """Rows of a CSV file with a header, as ``{column: cell}``; ``line`` is where the record starts."""
    text = read_text(path, role)
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
        raise TaskDataError(f"{path}: unsupported file format {fmt!r}; use .jsonl, .json (a list) or .csv")
    return _READERS[fmt]


@dataclass(frozen=True)
class FileSource:
    """Rows from one file; ``relative`` paths are resolved inside :func:`data_dir`."""

    path: str
    fmt: str | None = None
    relative: bool = True

    def describe(self) -> str:
        """Where the rows come from, for messages and ``repr``."""
        return f"<data_dir>/{self.path}" if self.relative else self.path

    def resolve(self, data_dir_override: str | Path | None = None) -> Path:
        """The file's path; :class:`TaskFileNotFoundError` if it does not exist."""
        if not self.relative:
            p = user_path(self.path)
        else:
            p = data_dir(data_dir_override) / self.path
        if p.is_dir():
            raise TaskFileNotFoundError(f"task data file {p} is a folder: give the path of a file")
        if not p.is_file():
            raise TaskFileNotFoundError(f"task data file not found: {p}")
        return p

    def rows(self, data_dir_override: str | Path | None = None) -> tuple[str, Iterator[RawRow]]:
        """(the file's path as text, an iterator over its rows)."""
        p = self.resolve(data_dir_override)
        return str(p), reader_for(p, self.fmt)(p)
