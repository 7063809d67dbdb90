"""The examples in the docstrings run: every module whose docstrings hold ``>>>`` examples is doctested, and
the public API's entry points carry one."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

import tracecal

PKG = Path(__file__).resolve().parents[1] / "src" / "tracecal"


def modules_with_examples() -> list[str]:
    out = []
    for p in sorted(PKG.rglob("*.py")):
        if ">>>" in p.read_text():
            parts = list(p.relative_to(PKG.parent).with_suffix("").parts)
            out.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


@pytest.mark.parametrize("name", modules_with_examples())
def test_docstring_examples_run(name: str) -> None:
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    result = doctest.testmod(importlib.import_module(name), optionflags=flags, verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"


@pytest.mark.parametrize(
    "obj",
    ["load_model", "trace_confidence", "risk_spans", "TracePlus", "load_calibrator"],
)
def test_public_api_entry_points_have_examples(obj: str) -> None:
    doc = getattr(tracecal, obj).__doc__ or ""
    assert ">>>" in doc, f"tracecal.{obj} has no doctested example"
