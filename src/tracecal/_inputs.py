"""The one checked opener of user-supplied files: every reader of a file a user names (calibrator, traces,
task, answers and labels files, a run's config.json, a results file) opens it through here.

`open_input` refuses, before opening, what is not a regular file where one is expected (a folder, a FIFO, a
device such as ``/dev/zero``, a socket: ``os.stat``, so a FIFO never blocks the command), refuses a file larger
than the stated bound of its kind (`LIMITS`), and opens it without blocking (``O_NONBLOCK``, the type checked
again on the open descriptor, so a file swapped for a FIFO after the check is refused too). `read_bytes`,
`read_text` and `read_json` read at most that bound; every error they raise names the file's role and path
first (``--calibrator cal.json: not JSON at line 1 column 1 (Expecting value)``).

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> read_json(d, "--calibrator")
Traceback (most recent call last):
    ...
tracecal._inputs.UserFileError: --calibrator ... is a folder: give the path of a file
>>> _ = (d / "cal.json").write_text("{1")
>>> read_json(d / "cal.json", "--calibrator")
Traceback (most recent call last):
    ...
tracecal._inputs.UserFileError: --calibrator .../cal.json: not JSON at line 1 column 2 (Expecting property name ...)
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from tracecal._validation import check_path
from tracecal.errors import TracecalError

__all__ = [
    "LIMITS",
    "UserFileError",
    "UserFileNotFoundError",
    "check_file",
    "loads",
    "user_path",
    "open_input",
    "read_bytes",
    "read_json",
    "read_text",
    "shown_path",
    "size",
    "where",
]

#: The most bytes read of each kind of input file (a larger file is refused, naming the bound): a JSON document
#: (calibrator, config.json, results), a text file of rows (task, answers, labels files) and a Parquet file.
LIMITS = {"json": 256 << 20, "text": 2 << 30, "parquet": 16 << 30}

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class UserFileError(TracecalError, ValueError):
    """A user-supplied file is not a regular file, is larger than its bound, or does not parse: the message
    starts with the file's role and path (`where`)."""


class UserFileNotFoundError(TracecalError, FileNotFoundError):
    """A user-supplied file that does not exist: ``<role> not found: <path>``."""


def size(n: int) -> str:
    """A byte count as people read it: ``256 MiB``, ``1,024 bytes``."""
    return f"{n >> 20:,} MiB" if n >= 1 << 20 else f"{n:,} bytes"


def shown_path(path: str | os.PathLike[str]) -> str:
    """``path`` for a message: a control character in it written as its escape (a newline as ``\\n``), so the
    one-line message of the CLI keeps it apart from a space."""
    return re.sub("[\x00-\x1f\x7f-\x9f]", lambda m: repr(m.group())[1:-1], os.fspath(path))


def where(path: str | os.PathLike[str], role: str) -> str:
    """How an error names an input file: ``"<role> <path>"`` (``"--calibrator cal.json"``; `shown_path`)."""
    return f"{role} {shown_path(path)}".strip()


def _refuse_kind(mode: int, path: str | os.PathLike[str], role: str, error: type[Exception]) -> None:
    for test, kind in _KINDS:
        if test(mode):
            raise error(f"{where(path, role)} is {kind}: give the path of a file")


def check_file(
    path: str | os.PathLike[str],
    role: str,
    kind: str = "json",
    error: type[Exception] = UserFileError,
    limit: int | None = None,
) -> os.stat_result:
    """The ``os.stat`` of ``path`` if it is a regular file within ``limit`` bytes (default ``LIMITS[kind]``); else
    ``error`` naming ``role`` and ``path`` (a missing file: a ``FileNotFoundError``, ``error`` itself if it is
    one). Opens nothing (a FIFO is never waited on)."""
    check_path(path, role)
    missing = error if issubclass(error, FileNotFoundError) else UserFileNotFoundError
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise missing(f"{role} not found: {shown_path(path)}") from None
    except OSError as e:
        raise error(f"{where(path, role)}: cannot read it ({e.strerror or e})") from None
    _refuse_kind(st.st_mode, path, role, error)
    limit = LIMITS[kind] if limit is None else limit
    if st.st_size > limit:
        raise error(f"{where(path, role)}: {st.st_size:,} bytes, larger than the {size(limit)} it may have")
    return st


