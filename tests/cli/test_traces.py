"""`tracecal generate` → `score` → `fit-calibrator` (tracecal.cli.traces), and clear errors on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import tracecal.backends as hf
from tracecal.cli.app import app
from tracecal.cli.traces import out_path
from tracecal.errors import ValidationError
from tracecal.traces.io import load_traces

runner = CliRunner()


@pytest.fixture()
def shared_model(tiny_model, monkeypatch):  # type: ignore[no-untyped-def]
    """The session's tiny model instead of loading one inside the command (plumbing only)."""
    monkeypatch.setattr(hf, "load_model", lambda *a, **k: tiny_model)
    return tiny_model


def test_generate_score_fit(tmp_path: Path, shared_model) -> None:  # type: ignore[no-untyped-def]
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(
        "\n".join(
            json.dumps({"id": f"q{i}", "prompt": p})
            for i, p in enumerate(["What is 2+2?", "Name a fruit.", "Capital of Spain?", "Say hi."])
        )
        + "\n"
    )
    out = tmp_path / "t.parquet"
    r = runner.invoke(
        app,
        [
            "generate",
            "--prompts",
            str(prompts),
            "--out",
            str(out),
            "--max-new-tokens",
            "8",
            "--jsonl",
            str(tmp_path / "t.jsonl"),
        ],
    )
    assert r.exit_code == 0, r.output
    traces = load_traces(out)
    assert [t.id for t in traces] == ["q0", "q1", "q2", "q3"]
    assert len((tmp_path / "t.jsonl").read_text().splitlines()) == 4

    labels = tmp_path / "labels.csv"
    labels.write_text("id,label\nq0,1\nq1,0\nq2,1\nq3,0\n")
    cal = tmp_path / "cal.json"
    r = runner.invoke(app, ["fit-calibrator", str(out), "--labels", str(labels), "--out", str(cal)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["score", str(out), "--calibrator", str(cal), "--csv", str(tmp_path / "s.csv")])
    assert r.exit_code == 0, r.output
    import csv

    with open(tmp_path / "s.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["id", "tokens", "stop", "c_trace", "p_trace_plus", "answer", "spans"] and len(rows) == 5
    for row in rows[1:]:  # the risky spans: character offsets into the answer
        spans = json.loads(row[6])
        assert all(row[5][s["char_start"] : s["char_end"]] == s["text"] for s in spans) and (spans or not row[5])


def test_errors_are_clear(tmp_path: Path, shared_model) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{not json\n')
    r = runner.invoke(app, ["generate", "--prompts", str(bad), "--out", str(tmp_path / "x.parquet")])
    assert r.exit_code == 2 and "bad.jsonl:2" in r.output
    corrupt = tmp_path / "c.parquet"
    corrupt.write_text("not parquet")
    r = runner.invoke(app, ["score", str(corrupt)])
    assert r.exit_code == 2 and "not a readable Parquet" in r.output
    r = runner.invoke(app, ["generate", "--out", str(tmp_path / "x.parquet")])
    assert r.exit_code == 2 and "exactly one of" in r.output


@pytest.fixture()
def traces_file(tmp_path: Path, shared_model) -> Path:  # type: ignore[no-untyped-def]
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps({"id": f"q{i}", "prompt": f"Question {i}?"}) for i in range(4)) + "\n")
    out = tmp_path / "t.parquet"
    r = runner.invoke(app, ["generate", "--prompts", str(prompts), "--out", str(out), "--max-new-tokens", "4"])
    assert r.exit_code == 0, r.output
    return out


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("noid.csv", "answer,label\nq0,1\n", "the CSV needs the columns id and label; missing: id"),
        ("lists.jsonl", '["q0", 1]\n', 'each line must be an object {"id": ..., "label": 0 or 1}'),
        ("badlabel.csv", "id,label\nq0,yes\n", "label must be 0 or 1, got 'yes'"),
        ("empty.csv", "id,label\n", "no labels found"),
        ("partial.csv", "id,label\nq0,1\n", "3 traces have no label"),
    ],
)
def test_fit_calibrator_label_errors(tmp_path: Path, traces_file: Path, name: str, content: str, message: str) -> None:
    labels = tmp_path / name
    labels.write_text(content)
    out = tmp_path / "c.json"
    r = runner.invoke(app, ["fit-calibrator", str(traces_file), "--labels", str(labels), "--out", str(out)])
    assert r.exit_code == 2 and message in r.output, r.output
    assert "Traceback" not in r.output


