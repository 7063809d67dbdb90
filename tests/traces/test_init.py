"""`tracecal.traces` (the package): the lowest floor; its modules import nothing of tracecal above it."""

from __future__ import annotations

import ast
from pathlib import Path

import tracecal.traces

PKG = Path(tracecal.traces.__file__).parent


def test_the_traces_modules_import_nothing_above_them() -> None:
    allowed = ("tracecal.traces", "tracecal.errors", "tracecal.version", "tracecal._inputs", "tracecal._validation")
    allowed += ("tracecal._outputs",)
    for path in PKG.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tracecal"):
                assert str(node.module).startswith(allowed), f"{path.name} imports {node.module}"
