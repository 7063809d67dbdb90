"""Atomic writes of a folder (a saved SECL adapter): the folder counterpart of `tracecal._outputs.atomic_write`.

`atomic_write_dir` writes the folder's files into a temporary sibling folder, flushes them to disk and renames the
sibling into place, so a crash, a full disk or an error of the writer never leaves a half-written folder and an
earlier folder stays as it was. It never writes over what it did not write itself: `check_output_dir` refuses a
path that is a file (or a device, ``/dev/stdout``), a folder that holds one of the writer's inputs, and a non-empty
folder that is not an earlier output of the same kind (its ``marker`` file present, nothing but its ``names``).
A symbolic link to a folder is followed: its target is replaced and the link kept. An ``OSError`` names the
folder, not its temporary sibling.

>>> import pathlib, tempfile
>>> out = pathlib.Path(tempfile.mkdtemp()) / "adapter"
>>> kind = FolderKind("a saved adapter", marker="a.json", names=frozenset({"a.json"}))
>>> atomic_write_dir(out, lambda d: (pathlib.Path(d) / "a.json").write_text("{}"), kind)
>>> sorted(p.name for p in out.iterdir())
['a.json']
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from tracecal._outputs import FILE_MODE, InputPaths
from tracecal.errors import ValidationError

__all__ = ["FolderKind", "atomic_write_dir", "check_output_dir"]

DIR_MODE = FILE_MODE | ((FILE_MODE & 0o444) >> 2)  # 0o666 & ~umask, plus x wherever r: 0o755 under umask 022
_SHOWN = 4  # entries of a refused folder named in the message


class FolderKind(NamedTuple):
    """What an output folder holds: ``what`` (how a message names it), the ``marker`` file every such folder has,
    and every name such a folder may hold (a folder with another entry is not replaced: it holds the user's
    files)."""

    what: str
    marker: str
    names: frozenset[str]


def _is_kind(real: Path, entries: list[str], kind: FolderKind) -> bool:
    return kind.marker in entries and set(entries) <= kind.names and (real / kind.marker).is_file()


def check_output_dir(
    path: str | os.PathLike[str], kind: FolderKind, inputs: InputPaths = (), option: str = "the output folder"
) -> None:
    """Refuse (`ValidationError` naming ``option``) to write the folder ``path``: when it is not a folder (a file,
    a device), when one of ``inputs`` is that folder or lies inside it (``(what, path)`` pairs, a None path is an
    input not given), or when it is a non-empty folder that is not an earlier output of ``kind``. A new or empty
    folder, or one written before as ``kind``, passes."""
    real = Path(os.path.realpath(path))
    for what, given, *_ in inputs:
        if given is None or not os.path.exists(given):
            continue
        source = Path(os.path.realpath(given))
        if source == real:
            raise ValidationError(
                f"{option} {path} is the {what} {given}: writing it would destroy that input; give another folder"
            )
        if real in source.parents:
            raise ValidationError(
                f"{option} {path} holds the {what} {given}: the folder is replaced whole, which would destroy "
                "that input; give another folder"
            )
    try:
        mode = os.stat(path).st_mode  # the path itself: /dev/stdout resolves to no real folder name
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(mode):
        raise ValidationError(f"{option} {path} is not a folder (a file or a device): give a folder for {kind.what}")
    entries = sorted(os.listdir(real))
    if entries and not _is_kind(real, entries, kind):
        shown = ", ".join(repr(e) for e in entries[:_SHOWN]) + (", ..." if len(entries) > _SHOWN else "")
        raise ValidationError(
            f"{option} {path} is not empty and is not {kind.what} (it holds {shown}): tracecal replaces only a folder "
            "it wrote; choose a new or empty folder"
        )


def _fsync_tree(folder: Path) -> None:
    """Flush every file under ``folder`` and the folder itself to disk (a full disk shows here at the latest)."""
    for p in [*sorted(folder.rglob("*")), folder]:
        if p.is_dir() or p.is_file():
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        if p.is_file():
            os.chmod(p, FILE_MODE)


def _swap(tmp: Path, real: Path) -> None:
    """Put ``tmp`` at ``real``: one rename over a missing or empty folder; for an earlier output, the old folder is
    renamed aside first, then removed (put back if the second rename fails)."""
    try:
        os.replace(tmp, real)
        return
    except OSError as e:
        if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
    old = Path(tempfile.mkdtemp(prefix=f".{real.name}.", suffix=".old.tmp", dir=real.parent))
    old.rmdir()
    os.rename(real, old)
    try:
        os.rename(tmp, real)
    except OSError:
        os.rename(old, real)
        raise
    shutil.rmtree(old, ignore_errors=True)


def atomic_write_dir(
    path: str | os.PathLike[str],
    write: Callable[[str], object],
    kind: FolderKind,
    inputs: InputPaths = (),
    option: str = "the output folder",
) -> None:
    """Write the folder ``path`` by calling ``write(name)`` with the name of an empty folder to fill.

    Checked first with `check_output_dir` (never a file, a device, a folder holding an input, or a non-empty folder
    that is not an earlier output of ``kind``). The files are written into a temporary sibling folder, flushed to
    disk and renamed into place; an error (a full disk, a read-only folder, an error of ``write``) leaves the earlier
    folder as it was and no temporary folder, and an ``OSError`` of the OS is re-raised naming ``path``.
    """
    check_output_dir(path, kind, inputs, option)
    real = Path(os.path.realpath(path))
    tmp: Path | None = None
    try:
        real.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{real.name}.", suffix=".tmp", dir=real.parent))
        write(str(tmp))
        _fsync_tree(tmp)
        os.chmod(tmp, DIR_MODE)  # mkdtemp makes 0700; give the folder the usual permissions
        _swap(tmp, real)
        tmp = None
    except OSError as e:
        named = e.filename is None or str(e.filename).startswith(str(real.parent / f".{real.name}."))
        if type(e).__module__ == "builtins" and e.errno is not None and named:
            raise OSError(e.errno, e.strerror, os.fspath(path)) from e
        raise
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
