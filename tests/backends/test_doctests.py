"""The examples (``>>>``) in the backends' docstrings run: `tracecal.load_model` and the package docstring."""

from __future__ import annotations

import doctest
import importlib

import pytest


@pytest.mark.parametrize("name", ["tracecal.backends", "tracecal.backends.base"])
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
