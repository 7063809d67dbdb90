"""Every exception tracecal raises on purpose derives from `TracecalError` (and keeps its builtin base)."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

from tracecal.errors import TracecalError, ValidationError

PKG = Path(__file__).resolve().parents[1] / "src" / "tracecal"
#: Modules that need an optional extra or start nothing useful on import are still imported: all must import.
SKIP = {"tracecal.cli.__main__"}


def all_modules() -> list[str]:
    out = []
    for p in sorted(PKG.rglob("*.py")):
        parts = list(p.relative_to(PKG.parent).with_suffix("").parts)
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if name not in SKIP:
            out.append(name)
    return out


def test_every_exception_class_derives_from_tracecal_error() -> None:
    bad = []
    for name in all_modules():
        mod = importlib.import_module(name)
        for cls_name, cls in inspect.getmembers(mod, inspect.isclass):
            if cls.__module__ != name or not issubclass(cls, BaseException) or issubclass(cls, Warning):
                continue
            if not issubclass(cls, TracecalError):
                bad.append(f"{name}.{cls_name}")
    assert not bad, f"exception classes outside the TracecalError hierarchy: {bad}"


#: A bare builtin raised where a user's input is wrong: each must be a `TracecalError` subclass (`ValidationError`
#: keeps ``ValueError``), or argued on its line with ``# internal:`` (an invariant no user input can reach).
BARE_RAISE = re.compile(r"raise (ValueError|TypeError|KeyError)\(")


def test_no_unargued_bare_value_type_or_key_error_is_raised() -> None:
    bad = [
        f"{p.relative_to(PKG.parent)}:{i}: {line.strip()}"
        for p in sorted(PKG.rglob("*.py"))
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if BARE_RAISE.search(line) and "# internal:" not in line
    ]
    assert not bad, "raise a TracecalError subclass (e.g. ValidationError) or argue it with '# internal:':\n" + (
        "\n".join(bad)
    )


def test_the_bare_raise_check_can_fail() -> None:
    assert BARE_RAISE.search('        raise ValueError(f"bad {x}")')
    assert BARE_RAISE.search("raise KeyError(name) from None")
    assert not BARE_RAISE.search("raise ValidationError(msg)") and not BARE_RAISE.search("except ValueError:")


def test_validation_error_is_a_value_error() -> None:
    assert issubclass(ValidationError, TracecalError) and issubclass(ValidationError, ValueError)
    assert str(ValidationError("x must be …")) == "x must be …"


def test_one_mapping_of_os_errors_to_messages() -> None:
    """`os_error_message`: the reason and what to do, for a command that starts again and one that resumes."""
    import errno

    from tracecal.errors import os_error_message

    full = OSError(errno.ENOSPC, "No space left on device")
    assert os_error_message(full, "/r/x") == (
        "cannot write /r/x: No space left on device; free some space and run the same command again (nothing was "
        "half-written)"
    )
    assert os_error_message(full, "/r/x", resumes=True).endswith("(what is written is kept and the run resumes)")
    ro = OSError(errno.EROFS, "Read-only file system", "/r/y")
    assert os_error_message(ro, where="another --run-dir") == (
        "cannot write /r/y: Read-only file system; the folder is read-only or immutable: make it writable or choose "
        "another --run-dir, then run again"
    )
    other = OSError(errno.EIO, "Input/output error", "/r/z")
    assert os_error_message(other) == "/r/z: Input/output error"
    assert os_error_message(other, resumes=True).endswith(
        "fix the cause and run the same command again (what is written is kept)"
    )
    assert os_error_message(OSError("plain")) == "plain"
