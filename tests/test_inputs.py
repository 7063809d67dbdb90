"""The one checked opener of user-supplied files (tracecal._inputs): a folder, FIFO, device or socket is refused
before it is opened (a FIFO never blocks), the bytes read are bounded, a parse error names the role and path;
and every reader of a user's file (calibrator, traces, task, answers, labels, prompts, results, config.json)
goes through it: the same FIFO / ``/dev/zero`` gets the same refusal from each, at once."""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tracecal._inputs import (
    UserFileError,
    UserFileNotFoundError,
    check_file,
    open_input,
    read_bytes,
    read_json,
    read_text,
    size,
)


def _within(seconds: float, fn: Callable[[], Any]) -> BaseException | None:
    """Run ``fn`` in a thread; fail the test if it has not returned after ``seconds`` (a blocked open of a FIFO)."""
    out: list[BaseException | None] = [None]

    def target() -> None:
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out[0] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "the reader blocked"
    return out[0]


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "cal.json"
    os.mkfifo(path)
    return path


def test_not_a_regular_file_is_refused_before_opening(tmp_path: Path, fifo: Path) -> None:
    sock_path = tmp_path / "s.sock"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    try:
        cases = [
            (tmp_path, "a folder"),
            (fifo, "a FIFO (named pipe)"),
            (Path("/dev/zero"), "a character device"),
            (sock_path, "a socket"),
        ]
        for path, kind in cases:
            err = _within(5, lambda p=path: read_json(p, "--calibrator"))
            assert isinstance(err, UserFileError), err
            assert str(err) == f"--calibrator {path} is {kind}: give the path of a file"
    finally:
        sock.close()
    with pytest.raises(UserFileNotFoundError, match=f"--calibrator not found: {tmp_path / 'nope.json'}"):
        check_file(tmp_path / "nope.json", "--calibrator")


def test_reads_are_bounded_and_parse_errors_name_role_and_path(tmp_path: Path) -> None:
    p = tmp_path / "cal.json"
    p.write_text("x" * 2000)
    with pytest.raises(UserFileError, match=r"^--calibrator .*cal.json: 2,000 bytes, larger than the 1,024 bytes"):
        read_bytes(p, "--calibrator", limit=1024)
    assert read_bytes(p, "--calibrator", limit=2000) == b"x" * 2000
    assert size(256 << 20) == "256 MiB"
    p.write_text('{"a": 1,\n "b": }')
    with pytest.raises(
        UserFileError, match=r"^--calibrator .*cal.json: not JSON at line 2 column 7 \(Expecting value\)"
    ):
        read_json(p, "--calibrator")
    p.write_bytes(b'\xef\xbb\xbf{"a": 1}')  # a byte-order mark: dropped
    assert read_json(p, "--calibrator") == {"a": 1}
    p.write_bytes(b'{"a": "\xff"}')
    with pytest.raises(UserFileError, match=r"cal.json: not UTF-8 text \(byte 7: invalid start byte\)"):
        read_text(p, "answers file")
    p.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(UserFileError, match="nested too deeply"):
        read_json(p, "--calibrator")
    with open_input(p, "x") as f:
        assert f.read(1) == b"["


def test_the_error_class_of_the_caller_is_kept(tmp_path: Path) -> None:
    class Mine(ValueError):
        pass

    with pytest.raises(Mine, match="is a folder"):
        read_text(tmp_path, "task file", error=Mine)
    with pytest.raises(FileNotFoundError, match="task file not found"):
        read_text(tmp_path / "none", "task file", error=Mine)


def _readers(tmp_path: Path) -> dict[str, Callable[[Path], Any]]:
    """Every reader of a user-supplied file, by what it reads."""
    from tracecal.analysis.cross_model import read_results
    from tracecal.analysis.selective import deployed_threshold
    from tracecal.calibrators import load_calibrator
    from tracecal.cli.answers import read_answer_rows
    from tracecal.evaluation.runstore import RunStore
    from tracecal.tasks.files import read_labels, read_prompt_file
    from tracecal.tasks.sources import iter_csv, iter_json_list, iter_jsonl
    from tracecal.traces.io import import_jsonl, load_traces

    def run_config(p: Path) -> Any:
        run = tmp_path / "run"
        run.mkdir(exist_ok=True)
        target = run / "config.json"
        if target.exists() or target.is_symlink():
            target.unlink()
        target.symlink_to(p)
        return RunStore(run).config()

    return {
        "calibrator file": load_calibrator,
        "traces file": load_traces,
        "traces JSONL": import_jsonl,
        "task file (jsonl)": lambda p: list(iter_jsonl(p)),
        "task file (json)": lambda p: list(iter_json_list(p)),
        "task file (csv)": lambda p: list(iter_csv(p)),
        "answers file": lambda p: read_answer_rows(p.with_suffix(".jsonl") if p.suffix != ".jsonl" else p),
        "labels file": read_labels,
        "prompts file": read_prompt_file,
        "results file": read_results,
        "guarantee file": deployed_threshold,
        "run config.json": run_config,
    }


