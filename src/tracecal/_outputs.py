"""The one checked writer of tracecal's output files: every file a command or function writes goes through
`atomic_write`, after `check_output` (the counterpart of `tracecal._inputs`, the checked opener).

`atomic_write` writes a temporary file beside the target, flushes it and renames it over the target, so a crash or
a full disk never leaves a half-written file; through a symbolic link it writes the link's target; a character
device or a named pipe is written into (never replaced). It refuses to write over an input of the writer
(`check_output`: the same file through symbolic and hard links, or a folder on the way that is a file); an
``OSError`` names the target (not its temporary file). `json_safe` makes values standard JSON (NaN, ±∞ as null).
"""

from __future__ import annotations

import errno
import math
import os
import re
import stat
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from tracecal.errors import ValidationError

__all__ = ["FILE_MODE", "InputPaths", "atomic_write", "check_output", "json_safe"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


FILE_MODE = 0o666 & ~_umask()  # umask read once at import (process-wide; never toggled while threads write)
"""Permissions of the files tracecal writes: 0o666 less the process umask (read once at import)."""
_OPEN_FILE = re.compile(r"/dev/(stdin|stdout|stderr|fd/\d+)|/proc/(self|thread-self|\d+)/fd/\d+")


def _is_open_file(path: Path) -> bool:
    """Whether ``path`` (or a link on its way) names a process's open file (``/dev/stdout``): its real path is the
    file a shell redirected to, which a rename would replace under the process's feet (40 links: the kernel's cap)."""
    p = os.path.abspath(path)
    for _ in range(40):
        if _OPEN_FILE.fullmatch(p) or not os.path.islink(p):
            return _OPEN_FILE.fullmatch(p) is not None
        p = os.path.abspath(os.path.join(os.path.dirname(p), os.readlink(p)))
    return False


def _target(path: Path) -> tuple[Path, bool]:
    """(the file to write for ``path``, True when it is written into directly rather than replaced).

    Symbolic links are followed (the real file is replaced, the link kept); a character device or a named pipe
    is written into; a folder, a read-only file or another special file (block device, socket) is refused.
    """
    if _is_open_file(path):  # /dev/stdout → /proc/self/fd/1 → the shell's redirect: written into, never replaced
        return Path(path), True
    real = Path(os.path.realpath(path))
    try:
        mode = os.stat(real).st_mode
    except FileNotFoundError:
        return real, False
    if stat.S_ISREG(mode):
        if not os.access(real, os.W_OK):
            why = "read-only file: not replaced (make it writable, or write elsewhere)"
            raise PermissionError(errno.EACCES, why, str(path))
        return real, False
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return real, True
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "is a folder: give a file path", str(path))
    why = "a special file (block device or socket): tracecal writes regular files, character devices and pipes"
    raise OSError(errno.EINVAL, why, str(path))


InputPaths = Iterable[tuple[str, "str | os.PathLike[str] | None"] | tuple[str, "str | os.PathLike[str] | None", str]]
"""What a writer reads: ``(what, path)`` or ``(what, path, pattern)``; a None path is an input not given, a folder
stands for its files that match ``pattern`` (default ``*.parquet``, the shards `load_traces` reads; ``**/*``: all)."""


def check_output(path: str | os.PathLike[str], inputs: InputPaths = (), option: str = "the output") -> None:
    """Refuse (`ValidationError` naming ``option`` and the input) to write ``path`` when it is one of ``inputs``:
    the same file, through symbolic and hard links (device and inode), or when a folder on its way is a file. A path
    that does not exist yet, a character device and a named pipe (written into, never replaced) are no input's."""
    try:
        st = os.stat(path)
    except OSError as e:
        if e.errno == errno.ENOTDIR:  # say which folder is a file (creating the folders would say "File exists")
            file = next((p for p in reversed(Path(path).parents) if p.is_file()), Path(path).parent)
            raise ValidationError(f"{option} {path}: {file} is a file, not a folder; give a path in a folder") from None
        return
    if stat.S_ISDIR(st.st_mode):
        raise ValidationError(f"{option} {path} is a folder: give a file path")
    if not stat.S_ISREG(st.st_mode):
        return
    for what, given, *pattern in inputs:
        if given is None:
            continue
        g = Path(given)
        try:
            files = sorted(g.glob(pattern[0] if pattern else "*.parquet")) if g.is_dir() else [g]
        except OSError:
            continue
        for f in files:
            try:
                fs = os.stat(f)
            except OSError:
                continue
            if (fs.st_dev, fs.st_ino) == (st.st_dev, st.st_ino):
                inside = "" if f == g else f" (a file of {given})"
                raise ValidationError(
                    f"{option} {path} is the {what} {f}{inside}: writing it would destroy that input; "
                    "give another output path"
                )


def _unnamed(e: OSError, temporary: str) -> bool:
    """Whether ``e`` (of the OS or pyarrow) names no file or a temporary file (its name starts with ``temporary``):
    it is re-raised naming the target instead."""
    name = e.filename
    temp = name is None or (isinstance(name, str) and name.startswith(temporary))
    return type(e).__module__ == "builtins" and e.errno is not None and temp


def atomic_write(
    path: str | os.PathLike[str], write: Callable[[str], object], inputs: InputPaths = (), option: str = "the output"
) -> None:
    """Write ``path`` by calling ``write(name)`` with the name of the file to write.

    ``path`` must not be one of the writer's ``inputs`` (`check_output`; ``option``: how the user named it, e.g.
    ``--out``). A regular file (new or existing) is written as a temporary file next to it, flushed to disk
    (``fsync``) and renamed over it (atomic on POSIX): a crash, a full disk or an error in ``write`` leaves the old
    file as it was and no temporary file (the error, an ``OSError`` naming ``path`` for a full disk, is re-raised).
    The file gets the usual permissions `FILE_MODE`. A symbolic link is followed: its target is replaced and the
    link kept (a hard link is not: the other names keep the old content). A character device or named pipe
    (``/dev/stdout``, ``/dev/null``, a FIFO) is written into directly, never replaced. A folder, a read-only file
    and other special files are refused with an ``OSError`` (`PermissionError`, `IsADirectoryError`).
    """
    check_output(path, inputs, option)
    real, direct = _target(Path(path))
    if direct:
        write(str(real))
        return
    tmp: str | None = None
    try:
        real.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{real.name}.", suffix=".tmp", dir=real.parent)
        os.close(fd)
        write(tmp)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)  # a full disk shows here at the latest, before the old file is replaced
        finally:
            os.close(fd)
        os.chmod(tmp, FILE_MODE)  # mkstemp makes 0600; give the file the usual permissions
        os.replace(tmp, real)
    except BaseException as e:  # no other local holds the error: nothing it references (an open file) outlives it
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError) and _unnamed(e, str(real.parent / f".{real.name}.")):  # OSError(errno, ...): subclass
            raise OSError(e.errno, e.strerror, os.fspath(path)) from e
        raise


def json_safe(obj: Any) -> Any:
    """``obj`` as standard JSON values, recursively: a NaN or ±∞ float becomes None (null)."""
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_safe(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj
