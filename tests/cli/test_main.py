"""``python -m tracecal.cli`` (tracecal.cli.__main__) and ``python -m tracecal.cli.app`` run the command line."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("module", ["tracecal.cli", "tracecal.cli.app"])
def test_the_command_line_runs_as_a_module(module: str) -> None:
    r = subprocess.run([sys.executable, "-m", module, "passes"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "semantic" in r.stdout


def test_a_bad_argument_exits_2_as_a_module(tmp_path) -> None:  # type: ignore[no-untyped-def]
    missing = tmp_path / "[red]x[/red]"
    r = subprocess.run(
        [sys.executable, "-m", "tracecal.cli", "report", str(missing)], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert f"{missing}" in r.stderr and r.stderr.count("error:") == 1
