"""The shape of the package: a top level of subpackages, no import cycles, no imports of the package `__init__`
from inside it, no private names imported across modules, the gateway / evaluation / statistics never reaching the
report renderer, every module importable on its own, with a mirrored test module and a line in docs/architecture.md's
layout, and modules / functions that fit on a screen (400 / 60 lines, no `# fmt: skip`)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PKG = SRC / "tracecal"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
TESTS = Path(__file__).resolve().parent
MAP = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"


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
    assert g["tracecal.errors"] == set()  # the root of every exception: below every floor, importing nothing
    # the foundations: the value checks import only the errors, the checked opener only those two
    assert g["tracecal._validation"] <= {"tracecal.errors"}
    assert g["tracecal._inputs"] <= {"tracecal.errors", "tracecal._validation"}
    assert g["tracecal._outputs"] <= {"tracecal.errors"}
    assert g["tracecal.traces.segments"] <= {"tracecal.errors"} and g["tracecal.traces.trace"] <= {
        "tracecal.traces.segments",
        "tracecal.version",
        "tracecal.errors",
        "tracecal._validation",
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
    skips = [m for m, p in MODULES.items() if "fmt: skip" in p.read_text() or "fmt: off" in p.read_text()]
    assert not skips, f"formatter switched off in {skips}: let `ruff format` shape the code"
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


TOP_LEVEL = {
    "tracecal",
    "tracecal.version",
    "tracecal.errors",
    "tracecal._validation",
    "tracecal._inputs",
    "tracecal._outputs",
    "tracecal.testing",
}


def test_the_top_level_holds_only_the_core_modules_and_subpackages() -> None:
    top = {module_name(p) for p in PKG.glob("*.py")}
    assert top <= TOP_LEVEL, f"modules at the top level that belong in a subpackage: {sorted(top - TOP_LEVEL)}"
    for d in (d for d in PKG.iterdir() if d.is_dir() and d.name != "__pycache__"):
        assert (d / "__init__.py").is_file(), f"{d.name}/ is not a package"


def reach(g: dict[str, set[str]], start: str) -> dict[str, str]:
    """Every module ``start`` imports directly or through others (a module imports its parent packages too),
    mapped to the module it was reached from."""

    def with_parents(t: str) -> list[str]:
        parts = t.split(".")
        return [".".join(parts[:i]) for i in range(2, len(parts))] + [t]

    seen: dict[str, str] = {}
    todo = [start]
    while todo:
        m = todo.pop()
        for t in g[m]:
            for u in with_parents(t):
                if u in MODULES and u not in seen and u != start:
                    seen[u] = m
                    todo.append(u)
    return seen


def test_reach_follows_imports_and_parent_packages() -> None:
    g = {"a.x": {"b.y.z"}, "b.y.z": {"c"}, "b.y": set(), "c": set(), "b": set()}
    saved = dict(MODULES)
    MODULES.clear()
    MODULES.update({k: Path(k) for k in g})
    try:
        assert set(reach(g, "a.x")) == {"b.y", "b.y.z", "c"}
    finally:
        MODULES.clear()
        MODULES.update(saved)


def test_serve_evaluation_and_stats_never_import_the_report() -> None:
    g = graph()
    bad = []
    for m in (m for m in MODULES if m.startswith(("tracecal.serve", "tracecal.evaluation", "tracecal.stats"))):
        hit = [t for t in reach(g, m) if t == "tracecal.report" or t.startswith("tracecal.report.")]
        bad += [f"{m} reaches {t} (through {reach(g, m)[t]})" for t in hit]
    assert not bad, "\n".join(bad)


#: Modules without a test module of their own, and why (a package `__init__` holding no code needs none).
NO_MIRRORED_TEST: dict[str, str] = {
    "tracecal.version": "one constant, read by every calibrator-file and /health test",
    "tracecal.cli.__main__": "two lines; `python -m tracecal.cli` runs in tests/cli/test_main.py",
    "tracecal.report.assets": "the page's CSS/JS/HTML templates: rendered and checked by tests/report/test_init.py",
    "tracecal.report.data": "the report's data model: built from real and synthetic runs in tests/report/test_init.py",
    "tracecal.report.plotdata": "figure inputs: every figure of tests/report/test_init.py (incl. the browser test)",
    "tracecal.report.stats": "the statistics section: asserted in tests/report/test_init.py",
}


def holds_code(path: Path) -> bool:
    """False for a module of nothing but a docstring (an empty package marker)."""
    body = ast.parse(path.read_text()).body
    return any(not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)) for n in body)


def mirrored_test(module: str) -> Path:
    """tests/<package path>/test_<module>.py (a package's __init__: test_init.py)."""
    parts = module.split(".")[1:]
    if MODULES[module].name == "__init__.py":
        parts = [*parts, "init"]
    return TESTS.joinpath(*parts[:-1], f"test_{parts[-1].lstrip('_')}.py")


def test_every_module_has_a_mirrored_test_module() -> None:
    missing = [
        f"{m}: {mirrored_test(m).relative_to(TESTS.parent)}"
        for m in MODULES
        if m not in NO_MIRRORED_TEST and holds_code(MODULES[m]) and not mirrored_test(m).is_file()
    ]
    assert not missing, "modules without their test module (or a reason in NO_MIRRORED_TEST):\n" + "\n".join(missing)
    stale = [m for m in NO_MIRRORED_TEST if m not in MODULES]
    assert not stale, f"NO_MIRRORED_TEST lists modules that no longer exist: {stale}"


def layout_section() -> str:
    text = MAP.read_text()
    start = text.index("## Layout")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def test_every_module_appears_in_the_module_map() -> None:
    section = layout_section()
    missing = [str(p.relative_to(PKG)) for p in MODULES.values() if f"`{p.relative_to(PKG)}`" not in section]
    assert not missing, "modules missing from docs/architecture.md's layout section: " + ", ".join(missing)
