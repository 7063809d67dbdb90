"""The doctested examples of the calibrators' public API run and pass."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["tracecal.calibrators", "tracecal.calibrators.scalar", "tracecal.calibrators.traceplus"]


@pytest.mark.parametrize("name", MODULES)
def test_examples_run(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} has no doctested example"
    assert result.failed == 0
