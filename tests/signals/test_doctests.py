"""The doctested example of `trace_confidence` (and any other in the signals) runs and passes."""

from __future__ import annotations

import doctest
import importlib

import pytest


@pytest.mark.parametrize("name", ["tracecal.signals.operators", "tracecal.signals.spans"])
def test_examples_run(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} has no doctested example"
    assert result.failed == 0
