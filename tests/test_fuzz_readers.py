"""A fuzzing harness over the readers of user files (issue #37, item 6): a valid file of each kind (traces in
Parquet and JSONL, a calibrator, a prompts, labels, answers and task file, a results file, a run's config.json)
mutated (truncated, a byte changed, a byte-order mark, a line repeated, control characters, a JSON value replaced by
null / a list / a number / a huge string, an id made null or a number) must be read or refused with a
`TracecalError` whose message names the file: never another exception (a ``KeyError``, a ``TypeError``, pyarrow's
own), never a traceback for the CLI to show.

``TRACECAL_FUZZ_EXAMPLES`` sets the examples per reader (default 15; docs/reliability.md reports a larger run).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzzing import fuzz_settings
from tracecal.errors import TracecalError

EXAMPLES = int(os.environ.get("TRACECAL_FUZZ_EXAMPLES", "15"))


def _traces(path: Path) -> None:
    from tracecal.traces.io import save_traces
    from tracecal.traces.trace import Trace

    traces = [
        Trace(text=f"a{i}", token_ids=[1, 2], surprisal=[0.1, 0.2], entropy=[0.3, 0.4], id=f"q{i}") for i in (0, 1)
    ]
    save_traces(traces, path)


def _traces_jsonl(path: Path) -> None:
    from tracecal.traces.io import export_jsonl
    from tracecal.traces.trace import Trace

    export_jsonl([Trace(text="a", token_ids=[1], surprisal=[0.1], entropy=[0.3], id="q0")], path)


def _calibrator(path: Path) -> None:
    from tracecal.calibrators import make_calibrator

    rng = np.random.default_rng(0)
    make_calibrator("platt").fit(rng.random(40), (rng.random(40) > 0.5).astype(int)).save(path)


def _results(path: Path) -> None:
    from tracecal.testing import write_synthetic_run

    run = path.parent / "run"
    write_synthetic_run(run, tasks=("svamp",), n_per_task=20)
    path.write_bytes((run / "results.json").read_bytes())


def _run(path: Path) -> None:
    from tracecal.testing import write_synthetic_run

    write_synthetic_run(path.parent, tasks=("svamp",), n_per_task=20)


def _read_results(path: Path) -> Any:
    from tracecal.analysis.cross_model import read_results

    return read_results(path)


def _read_config(path: Path) -> Any:
    from tracecal.evaluation.runstore import RunStore

    return RunStore(path.parent).config()


def _answers(path: Path) -> Any:
    from tracecal.tasks.files import read_answer_rows

    return read_answer_rows(path, on_error="skip")


def _task_rows(path: Path) -> Any:
    from tracecal.tasks.sources import iter_jsonl

    return list(iter_jsonl(path))


#: reader name → (file name, how to write a valid one, how to read it).
READERS: dict[str, tuple[str, Callable[[Path], None], Callable[[Path], Any]]] = {
    "traces (Parquet)": ("t.parquet", _traces, lambda p: __import__("tracecal.traces.io").traces.io.load_traces(p)),
    "traces (JSONL)": ("t.jsonl", _traces_jsonl, lambda p: __import__("tracecal.traces.io").traces.io.import_jsonl(p)),
    "calibrator": (
        "cal.json",
        _calibrator,
        lambda p: __import__("tracecal.calibrators").calibrators.load_calibrator(p),
    ),
    "prompts file": (
        "p.jsonl",
        lambda p: p.write_text(
            '{"id": "a", "prompt": "hi"}\n{"id": "b", "prompt": [{"role": "user", "content": "x"}]}\n'
        ),
        lambda p: __import__("tracecal.tasks.files").tasks.files.read_prompt_file(p),
    ),
    "labels file": (
        "l.csv",
        lambda p: p.write_text("id,label\na,1\nb,0\n"),
        lambda p: __import__("tracecal.tasks.files").tasks.files.read_labels(p),
    ),
    "answers file": (
        "a.jsonl",
        lambda p: p.write_text(
            '{"id": "a", "prompt": "q?", "answer": "x"}\n{"id": "b", "prompt": "r?", "answer": "y"}\n'
        ),
        _answers,
    ),
    "task file": (
        "task.jsonl",
        lambda p: p.write_text('{"id": "a", "question": "q?", "answer": "x"}\n'),
        _task_rows,
    ),
    "results file": ("results.json", _results, _read_results),
    "run config.json": ("config.json", _run, _read_config),
}

#: Readers for which a folder is an input of its own (a folder of shards, a run directory's results.json).
TAKE_FOLDERS = {"traces (Parquet)", "results file"}

CONTROL = ["\x1b[2J", "\x00", "\x1b]0;t\x07", "\u202e", "\r"]
REPLACEMENTS = ["null", "[]", "{}", "-1", "1e999", "true", '"' + "x" * 100_000 + '"', '"\\ud800"', '"\x1b[2J"']


@st.composite
def mutations(draw: Any, data: bytes) -> bytes:
    """``data`` mutated one way (truncated, a byte changed, a BOM, a line repeated, control characters, a JSON
    value replaced, an id made null / a number)."""
    kind = draw(st.sampled_from(["truncate", "byte", "bom", "repeat", "control", "value", "id", "empty", "huge"]))
    n = len(data)
    at = draw(st.integers(0, max(n - 1, 0)))
    if kind == "truncate":
        return data[:at]
    if kind == "byte":
        return data[:at] + bytes([draw(st.integers(0, 255))]) + data[at + 1 :]
    if kind == "bom":
        return b"\xef\xbb\xbf" + data
    if kind == "repeat":
        lines = data.splitlines(keepends=True) or [data]
        i = draw(st.integers(0, len(lines) - 1))
        return b"".join(lines[: i + 1] + [lines[i]] + lines[i + 1 :])
    if kind == "control":
        return data[:at] + draw(st.sampled_from(CONTROL)).encode() + data[at:]
    if kind == "empty":
        return b""
    if kind == "huge":
        return data + b"\n" + b"9" * 200_000 + b"\n"
    text = data.decode("utf-8", "replace")
    if kind == "id":
        return text.replace(
            '"id": "a"', draw(st.sampled_from(['"id": null', '"id": 7', '"id": ["a"]', '"id": ""']))
        ).encode()
    # a JSON value replaced: the value after the ``at``-th colon
    colons = [i for i, c in enumerate(text) if c == ":"]
    if not colons:
        return data
    i = colons[at % len(colons)] + 1
    end = i
    while end < len(text) and text[end] not in ",}\n]":
        end += 1
    return (text[:i] + " " + draw(st.sampled_from(REPLACEMENTS)) + text[end:]).encode()


@pytest.fixture(scope="module")
def seeds() -> Any:
    """A valid file of every reader's kind, in a folder of its own."""
    root = Path(tempfile.mkdtemp(prefix="tracecal-readers-"))
    out = {}
    for name, (file, write, read) in READERS.items():
        folder = root / name.replace(" ", "_").replace("(", "").replace(")", "")
        folder.mkdir()
        path = folder / file
        write(path)
        read(path)  # the valid file reads
        out[name] = path
    return out


@pytest.mark.parametrize("name", sorted(READERS))
def test_a_mutated_file_is_read_or_refused_naming_it(name: str, seeds: dict[str, Path]) -> None:
    path = seeds[name]
    original = path.read_bytes()
    read = READERS[name][2]

    @fuzz_settings(EXAMPLES)
    @given(mutated=mutations(original))
    def run(mutated: bytes) -> None:
        path.write_bytes(mutated)
        try:
            read(path)
        except TracecalError as e:
            named = str(path) in str(e) or (name == "run config.json" and str(path.parent) in str(e))
            assert named, f"{name}: the message does not name the file: {e}"
        finally:
            path.write_bytes(original)

    run()


def test_every_reader_refuses_a_folder_and_a_missing_file_by_name(seeds: dict[str, Path]) -> None:
    for name, (_, _, read) in READERS.items():
        folder = seeds[name].parent / "a-folder.json"
        folder.mkdir(exist_ok=True)
        for bad in (folder, seeds[name].parent / "missing.json"):
            if name == "run config.json" or (bad == folder and name in TAKE_FOLDERS):
                continue  # a folder is a run directory, a folder of shards: their own tests
            with pytest.raises(TracecalError, match=str(bad)):
                read(bad)
