"""Generated blocks inside hand-written Markdown documents, written atomically.

A document marks where a generated block goes with two comment lines, ``<!-- NAME:start -->`` and
``<!-- NAME:end -->``; `write_block` replaces what lies between them and leaves the rest of the document as it
is, so prose and generated tables live in one file and the tables are never typed by hand (docs/results.md's
evidence tables, docs/secl.md's SECL tables).

>>> import tempfile, pathlib
>>> doc = pathlib.Path(tempfile.mkdtemp()) / "d.md"
>>> _ = doc.write_text("intro\\n<!-- t:start -->\\nold\\n<!-- t:end -->\\nend\\n", encoding="utf-8")
>>> write_block(doc, "| new |", "t")
>>> print(doc.read_text(encoding="utf-8"), end="")
intro
<!-- t:start -->
| new |
<!-- t:end -->
end
"""

from __future__ import annotations

from pathlib import Path

from tracecal._outputs import atomic_write
from tracecal.errors import ValidationError

__all__ = ["markers", "write_block"]


def markers(name: str) -> tuple[str, str]:
    """The start and end comment lines of block ``name``."""
    return f"<!-- {name}:start -->", f"<!-- {name}:end -->"


def write_block(doc: str | Path, block: str, name: str) -> None:
    """Replace the text between block ``name``'s markers in ``doc`` with ``block`` (the file is replaced
    atomically); ValidationError, and nothing written, when the document has no such pair in that order."""
    start_m, end_m = markers(name)
    text = Path(doc).read_text(encoding="utf-8")
    start, end = text.find(start_m), text.find(end_m)
    if start < 0 or end < start:
        raise ValidationError(f"{doc} has no {start_m} … {end_m} pair: add the two lines where the block goes")
    new = text[: start + len(start_m)] + "\n" + block.strip("\n") + "\n" + text[end:]
    atomic_write(doc, lambda tmp: Path(tmp).write_text(new, encoding="utf-8"))