def test_outputs_pointing_at_folders_are_clear_errors(tmp_path: Path, traces_file: Path) -> None:
    folder = tmp_path / "dir"
    folder.mkdir()
    labels = tmp_path / "l.csv"
    labels.write_text("id,label\nq0,1\nq1,0\nq2,1\nq3,0\n")
    for args in (
        ["fit-calibrator", str(traces_file), "--labels", str(labels), "--out", str(folder)],
        ["score", str(traces_file), "--csv", str(folder)],
        ["generate", "--prompts", str(labels), "--out", str(folder)],
    ):
        r = runner.invoke(app, args)
        assert r.exit_code == 2 and f"{folder} is a folder: give a file path" in r.output, (args, r.output)


def test_out_path_makes_no_folder_and_refuses_a_folder_or_a_file_on_the_way(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "t.parquet"
    assert out_path(target, "traces") == target and not (tmp_path / "a").exists()  # made when written
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ValidationError, match=r"--out .*afile/x.parquet: .*afile is a file, not a folder"):
        out_path(tmp_path / "afile" / "x.parquet", "traces")  # was "afile: File exists"
    with pytest.raises(ValidationError, match=r"is a folder: give a file path for the CSV \(e.g. .*out.csv\)"):
        out_path(tmp_path, "CSV")


def test_an_output_under_a_file_is_refused_naming_it(tmp_path: Path) -> None:
    """``--out afile/x.parquet`` (``afile`` a file) says which part is a file, before anything is read, and makes
    no folder (issue #37: it said ``afile: File exists``)."""
    (tmp_path / "afile").write_text("x")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('"hi"\n')
    before = sorted(tmp_path.rglob("*"))
    r = runner.invoke(app, ["generate", "--prompts", str(prompts), "--out", str(tmp_path / "afile" / "x.parquet")])
    assert r.exit_code == 2 and f"{tmp_path / 'afile'} is a file, not a folder" in " ".join(r.output.split()), r.output
    assert sorted(tmp_path.rglob("*")) == before


def test_generate_refuses_a_bad_limit_before_loading_a_model(tmp_path: Path) -> None:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('"hi"\n')
    r = runner.invoke(
        app, ["generate", "--prompts", str(prompts), "--out", str(tmp_path / "t.parquet"), "--limit", "0"]
    )
    assert r.exit_code == 2 and "--limit must be a whole number ≥ 1, got 0" in r.output, r.output


def test_score_shows_a_missing_confidence_as_a_dash(tmp_path: Path, traces_file: Path) -> None:
    """A NaN confidence is shown as the CLI's one missing-number mark in the table (the CSV keeps NaN)."""
    from tracecal.cli.common import MISSING
    from tracecal.cli.traces import _score_table

    rows = [{"id": "q0", "c_trace": float("nan"), "answer": "[red]x[/red]"}]
    table = _score_table("t", rows, 5)
    cells = [list(col.cells) for col in table.columns]
    assert cells == [["q0"], [MISSING], ["\\[red]x\\[/red]"]]
    r = runner.invoke(app, ["score", str(traces_file), "--show", "2"])
    assert r.exit_code == 0 and "c_trace" in r.output, r.output


# ------------------------------------------------------------------ outputs that are inputs, special files, faults


def _labels(tmp_path: Path, text: str = "id,label\nq0,1\nq1,0\nq2,1\nq3,0\n") -> Path:
    labels = tmp_path / "labels.csv"
    labels.write_text(text)
    return labels


