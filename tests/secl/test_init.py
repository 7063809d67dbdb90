"""`tracecal.secl`: the package exports the whole SECL API under one name each."""

from __future__ import annotations

import tracecal.secl
from tracecal.stats.drift import PageHinkley


def test_every_export_is_importable_from_the_package() -> None:
    assert sorted(tracecal.secl.__all__) == tracecal.secl.__all__
    for name in tracecal.secl.__all__:
        assert getattr(tracecal.secl, name) is not None, name
    assert tracecal.secl.PageHinkley is PageHinkley
    assert not hasattr(tracecal.secl.gate, "ChangeDetector")  # the unused protocol is gone
