"""`tracecal._outputs`: the one checked writer (whole or not at all, never over an input) and standard JSON. More
of `atomic_write` through its writers (links, pipes, full disks, read-only files): tests/traces/test_io.py."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from tracecal._outputs import FILE_MODE, atomic_write, check_output, json_safe
from tracecal.errors import ValidationError


def test_a_write_that_fails_leaves_the_earlier_file_whole(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    target.write_text("earlier\n")

    def half_then_fail(name: str) -> None:
        Path(name).write_text("half")
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError, match="interrupted"):
        atomic_write(target, half_then_fail)
    assert target.read_text() == "earlier\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]  # no temporary file left
    atomic_write(target, lambda name: Path(name).write_text("new\n"))
    assert target.read_text() == "new\n" and (os.stat(target).st_mode & 0o777) == FILE_MODE


def test_an_input_is_never_an_output_even_through_a_link(tmp_path: Path) -> None:
    src = tmp_path / "in.parquet"
    src.write_bytes(b"data")
    link = tmp_path / "link.parquet"
    link.symlink_to(src)
    with pytest.raises(ValidationError, match="is the traces .*in.parquet"):
        check_output(link, [("traces", src)], "--out")
    with pytest.raises(ValidationError, match="is a file, not a folder"):
        check_output(src / "x.json", [], "--out")
    check_output(tmp_path / "new.parquet", [("traces", src)])  # a new path is no input's
    assert src.read_bytes() == b"data"


def test_json_safe_makes_standard_json() -> None:
    assert json_safe({"a": [1.0, math.nan, (math.inf, "x")], "b": -math.inf}) == {
        "a": [1.0, None, [None, "x"]],
        "b": None,
    }