def test_an_output_that_is_an_input_is_refused_and_the_input_kept(tmp_path: Path, traces_file: Path) -> None:
    import os

    labels = _labels(tmp_path)
    cal = tmp_path / "cal.json"
    assert (
        runner.invoke(app, ["fit-calibrator", str(traces_file), "--labels", str(labels), "--out", str(cal)]).exit_code
        == 0
    )
    link, hard = tmp_path / "link.parquet", tmp_path / "hard.parquet"
    link.symlink_to(traces_file)
    os.link(traces_file, hard)
    prompts = tmp_path / "p.jsonl"
    before = {p: p.read_bytes() for p in (traces_file, labels, cal, prompts)}
    cases = [
        (["fit-calibrator", str(traces_file), "--labels", str(labels), "--out", str(traces_file)], "--out", "traces"),
        (["fit-calibrator", str(traces_file), "--labels", str(labels), "--out", str(labels)], "--out", "labels file"),
        (["fit-calibrator", str(traces_file), "--labels", str(labels), "--out", str(link)], "--out", "traces"),
        (["fit-calibrator", str(traces_file), "--labels", str(labels), "--out", str(hard)], "--out", "traces"),
        (["score", str(traces_file), "--csv", str(traces_file)], "--csv", "traces"),
        (["score", str(traces_file), "--calibrator", str(cal), "--csv", str(cal)], "--csv", "calibrator"),
        (["score", str(tmp_path), "--csv", str(traces_file)], "--csv", "traces"),  # a folder of shards
        (["generate", "--prompts", str(prompts), "--out", str(prompts)], "--out", "prompts file"),
        (
            ["generate", "--prompts", str(prompts), "--out", str(tmp_path / "n.parquet"), "--jsonl", str(prompts)],
            "--jsonl",
            "prompts file",
        ),
    ]
    for args, option, what in cases:
        r = runner.invoke(app, args)
        assert r.exit_code == 2 and f"{option} " in r.output and f"is the {what} " in r.output, (args, r.output)
        assert "would destroy that input" in r.output and "Traceback" not in r.output
    assert {p: p.read_bytes() for p in before} == before  # every input byte-identical
    same = tmp_path / "same.parquet"
    r = runner.invoke(app, ["generate", "--prompts", str(prompts), "--out", str(same), "--jsonl", str(same)])
    assert r.exit_code == 2 and "are the same file" in r.output and not same.exists(), r.output


def test_outputs_are_written_through_links_and_into_pipes(tmp_path: Path, traces_file: Path) -> None:
    import os
    import stat

    real = tmp_path / "real.csv"
    link = tmp_path / "link.csv"
    link.symlink_to(real)
    assert runner.invoke(app, ["score", str(traces_file), "--csv", str(link)]).exit_code == 0
    assert link.is_symlink() and real.read_text().startswith("id,tokens,stop,c_trace")
    cal_link = tmp_path / "current.json"  # a link to the deployed calibrator, as a user keeps one
    cal_link.symlink_to(tmp_path / "v1.json")
    args = ["fit-calibrator", str(traces_file), "--labels", str(_labels(tmp_path)), "--out", str(cal_link)]
    assert runner.invoke(app, args).exit_code == 0
    assert cal_link.is_symlink() and json.loads((tmp_path / "v1.json").read_text())["class"] == "TracePlus"
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        r = runner.invoke(app, ["score", str(traces_file), "--csv", str(fifo)])
        assert r.exit_code == 0, r.output
        assert os.read(reader, 1 << 16).decode().startswith("id,tokens,stop,c_trace")
    finally:
        os.close(reader)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_generate_refuses_a_zero_budget_and_reads_no_folder(tmp_path: Path, shared_model) -> None:  # type: ignore[no-untyped-def]
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('"hi"\n')
    out = tmp_path / "t.parquet"
    for option, value, lowest in (("--max-new-tokens", "0", 1), ("--batch-size", "0", 1), ("--top-logprobs", "-1", 0)):
        r = runner.invoke(app, ["generate", "--prompts", str(prompts), "--out", str(out), option, value])
        assert r.exit_code == 2 and f"{option} must be a whole number ≥ {lowest}, got {value}" in r.output, r.output
    r = runner.invoke(app, ["generate", "--prompts", str(tmp_path), "--out", str(out)])
    assert r.exit_code == 2 and f"prompts file {tmp_path} is a folder" in r.output and "Traceback" not in r.output
    assert not out.exists()


def test_duplicate_ids_are_refused_naming_them(tmp_path: Path, traces_file: Path) -> None:
    from tracecal.traces.io import save_traces

    prompts = tmp_path / "dup.jsonl"
    prompts.write_text('{"id": "a", "prompt": "x"}\n{"id": "a", "prompt": "y"}\n')
    r = runner.invoke(app, ["generate", "--prompts", str(prompts), "--out", str(tmp_path / "d.parquet")])
    assert r.exit_code == 2 and "1 ids occur more than once: 'a' (2×)" in r.output, r.output
    traces = load_traces(traces_file)
    traces[1].id = traces[0].id
    dup = save_traces(traces, tmp_path / "dup.parquet")
    cal = tmp_path / "c.json"
    r = runner.invoke(app, ["fit-calibrator", str(dup), "--labels", str(_labels(tmp_path)), "--out", str(cal)])
    assert r.exit_code == 2 and "the traces: 1 ids occur more than once: 'q0' (2×)" in r.output and not cal.exists()
    conflict = _labels(tmp_path, "id,label\nq0,1\nq1,0\nq2,1\nq3,0\nq1,1\n")
    r = runner.invoke(app, ["fit-calibrator", str(traces_file), "--labels", str(conflict), "--out", str(cal)])
    assert r.exit_code == 2 and "labels.csv:6: id 'q1' is labelled 1 here but 0" in r.output and not cal.exists()


