"""Every exception tracecal raises on purpose derives from `TracecalError` (and keeps its builtin base)."""

from __future__ import annotations

import importlib
import inspect
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


def test_validation_error_is_a_value_error() -> None:
    assert issubclass(ValidationError, TracecalError) and issubclass(ValidationError, ValueError)
    assert str(ValidationError("x must be …")) == "x must be …"
