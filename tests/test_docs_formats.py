"""docs/formats.md cannot rot: every fenced example carries a ``<!-- check: KIND [FILE] -->`` line and is read here
by the real reader of its kind (task files, prompts, answers, labels, calibrators), run (Python), or compared with
what tracecal writes (the traces columns, a results.json excerpt)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tracecal.calibrators import load_calibrator
from tracecal.tasks import get_task
from tracecal.tasks.files import read_answer_rows, read_labels, read_prompt_file
from tracecal.traces.io import SCHEMA, save_traces
from tracecal.traces.trace import Trace

DOC = Path(__file__).resolve().parents[1] / "docs" / "formats.md"
CHECK = re.compile(r"<!-- check: ([\w-]+)(?: (\S+))? -->\n")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)


def examples() -> list[tuple[str, str | None, str]]:
    """(kind, file name, text) of every checked example, in page order: a fenced block after its check line, or
    for ``traces-columns`` the Markdown table after it."""
    text = DOC.read_text(encoding="utf-8")
    out: list[tuple[str, str | None, str]] = []
    for m in CHECK.finditer(text):
        rest = text[m.end() :]
        if m.group(1) == "traces-columns":
            out.append((m.group(1), None, rest.split("\n\n", 1)[0]))
            continue
        block = FENCE.match(rest)
        assert block, f"{m.group(0).strip()} is not followed by a fenced block"
        out.append((m.group(1), m.group(2), block.group(2)))
    return out


def test_every_fenced_block_is_checked() -> None:
    """No example escapes the readers: as many fenced blocks on the page as checked ones."""
    text = DOC.read_text(encoding="utf-8")
    fenced = len(FENCE.findall(text))
    checked = sum(kind != "traces-columns" for kind, _, _ in examples())
    assert fenced == checked and fenced >= 12, (fenced, checked)


def _task(path: Path) -> None:
    rows = get_task(str(path)).load(on_error="raise")
    assert rows and all(r.question and r.golds for r in rows)


def _prompts(path: Path) -> None:
    prompts, ids = read_prompt_file(path)
    assert len(prompts) == len(ids) == len(path.read_text(encoding="utf-8").splitlines())


def _answers(path: Path) -> None:
    rows, bad = read_answer_rows(path, on_error="raise")
    assert rows and not bad


def _labels(path: Path) -> None:
    labels = read_labels(path)
    assert labels and set(labels.values()) <= {0, 1}


def _calibrator(path: Path) -> None:
    cal = load_calibrator(path)
    assert cal.provenance is not None and 0.0 <= float(np.ravel(cal.predict_proba(np.array([0.5])))[0]) <= 1.0


READERS: dict[str, Callable[[Path], None]] = {
    "task": _task,
    "prompts": _prompts,
    "answers": _answers,
    "labels": _labels,
    "calibrator": _calibrator,
}


def _in_folder(path: Path, run: Callable[[], Any]) -> Any:
    here = Path.cwd()
    os.chdir(path)
    try:
        return run()
    finally:
        os.chdir(here)


def _python(tmp_path: Path, name: str | None, code: str) -> None:
    """Run the example in an empty folder; ``name``: the file it must leave behind, read by its reader."""
    _in_folder(tmp_path, lambda: exec(compile(code, str(DOC), "exec"), {}))
    assert name is not None and (tmp_path / name).is_file()
    if name.endswith(".parquet"):
        _answers(tmp_path / name)


def _python_traces(tmp_path: Path, name: str | None, code: str) -> None:
    """Run the example next to a traces file of that name written by `save_traces`."""
    assert name is not None
    trace = Trace(" Paris", np.array([3, 4]), np.array([0.5, 0.1]), np.array([1.0, 0.2]), id="q1")
    save_traces([trace], tmp_path / name)
    _in_folder(tmp_path, lambda: exec(compile(code, str(DOC), "exec"), {}))


def _traces_columns(table: str) -> None:
    names = re.findall(r"^\| `(\w+)` \|", table, re.M)
    assert names == SCHEMA.names


def _results_excerpt(tmp_path: Path, text: str) -> None:
    """Every key path of the excerpt is in a results.json that tracecal writes, with a value of the same kind."""
    from tracecal.testing import write_synthetic_run

    run = write_synthetic_run(tmp_path / "run", tasks=("triviaqa",), n_per_task=20, n_seeds=2)
    real = json.loads((run / "results.json").read_text(encoding="utf-8"))

    def same_shape(shown: Any, written: Any, where: str) -> None:
        if isinstance(shown, dict):
            assert isinstance(written, dict), where
            for key, value in shown.items():
                assert key in written, f"{where}.{key} is not in results.json"
                same_shape(value, written[key], f"{where}.{key}")
        elif isinstance(shown, bool | str) or shown is None:
            assert isinstance(written, type(shown)) or written is None or shown == "...", where
        elif isinstance(shown, int | float):
            assert isinstance(written, int | float) or written is None, where
        else:
            assert isinstance(written, list), where

    same_shape(json.loads(text), real, "results")


@pytest.mark.parametrize(("kind", "name", "text"), examples(), ids=[f"{k}-{n or ''}" for k, n, _ in examples()])
def test_each_example_is_read_by_its_reader(tmp_path: Path, kind: str, name: str | None, text: str) -> None:
    if kind == "traces-columns":
        _traces_columns(text)
    elif kind == "results-excerpt":
        _results_excerpt(tmp_path, text)
    elif kind == "python":
        _python(tmp_path, name, text)
    elif kind == "python-traces":
        _python_traces(tmp_path, name, text)
    else:
        assert name is not None, f"check {kind} names no file"
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        READERS[kind](path)


def test_the_help_of_each_command_that_takes_a_file_points_here() -> None:
    """``--help`` names docs/formats.md where it mentions an input format."""
    from typer.testing import CliRunner

    from tracecal.cli.app import app

    for command in ("generate", "score-answers", "fit-calibrator", "score", "evaluate"):
        r = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"})
        assert r.exit_code == 0 and "docs/formats.md" in r.output, (command, r.output)