def test_an_excel_label_file_is_read(tmp_path: Path, traces_file: Path) -> None:
    labels = tmp_path / "excel.csv"
    labels.write_bytes("id,label\r\nq0,1\r\nq1,0\r\nq2,1\r\nq3,0\r\nq3,0\r\n".encode("utf-8-sig"))
    r = runner.invoke(
        app, ["fit-calibrator", str(traces_file), "--labels", str(labels), "--out", str(tmp_path / "c.json")]
    )
    assert r.exit_code == 0, r.output


def test_a_full_or_read_only_disk_is_a_message_and_loses_nothing(tmp_path: Path, traces_file: Path) -> None:
    from tests.traces.disk import fill, read_only, small_filesystem, tmp_files

    labels = _labels(tmp_path)
    with small_filesystem(tmp_path) as mnt:
        cal, csv = mnt / "cal.json", mnt / "s.csv"
        cal.write_text("old calibrator")
        csv.write_text("old csv")
        fill(mnt)
        for args in (
            ["fit-calibrator", str(traces_file), "--labels", str(labels), "--out", str(cal)],
            ["score", str(traces_file), "--csv", str(csv)],
        ):
            r = runner.invoke(app, args)
            line = " ".join(r.output.split())
            assert r.exit_code == 2 and line.startswith(f"error: cannot write {args[-1]}: No space left on device")
            assert "free some space and run the same command again (nothing was half-written)" in line, line
            assert "Traceback" not in r.output
        assert cal.read_text() == "old calibrator" and csv.read_text() == "old csv" and tmp_files(mnt) == []
        (mnt / ".filler").unlink()
        read_only(mnt)
        for args in (
            ["score", str(traces_file), "--csv", str(mnt / "new.csv")],
            ["fit-calibrator", str(traces_file), "--labels", str(labels), "--out", str(mnt / "new.json")],
        ):
            r = runner.invoke(app, args)
            line = " ".join(r.output.split())
            assert r.exit_code == 2 and "Read-only file system; the folder is read-only" in line, line
            assert "make it writable or choose another output path" in line and "Traceback" not in r.output


