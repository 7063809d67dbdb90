"""The `tracecal.signals` package: its modules import on their own and the package says what each holds."""

from __future__ import annotations

import importlib

import tracecal.signals


def test_the_package_names_its_modules() -> None:
    for name in ("operators", "statistics", "features", "spans"):
        assert f"tracecal.signals.{name}" in (tracecal.signals.__doc__ or "")
        assert importlib.import_module(f"tracecal.signals.{name}").__doc__


def test_no_dead_exports() -> None:
    """`seg_sum`, `seg_min` and `trace_statistics` were used nowhere and are gone; what `__all__` lists exists."""
    from tracecal.signals import features, operators, spans, statistics

    assert not {"seg_sum", "seg_min"} & set(operators.__all__) and not hasattr(statistics, "trace_statistics")
    for module in (operators, statistics, features, spans):
        assert all(hasattr(module, name) for name in module.__all__), module.__name__
