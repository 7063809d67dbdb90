"""The `tracecal.cli` package: importing it is cheap (no app, no model library) until a command module is used."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import sys
import tracecal.cli
heavy = [m for m in ("torch", "transformers", "tracecal.cli.app", "typer") if m in sys.modules]
print(",".join(heavy))
"""


def test_importing_the_package_loads_nothing_heavy() -> None:
    r = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "", f"imported by `import tracecal.cli`: {r.stdout}"