def test_generate_refuses_a_lone_surrogate_naming_the_line(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A prompts file whose JSON has a ``\\ud800`` escape without its pair: one line naming FILE:LINE, exit 2,
    before the model loads (not the tokenizer's TypeError)."""
    loaded = []
    monkeypatch.setattr(hf, "load_model", lambda *a, **k: loaded.append(1))
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "ok"}\n{"messages": [{"role": "user", "content": "bad\\ud800"}]}\n')
    r = runner.invoke(app, ["generate", "--prompts", str(prompts), "--out", str(tmp_path / "t.parquet")])
    assert r.exit_code == 2 and "Traceback" not in r.output and r.output.count("\n") == 1, r.output
    assert r.output.startswith(f"error: {prompts}:2: the prompt is not valid Unicode: '\\ud800' at character 3")
    assert not loaded and not (tmp_path / "t.parquet").exists()


def test_a_read_only_output_folder_says_what_to_do(tmp_path: Path, traces_file: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Outside the run store too, an OS error is one line with advice (`tracecal.errors.os_error_message`): here
    a folder that refuses writes as a read-only file system does, for fit-calibrator and score --csv."""
    import errno
    import os

    real_mkstemp = __import__("tempfile").mkstemp
    folder = tmp_path / "ro"
    folder.mkdir()

    def refuse(suffix=None, prefix=None, dir=None, text=False):  # type: ignore[no-untyped-def]
        if dir is not None and os.path.abspath(dir) == str(folder):  # the name of the temporary file it would make
            raise OSError(errno.EROFS, "Read-only file system", os.path.join(dir, f"{prefix}k3j2{suffix}"))
        return real_mkstemp(suffix, prefix, dir, text)

    monkeypatch.setattr("tempfile.mkstemp", refuse)
    labels = _labels(tmp_path)
    for args, out in (
        (["fit-calibrator", str(traces_file), "--labels", str(labels), "--out", str(folder / "c.json")], "c.json"),
        (["score", str(traces_file), "--csv", str(folder / "s.csv")], "s.csv"),
    ):
        r = runner.invoke(app, args)
        assert r.exit_code == 2 and "Traceback" not in r.output, r.output
        line = " ".join(r.output.split())
        assert f"error: cannot write {folder / out}: Read-only file system; the folder is read-only" in line
        assert "make it writable or choose another output path, then run again" in line


def test_score_refuses_a_calibrator_of_another_models_answers(tmp_path: Path, traces_file: Path) -> None:
    """``score --calibrator`` compares the file's provenance with the model and dtype the traces record, as ``serve``
    does with the served model: another model or dtype, or a record naming no model, is refused naming both (exit
    2, no CSV written) unless ``--allow-foreign-calibrator`` (a warning); a file of an older tracecal without a
    record is used with a warning."""
    cal, csv = tmp_path / "cal.json", tmp_path / "s.csv"
    fit = ["fit-calibrator", str(traces_file), "--labels", str(_labels(tmp_path)), "--out", str(cal)]
    assert runner.invoke(app, fit).exit_code == 0
    doc = json.loads(cal.read_text())
    assert doc["provenance"]["model"] == "tiny-random-llama" and doc["provenance"]["dtype"] == "float32"
    score = ["score", str(traces_file), "--calibrator", str(cal), "--csv", str(csv)]
    r = runner.invoke(app, score)
    assert r.exit_code == 0 and "warning" not in r.output, r.output

    def edited(**record: object) -> Path:
        path = tmp_path / f"edited-{len(list(tmp_path.glob('edited-*')))}.json"
        new = dict(doc)
        if record.get("drop"):
            new.pop("provenance")
        else:
            new["provenance"] = doc["provenance"] | record
        path.write_text(json.dumps(new))
        return path

    refused = {
        "another model": (
            edited(model="another-model"),
            "was made on answers of 'another-model'; the traces scored are answers of 'tiny-random-llama'",
        ),
        "another dtype": (
            edited(dtype="bfloat16"),
            "was made on bfloat16 answers; the traces scored are float32 answers (the dtype changes answers)",
        ),
        "no model": (edited(model=None), "records no model its answers came from"),
    }
    for case, (path, message) in refused.items():
        csv.unlink(missing_ok=True)
        before = path.read_bytes()
        r = runner.invoke(app, ["score", str(traces_file), "--calibrator", str(path), "--csv", str(csv)])
        out = " ".join(r.output.split())
        assert r.exit_code == 2 and out.startswith(f"error: {path} ") and message in out, (case, out)
        assert "or add --allow-foreign-calibrator to score with the file anyway" in out and "Traceback" not in out
        assert not csv.exists() and path.read_bytes() == before
        r = runner.invoke(app, ["score", str(traces_file), "--calibrator", str(path), "--allow-foreign-calibrator"])
        out = " ".join(r.output.split())
        assert r.exit_code == 0 and f"warning: {path} " in out and "scored anyway (--allow-foreign-calibrator)" in out
    r = runner.invoke(app, ["score", str(traces_file), "--calibrator", str(edited(drop=True))])
    out = " ".join(r.output.split())
    assert r.exit_code == 0 and "records no provenance (an older tracecal wrote it)" in out, out
    assert "not checked against the traces' model" in out


def test_generate_refuses_token_ids_outside_the_vocabulary_and_absurd_top_k(tmp_path: Path, shared_model) -> None:  # type: ignore[no-untyped-def]
    """A prompts-file line given as token ids the model has no embedding for (too large, negative) and a
    ``--top-logprobs`` beyond the vocabulary are one line each, exit 2 (were an IndexError traceback and torch's
    'selected index k out of range'); nothing is written."""
    size = len(shared_model.tokenizer)
    out = tmp_path / "t.parquet"
    for ids, message in (
        ([10**9], f"prompt_ids: 1000000000 is not a token id of this tokenizer [0, {size})"),
        ([-5, 3], "prompt_ids: -5 is not"),
    ):
        prompts = tmp_path / "ids.jsonl"
        prompts.write_text(json.dumps({"id": "a", "prompt": {"prompt_ids": ids}}) + "\n")
        r = runner.invoke(app, ["generate", "--prompts", str(prompts), "--out", str(out)])
        assert r.exit_code == 2 and f"error: {message}" in r.output, r.output
        assert "Traceback" not in r.output and not out.exists()
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"id": "a", "prompt": "hi"}) + "\n")
    r = runner.invoke(app, ["generate", "--prompts", str(prompts), "--out", str(out), "--top-logprobs", "10000000"])
    assert r.exit_code == 2 and "top_logprobs must be at most the model's vocabulary of" in r.output, r.output
    assert not out.exists()
    with pytest.raises(ValidationError, match="answer 0: 99999999 is not a token id"):
        shared_model.trace_answers(["q"], [[5, 99999999]])


def test_generate_task_writes_the_labels_fit_calibrator_reads(tmp_path: Path, shared_model, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``generate --task FILE`` labels each answer with the task's labeller into OUT.labels.csv (said on stderr,
    with the fit-calibrator command) and each trace's meta; ``fit-calibrator OUT --labels that`` fits on it. The
    tiny random model is never right, so the task's alias rule is replaced by one that reads the row's gold: the
    labels must follow the golds of the rows, in order."""
    import csv

    import tracecal.tasks.labellers as labellers

    seen: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(labellers, "alias_match", lambda a, golds: seen.append((a, golds)) or golds == ["yes"])
    golds = ["yes", "no", "no", "yes", "yes", "no"]
    task = tmp_path / "qa.jsonl"
    rows = [{"id": f"q{i}", "question": f"Question {i}?", "answer": g} for i, g in enumerate(golds)]
    task.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = tmp_path / "t.parquet"
    r = runner.invoke(app, ["generate", "--task", str(task), "--out", str(out), "--max-new-tokens", "4"])
    assert r.exit_code == 0, r.output
    labels_csv = tmp_path / "t.labels.csv"
    text = " ".join(r.output.split())
    assert f"wrote the labels (3 of 6 answers correct) to {labels_csv}" in text, text
    assert f"tracecal fit-calibrator {out} --labels {labels_csv} --out cal.json" in text
    with open(labels_csv, newline="", encoding="utf-8") as f:
        got = list(csv.reader(f))
    expected = [int(g == "yes") for g in golds]
    assert got == [["id", "label"]] + [[f"q{i}", str(z)] for i, z in enumerate(expected)]
    traces = load_traces(out)
    assert [t.meta["correct"] for t in traces] == expected
    assert seen == [(t.text, [g]) for t, g in zip(traces, golds, strict=True)]  # each answer against its golds
    cal = tmp_path / "cal.json"
    r = runner.invoke(app, ["fit-calibrator", str(out), "--labels", str(labels_csv), "--out", str(cal)])
    assert r.exit_code == 0 and cal.exists(), r.output


def test_generate_labels_a_builtin_task_where_asked_and_refuses_labels_without_a_task(
    tmp_path: Path, shared_model
) -> None:  # type: ignore[no-untyped-def]
    """A built-in task (TriviaQA, 3 rows) labelled as ``task.label`` labels them, into ``--labels-out``; with
    --prompts, ``--labels-out`` is refused (no gold answers), as is a labels path that is the --out file."""
    from tracecal.tasks import get_task
    from tracecal.tasks.files import read_labels

    out, labels = tmp_path / "t.parquet", tmp_path / "sub" / "my labels.csv"
    args = ["generate", "--task", "triviaqa", "--limit", "3", "--out", str(out), "--max-new-tokens", "3"]
    r = runner.invoke(app, [*args, "--labels-out", str(labels)])
    assert r.exit_code == 0, r.output
    task = get_task("triviaqa")
    expected = {ex.id: task.label(ex, t.text) for ex, t in zip(task.load(limit=3), load_traces(out), strict=True)}
    assert read_labels(labels) == expected and not (tmp_path / "t.labels.csv").exists()
    r = runner.invoke(app, [*args, "--labels-out", str(out)])  # the --out file of the run before
    assert r.exit_code == 2 and f"error: --labels-out {out} is the --out file" in r.output, r.output
    new = tmp_path / "new.parquet"
    r = runner.invoke(app, [*args[:-3], str(new), *args[-2:], "--labels-out", str(new)])
    assert r.exit_code == 2 and "are the same file" in r.output and not new.exists(), r.output
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('"Say hi."\n')
    r = runner.invoke(app, ["generate", "--prompts", str(prompts), "--out", str(out), "--labels-out", str(labels)])
    assert r.exit_code == 2 and "--labels-out needs --task" in r.output, r.output


def test_fit_calibrator_on_a_path_that_does_not_exist_says_so(tmp_path: Path) -> None:
    """A misspelt run directory is named as missing (it was told it needed --labels, as a traces file would)."""
    r = CliRunner().invoke(app, ["fit-calibrator", str(tmp_path / "runs" / "mian"), "--out", str(tmp_path / "c.json")])
    assert r.exit_code == 2 and "(and no run directory of that name)" in " ".join(r.output.split()), r.output
