"""`tracecal_papers` stays outside the library: nothing under src/tracecal/ imports it, `import tracecal` (and the
command line) never loads it, every module of it has its row in docs/architecture.md, and it keeps the library's
size rules (400 lines a module, 60 a function)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ROOT / "src" / "tracecal"
PAPERS = ROOT / "src" / "tracecal_papers"
MAP = ROOT / "docs" / "architecture.md"


def imported(path: Path) -> set[str]:
    """Every module an AST imports (``import a.b``, ``from a.b import c``: ``a.b``)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
    return out


def test_no_library_module_imports_the_papers_package() -> None:
    bad = [
        str(p.relative_to(ROOT))
        for p in sorted(LIBRARY.rglob("*.py"))
        if any(m == "tracecal_papers" or m.startswith("tracecal_papers.") for m in imported(p))
    ]
    assert not bad, f"the library imports tracecal_papers: {bad}"


def test_importing_tracecal_and_its_command_line_leaves_the_papers_out() -> None:
    code = (
        "import sys, tracecal, tracecal.cli.app, tracecal.secl, tracecal.analysis\n"
        "print(sorted(m for m in sys.modules if m.startswith('tracecal_papers')))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "[]"


def test_every_papers_module_has_its_row_and_fits_on_a_screen() -> None:
    text = MAP.read_text()
    section = text[text.index("## Reproducing the papers") :]
    modules = sorted(PAPERS.glob("*.py"))
    assert len(modules) >= 4
    missing = [p.name for p in modules if f"| `{p.name}` |" not in section]
    assert not missing, f"tracecal_papers modules without a row in docs/architecture.md: {missing}"
    long = [p.name for p in modules if len(p.read_text().splitlines()) > 400]
    for p in modules:
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.FunctionDef) and (node.end_lineno or node.lineno) - node.lineno >= 60:
                long.append(f"{p.name}.{node.name}")
    assert not long, f"over 400 lines a module / 60 a function: {long}"


def test_the_import_scan_can_fail(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("from tracecal_papers.evidence import headline_markdown\nimport os\n")
    assert imported(f) == {"tracecal_papers.evidence", "os"}