def open_input(
    path: str | os.PathLike[str],
    role: str,
    kind: str = "json",
    error: type[Exception] = UserFileError,
    limit: int | None = None,
) -> BinaryIO:
    """``path`` opened for reading in binary after `check_file` (non-blocking open, its type checked again on
    the descriptor): the caller reads at most ``LIMITS[kind]`` bytes of it (`read_bytes`) or hands it to a parser
    that reads a regular file (pyarrow)."""
    check_file(path, role, kind, error, limit)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise error(f"{where(path, role)}: cannot open it ({e.strerror or e})") from None
    try:
        _refuse_kind(os.fstat(fd).st_mode, path, role, error)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def read_bytes(
    path: str | os.PathLike[str],
    role: str,
    kind: str = "json",
    error: type[Exception] = UserFileError,
    limit: int | None = None,
) -> bytes:
    """At most ``limit`` (default ``LIMITS[kind]``) bytes of the regular file ``path`` (`open_input`; a file
    that grew past the bound while read is refused)."""
    limit = LIMITS[kind] if limit is None else limit
    with open_input(path, role, kind, error, limit) as f:
        try:
            data = f.read(limit + 1)
        except OSError as e:
            raise error(f"{where(path, role)}: cannot read it ({e.strerror or e})") from None
    if len(data) > limit:
        raise error(f"{where(path, role)}: larger than the {size(limit)} it may have")
    return data


def read_text(
    path: str | os.PathLike[str],
    role: str,
    kind: str = "text",
    error: type[Exception] = UserFileError,
    limit: int | None = None,
) -> str:
    """The UTF-8 text of ``path`` (a byte-order mark dropped), bounded as `read_bytes`; text that is not UTF-8 is
    refused naming the byte offset."""
    data = read_bytes(path, role, kind, error, limit)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise error(f"{where(path, role)}: not UTF-8 text (byte {e.start}: {e.reason}); save it as UTF-8") from None


def user_path(path: str | os.PathLike[str]) -> Path:
    """``path`` with a leading ``~`` / ``~user`` expanded (``Path.expanduser``); a ``~user`` of no user is refused
    naming the path (`UserFileNotFoundError`), not with Python's bare "Could not determine home directory"."""
    try:
        return Path(path).expanduser()
    except RuntimeError:
        raise UserFileNotFoundError(f"{os.fspath(path)}: no such user's home folder to expand the ~ of") from None


def loads(text: str) -> Any:
    """``json.loads(text)`` with every way it can fail a ``json.JSONDecodeError``: also a number of more digits
    than Python converts (4,300: a ``ValueError`` of its own) and nesting deeper than the interpreter's stack (a
    ``RecursionError``), which every reader of JSON a user gives would otherwise let through unnamed."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply", text, 0) from None
    except ValueError as e:  # "Exceeds the limit (4300 digits) for integer string conversion"
        raise json.JSONDecodeError(f"a number too long to read ({str(e).split(':')[0]})", text, 0) from None


def read_json(
    path: str | os.PathLike[str],
    role: str,
    error: type[Exception] = UserFileError,
    limit: int | None = None,
    hook: Callable[[Any], Any] | None = None,
) -> Any:
    """The JSON document in ``path`` (bounded and decoded as `read_text`); one that does not parse is refused
    naming the line and column (``not JSON at line 3 column 7 (Expecting ',' delimiter)``) or its nesting."""
    text = read_text(path, role, "json", error, limit)
    try:
        doc = loads(text)
    except json.JSONDecodeError as e:
        if e.msg == "nested too deeply":
            raise error(f"{where(path, role)}: not JSON tracecal reads: nested too deeply") from None
        raise error(f"{where(path, role)}: not JSON at line {e.lineno} column {e.colno} ({e.msg})") from None
    return hook(doc) if hook is not None else doc
