"""The shape of the package: no import cycles, no imports of the package `__init__` from inside it, no private
names imported across modules, every module importable on its own, and modules / functions that fit on a
screen (500 / 80 lines)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PKG = SRC / "tracecal"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def imports_of(name: str) -> list[tuple[str, list[str], int]]:
    """Every import in a module's AST — top level, inside functions and under TYPE_CHECKING alike — as
    (imported module, imported names, line)."""
    path = MODULES[name]
    is_pkg = path.name == "__init__.py"
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, [], node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = name.split(".") if is_pkg else name.split(".")[:-1]
                pkg = pkg[: len(pkg) - node.level + 1]
                base = ".".join(pkg + ([node.module] if node.module else []))
            out.append((base, [a.name for a in node.names], node.lineno))
    return out


def graph() -> dict[str, set[str]]:
    """Module → tracecal modules it imports (``from pkg import sub`` counts as importing ``pkg.sub``)."""
    g: dict[str, set[str]] = {m: set() for m in MODULES}
    for m in MODULES:
        for base, names, _ in imports_of(m):
            if not base.startswith("tracecal"):
                continue
            targets = [f"{base}.{n}" for n in names if f"{base}.{n}" in MODULES] or [base]
            g[m] |= {t for t in targets if t in MODULES and t != m}
    return g


def find_cycle(g: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``g`` as a path (first node repeated at the end), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for d in sorted(g[n]):
            if state.get(d) == 1:
                return stack[stack.index(d) :] + [d]
            if d not in state and (c := visit(d)):
                return c
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(g):
        if n not in state and (c := visit(n)):
            return c
    return None


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycles_inside_tracecal() -> None:
    cycle = find_cycle(graph())
    assert cycle is None, "import cycle: " + " → ".join(cycle or [])


def test_the_lower_floors_depend_one_way() -> None:
    g = graph()
    assert g["tracecal.traces.segments"] == set() and g["tracecal.traces.trace"] <= {
        "tracecal.traces.segments",
        "tracecal.version",
    }
    upper = ("tracecal.evaluation.run", "tracecal.report", "tracecal.secl", "tracecal.passes")
    assert not any(m.startswith(upper) for m in g["tracecal.signals.operators"] | g["tracecal.traces.trace"])


def test_no_module_imports_the_package_init() -> None:
    bad = [
        f"{m}:{line}"
        for m in MODULES
        if m != "tracecal"
        for base, names, line in imports_of(m)
        if base == "tracecal" and (not names or not all(f"tracecal.{n}" in MODULES for n in names))
    ]
    assert not bad, f"modules importing the package __init__: {bad}"


def test_no_private_names_imported_across_modules() -> None:
    bad = [
        f"{m}:{line} imports {n} from {base}"
        for m in MODULES
        for base, names, line in imports_of(m)
        if base.startswith("tracecal")
        for n in names
        if n.startswith("_") and not n.startswith("__")
    ]
    assert not bad, "\n".join(bad)


def test_modules_and_functions_fit_on_a_screen() -> None:
    sizes = {m: len(p.read_text().splitlines()) for m, p in MODULES.items()}
    long_modules = [f"{m}: {n}" for m, n in sizes.items() if n > MAX_MODULE_LINES]
    long_functions = []
    for m, p in MODULES.items():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long_functions.append(f"{m}.{node.name}: {n}")
    assert not long_modules, f"modules over {MAX_MODULE_LINES} lines: {long_modules}"
    assert not long_functions, f"functions over {MAX_FUNCTION_LINES} lines: {long_functions}"


IMPORT_EACH = """
import importlib, sys, traceback
failed = []
for name in sys.argv[1:]:
    for m in [m for m in sys.modules if m == "tracecal" or m.startswith("tracecal.")]:
        del sys.modules[m]  # a fresh import of the tracecal modules (third-party ones stay cached: fast)
    try:
        importlib.import_module(name)
    except Exception:
        failed.append(name + ":\\n" + traceback.format_exc(limit=3))
print("\\n".join(failed))
sys.exit(1 if failed else 0)
"""


def test_every_module_imports_on_its_own() -> None:
    """``python -c 'import tracecal.X'`` for every module, with no other tracecal module imported before it."""
    r = subprocess.run(
        [sys.executable, "-c", IMPORT_EACH, *sorted(MODULES)], capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
