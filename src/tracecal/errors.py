"""The one root of tracecal's exceptions.

Every error tracecal raises on purpose derives from `TracecalError`, so an application (and tracecal's own
command line, which maps it to exit code 2 with a one-line message) can catch them all in one place. Each
concrete class also derives from the builtin it refines (``ValueError``, ``FileNotFoundError``, …), so code
that catches those keeps working.

`os_error_message` is the one mapping of an ``OSError`` (a full disk, a read-only or immutable file or folder) to a
line saying what happened and what to do; the command line, the run store and the model cache all use it.

>>> from tracecal.errors import TracecalError, ValidationError
>>> issubclass(ValidationError, TracecalError) and issubclass(ValidationError, ValueError)
True
>>> import errno
>>> print(os_error_message(OSError(errno.ENOSPC, "No space left on device", "out.json")))
cannot write out.json: No space left on device; free some space and run the same command again (nothing was ...)
"""

from __future__ import annotations

import errno
import os


class TracecalError(Exception):
    """Base class of every error tracecal raises on purpose; its message says what to fix."""


class ValidationError(TracecalError, ValueError):
    """A parameter or setting has a value outside what it accepts (`tracecal._validation`)."""


#: errno values of a disk (or quota) that is full, and of a file or folder that may not be written.
NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})
NOT_WRITABLE = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})


def os_error_advice(e: OSError, where: str = "another output path", resumes: bool = False) -> str | None:
    """What to do about ``e`` (by its errno), or None where there is nothing to add: ``where`` is what else to
    choose (an option, a variable), ``resumes`` that the command keeps what it wrote and resumes when run again."""
    if e.errno in NO_SPACE:
        kept = "what is written is kept and the run resumes" if resumes else "nothing was half-written"
        return f"free some space and run the same command again ({kept})"
    if e.errno in NOT_WRITABLE:
        return f"the folder is read-only or immutable: make it writable or choose {where}, then run again"
    return None


def os_error_message(
    e: OSError,
    what: str | os.PathLike[str] | None = None,
    where: str = "another output path",
    resumes: bool = False,
    writing: bool = True,
) -> str:
    """One line for ``e``: ``cannot write <what>: <reason>; <advice>`` for a full disk or a file or folder that may
    not be written (`os_error_advice`; ``what`` defaults to the error's file name; ``writing=False`` where the
    error may come from a read: a permission error is then ``<what>: <reason>; check that you may read it, ...``);
    ``<file>: <reason>`` for another error with a file name (e.g. a missing file); the error's own text otherwise."""
    name = os.fspath(what) if what is not None else e.filename
    reason = os.strerror(e.errno) if e.errno in NO_SPACE else e.strerror or str(e)  # not pyarrow's "Detail: ..."
    if not writing and e.errno in (errno.EACCES, errno.EPERM):
        return f"{name}: {reason}; check that you may read it and write into its folder, or choose {where}"
    advice = os_error_advice(e, where, resumes)
    if advice is None and resumes:
        advice = "fix the cause and run the same command again (what is written is kept)"
    if advice is not None:
        return f"cannot write {name}: {reason}; {advice}" if name is not None else f"{reason}; {advice}"
    if name is not None and e.strerror:
        return f"{name}: {reason}"
    return str(e) or type(e).__name__


__all__ = ["NOT_WRITABLE", "NO_SPACE", "TracecalError", "ValidationError", "os_error_advice", "os_error_message"]
