"""Generated Markdown blocks: only the text between the named markers changes, a missing pair writes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracecal.errors import ValidationError
from tracecal.evaluation.docblocks import markers, write_block


def test_only_the_named_block_is_replaced(tmp_path: Path) -> None:
    doc = tmp_path / "d.md"
    a0, a1 = markers("a")
    b0, b1 = markers("b")
    doc.write_text(f"# T\nprose\n{a0}\nold a\n{a1}\nmiddle\n{b0}\nold b\n{b1}\ntail\n", encoding="utf-8")
    write_block(doc, "\n| new a |\n\n", "a")
    assert doc.read_text(encoding="utf-8") == f"# T\nprose\n{a0}\n| new a |\n{a1}\nmiddle\n{b0}\nold b\n{b1}\ntail\n"
    write_block(doc, "again", "a")  # idempotent layout: writing twice keeps one copy
    assert doc.read_text(encoding="utf-8").count("again") == 1 and "new a" not in doc.read_text(encoding="utf-8")


@pytest.mark.parametrize("body", ["no markers at all\n", "<!-- a:end -->\n<!-- a:start -->\n", "<!-- a:start -->\n"])
def test_a_missing_or_reversed_pair_is_refused_and_nothing_written(tmp_path: Path, body: str) -> None:
    doc = tmp_path / "d.md"
    doc.write_text(body, encoding="utf-8")
    with pytest.raises(ValidationError, match="has no <!-- a:start --> … <!-- a:end --> pair"):
        write_block(doc, "x", "a")
    assert doc.read_text(encoding="utf-8") == body
