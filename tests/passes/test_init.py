"""`tracecal.passes` (the package): importing it registers the built-in passes and exports the registry API."""

from __future__ import annotations

import tracecal.passes as passes


def test_the_package_registers_the_builtin_passes() -> None:
    assert list(passes.PASSES)[:4] == ["traces", "extra", "semantic", "beam"]
    assert passes.get_pass("beam").provides == {"beam": passes.VECTOR}
    assert set(passes.__all__) <= set(dir(passes))
