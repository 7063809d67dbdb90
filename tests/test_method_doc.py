"""The method lives inside the repository: docs/method.md holds §1 … §6, no file under src/ points outside the
repository for it (no ``shared/spec``, no ``METHOD.md``), and every section a docstring or a doc page cites exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
METHOD = ROOT / "docs" / "method.md"
OUTSIDE = re.compile(r"shared/spec|METHOD\.md|METHOD §")
CITATION = re.compile(r"method\.md (§\d+(?:\s*(?:[–,-]|and)\s*§\d+)*)")


def method_sections() -> set[int]:
    """The section numbers of docs/method.md's headings (``## §N title``)."""
    return {int(m) for m in re.findall(r"^#+ §(\d+)\b", METHOD.read_text(), flags=re.MULTILINE)}


def cited_sections(text: str) -> set[int]:
    """Every §N of every ``method.md §N`` (also ``§2–§3``, ``§3, §5``) cited in ``text``."""
    return {int(n) for group in CITATION.findall(text) for n in re.findall(r"§(\d+)", group)}


def src_files() -> list[Path]:
    return sorted(p for p in SRC.rglob("*") if p.is_file() and p.suffix in {".py", ".md", ".txt", ".toml", ".json"})


def test_the_method_has_its_six_sections() -> None:
    assert method_sections() >= set(range(1, 7))


def test_no_file_under_src_points_outside_the_repository() -> None:
    offenders = [
        f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
        for p in src_files()
        for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert not offenders, "point inside the repository (docs/method.md §N):\n" + "\n".join(offenders)


def test_every_cited_section_exists() -> None:
    sections = method_sections()
    cited: dict[int, list[str]] = {}
    pages = [*src_files(), *(ROOT / "docs").glob("*.md"), ROOT / "README.md"]
    for p in pages:
        for n in cited_sections(p.read_text(errors="replace")):
            cited.setdefault(n, []).append(str(p.relative_to(ROOT)))
    assert len(cited) >= 6, "the docstrings cite docs/method.md"
    missing = {n: files for n, files in cited.items() if n not in sections}
    assert not missing, f"sections cited but not headings of docs/method.md: {missing}"


def test_the_checks_can_fail() -> None:
    assert OUTSIDE.search("see ../shared/spec/METHOD.md") and OUTSIDE.search("(METHOD §2)")
    assert cited_sections("docs/method.md §2–§3 and (docs/method.md §4, 18–19), method.md §9") == {2, 3, 4, 9}