@pytest.mark.parametrize("what", ["fifo", "/dev/zero", "folder"])
def test_every_reader_of_a_user_file_refuses_at_once(tmp_path: Path, what: str) -> None:
    """``score-answers --calibrator FIFO`` blocked forever, ``/dev/zero`` read until memory ran out: every
    reader now refuses either at once, with one message naming the path."""
    for name, reader in _readers(tmp_path).items():
        if what == "fifo":
            path = tmp_path / f"in-{len(name)}.jsonl"
            if not path.exists():
                os.mkfifo(path)
        elif what == "folder":
            path = tmp_path / f"dir-{len(name)}.jsonl"
            path.mkdir(exist_ok=True)
        else:
            path = Path("/dev/zero")
        if name == "traces file" and what == "folder":
            continue  # a folder of traces is a folder of shards (read in name order)
        if name == "answers file" and what == "/dev/zero":
            continue  # an answers file is chosen by its suffix: /dev/zero has none (refused for that)
        err = _within(10, lambda r=reader, p=path: r(p))
        assert isinstance(err, Exception) and not isinstance(err, RecursionError | MemoryError), (name, err)
        msg, named = str(err), "config.json" if name == "run config.json" else str(path)
        if name == "results file" and what == "folder":  # a folder is a run directory: its results.json
            assert msg == f"{path / 'results.json'} not found: is {path} a scored run directory (tracecal evaluate)?"
            continue
        assert named in msg and any(k in msg for k in ("FIFO", "device", "folder")), (name, msg)


def test_the_calibrator_file_message_names_role_path_and_line(tmp_path: Path) -> None:
    from tracecal.calibrators import CalibratorFileError, load_calibrator

    p = tmp_path / "cal.json"
    p.write_text(json.dumps({"format": "tracecal.calibrator"})[:-1])
    with pytest.raises(CalibratorFileError, match=rf"^calibrator file {p}: not JSON at line 1 column \d+"):
        load_calibrator(p)


def test_score_answers_with_a_fifo_or_dev_zero_is_refused_at_once(tmp_path: Path, fifo: Path) -> None:
    """What the user sees: ``score-answers --calibrator FIFO`` (it blocked forever) and ``/dev/zero`` (it read
    until memory ran out), and a FIFO or folder as the answers file (it said 'not found'): exit 2, one line."""
    from typer.testing import CliRunner

    from tracecal.cli.app import app

    answers = tmp_path / "a.jsonl"
    answers.write_text(json.dumps({"prompt": "2+2?", "answer": "4"}) + "\n")
    out = tmp_path / "out.parquet"
    cases = [
        ([str(answers), "--calibrator", str(fifo)], f"calibrator file {fifo} is a FIFO (named pipe)"),
        ([str(answers), "--calibrator", "/dev/zero"], "calibrator file /dev/zero is a character device"),
        ([str(fifo.parent / "x.jsonl")], "answers file not found"),
        ([str(tmp_path)], f"answers file {tmp_path} is a folder: give the path of a file"),
    ]
    os.mkfifo(tmp_path / "a2.jsonl")
    cases.append(([str(tmp_path / "a2.jsonl")], f"answers file {tmp_path / 'a2.jsonl'} is a FIFO (named pipe)"))
    for args, msg in cases:
        result: list[Any] = []
        command = ["score-answers", *args, "--out", str(out)]
        err = _within(20, lambda c=command, res=result: res.append(CliRunner().invoke(app, c)))
        assert err is None and result, err
        r = result[0]
        assert r.exit_code == 2 and msg in r.output and "Traceback" not in r.output, (args, r.output)
        assert not out.exists()


def test_every_json_failure_is_a_decode_error_and_paths_are_shown_escaped(tmp_path: Path) -> None:
    from tracecal._inputs import loads, shown_path, user_path

    for text, why in (("[" + "9" * 5000 + "]", "a number too long to read"), ("[" * 100_000, "nested too deeply")):
        with pytest.raises(json.JSONDecodeError, match=why):
            loads(text)
    (tmp_path / "big.json").write_text("9" * 5000)
    with pytest.raises(UserFileError, match=r"big.json: not JSON at line 1 column 1 \(a number too long"):
        read_json(tmp_path / "big.json", "results file")
    assert shown_path("a\nb\tc\x1b[2J é") == "a\\nb\\tc\\x1b[2J é"
    with pytest.raises(UserFileNotFoundError, match=r"not found: .*a\\nb"):
        read_json(tmp_path / "a\nb", "results file")
    with pytest.raises(UserFileNotFoundError, match="~no-such-user-x/t.jsonl: no such user's home folder"):
        user_path("~no-such-user-x/t.jsonl")
