"""The user's prompt and label files (tracecal.tasks.files)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tracecal.errors import TracecalError
from tracecal.tasks.files import (
    AmbiguousRowError,
    InputFileError,
    InputFileNotFoundError,
    check_unique_ids,
    join_labels,
    jsonl_lines,
    parse_answer_row,
    parse_label,
    read_answer_rows,
    read_labels,
    read_prompt_file,
    write_labels,
)


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_prompts_from_strings_objects_and_chats(tmp_path: Path) -> None:
    text = '"plain"\n\n{"id": "q7", "prompt": "Hi?"}\n{"messages": [{"role": "user", "content": "Yo"}]}\n'
    prompts, ids = read_prompt_file(_write(tmp_path, "p.jsonl", "\ufeff" + text))
    assert prompts == ["plain", "Hi?", [{"role": "user", "content": "Yo"}]]
    assert ids == ["0", "q7", "2"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"prompt": "ok"}\n{not json\n', r"p.jsonl:2: invalid JSON"),
        ('{"prompt": ""}\n', r"p.jsonl:1: expected a string or an object with a non-empty 'prompt'"),
        ("[1, 2]\n", r"p.jsonl:1: expected a string"),
        ("\n\n", r"p.jsonl: no prompts found"),
    ],
)
def test_bad_prompt_files_name_the_line(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(InputFileError, match=message):
        read_prompt_file(_write(tmp_path, "p.jsonl", text))


def test_missing_files_are_named(tmp_path: Path) -> None:
    for read, what in ((read_prompt_file, "prompts"), (read_labels, "labels")):
        with pytest.raises(InputFileNotFoundError, match=f"{what} file not found: .*nope"):
            read(tmp_path / "nope")
    with pytest.raises(FileNotFoundError):  # the builtin it refines
        read_labels(tmp_path)


def test_labels_from_csv_and_jsonl(tmp_path: Path) -> None:
    assert read_labels(_write(tmp_path, "l.csv", "id,label,note\nq0,1,x\nq1,0,y\n")) == {"q0": 1, "q1": 0}
    jsonl = '{"id": 3, "label": true}\n{"id": "q4", "label": "0"}\n'
    assert read_labels(_write(tmp_path, "l.jsonl", jsonl)) == {"3": 1, "q4": 0}


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("noid.csv", "answer,label\nq0,1\n", "the CSV needs the columns id and label; missing: id"),
        ("short.csv", "id,label\nq0\n", r"short.csv:2: expected 2 fields"),
        ("lists.jsonl", '["q0", 1]\n', 'each line must be an object {"id": ..., "label": 0 or 1}'),
        ("badlabel.csv", "id,label\nq0,yes\n", r"badlabel.csv:2: label must be 0 or 1, got 'yes'"),
        ("badlabel.jsonl", '{"id": "a", "label": 2}\n', r"badlabel.jsonl:1: label must be 0 or 1, got 2"),
        ("empty.csv", "id,label\n", "no labels found"),
    ],
)
def test_bad_label_files_say_what_to_fix(tmp_path: Path, name: str, text: str, message: str) -> None:
    with pytest.raises(InputFileError, match=message):
        read_labels(_write(tmp_path, name, text))


def test_the_errors_are_tracecal_errors_and_builtins() -> None:
    assert issubclass(InputFileError, TracecalError) and issubclass(InputFileError, ValueError)
    assert issubclass(InputFileNotFoundError, TracecalError) and issubclass(InputFileNotFoundError, FileNotFoundError)


def test_parse_label_and_jsonl_lines(tmp_path: Path) -> None:
    assert [parse_label(v, "x") for v in (0, 1, "0", "1", True, False)] == [0, 1, 0, 1, 1, 0]
    with pytest.raises(InputFileError, match="here: label must be 0 or 1, got 0.5"):
        parse_label(0.5, "here")
    assert list(jsonl_lines(_write(tmp_path, "a.jsonl", '1\n\n{"a": 2}\n'))) == [(1, 1), (3, {"a": 2})]


def test_a_folder_is_not_a_prompts_or_labels_file(tmp_path: Path) -> None:
    for read, what in ((read_prompt_file, "prompts"), (read_labels, "labels")):
        with pytest.raises(
            InputFileNotFoundError, match=f"{what} file {tmp_path} is a folder: give the path of a file"
        ):
            read(tmp_path)


def test_duplicate_prompt_ids_are_refused_naming_them(tmp_path: Path) -> None:
    lines = ['{"id": "a", "prompt": "1"}', '{"id": "b", "prompt": "2"}', '{"id": "a", "prompt": "3"}', '"x"']
    text = "\n".join([*lines, '{"id": "3", "prompt": "4"}']) + "\n"
    with pytest.raises(InputFileError, match=r"p.jsonl: 2 ids occur more than once: 'a' \(2×\), '3' \(2×\)"):
        read_prompt_file(_write(tmp_path, "p.jsonl", text))  # "x" on line 4 gets its position, 3, as id


def test_labels_repeated_with_the_same_label_are_accepted_conflicting_ones_refused(tmp_path: Path) -> None:
    assert read_labels(_write(tmp_path, "ok.csv", "id,label\nq0,1\nq1,0\nq0,1\n")) == {"q0": 1, "q1": 0}
    with pytest.raises(InputFileError, match=r"bad.csv:4: id 'q0' is labelled 0 here but 1 on an earlier line"):
        read_labels(_write(tmp_path, "bad.csv", "id,label\nq0,1\nq1,0\nq0,0\n"))
    with pytest.raises(InputFileError, match=r"bad.jsonl:2: id '7' is labelled 1 here but 0 on an earlier line"):
        read_labels(_write(tmp_path, "bad.jsonl", '{"id": 7, "label": 0}\n{"id": "7", "label": true}\n'))


def test_a_label_csv_saved_by_excel_is_read(tmp_path: Path) -> None:
    path = tmp_path / "excel.csv"
    path.write_bytes("id,label\r\nq0,1\r\nq1,0\r\n".encode("utf-8-sig"))  # UTF-8 with a byte-order mark
    assert read_labels(path) == {"q0": 1, "q1": 0}


def test_join_labels_refuses_repeated_trace_ids_and_missing_labels() -> None:
    labels = {"a": 1, "b": 0}
    assert join_labels(["b", "a"], labels, "l.csv") == [0, 1]
    with pytest.raises(InputFileError, match=r"the traces: 1 ids occur more than once: 'a' \(2×\)"):
        join_labels(["a", "b", "a"], labels, "l.csv")
    with pytest.raises(InputFileError, match=r"1 traces have no label in l.csv \(first: \['c'\]\)"):
        join_labels(["a", "c"], labels, "l.csv")


def test_check_unique_ids_shows_at_most_five() -> None:
    check_unique_ids(["a", "b"], "x")
    with pytest.raises(InputFileError, match=r"x: 7 ids occur more than once: '0' \(2×\), .*'4' \(2×\), …; give"):
        check_unique_ids([str(i) for i in range(7)] * 2, "x")


def test_a_lone_surrogate_is_refused_naming_the_line(tmp_path: Path) -> None:
    """A JSON ``\\ud800`` escape without its pair, in a prompt, a chat message or an id (prompts) or in a label's
    id: `InputFileError` naming ``path:line`` (before any model loads), not the tokenizer's TypeError."""
    for text, message in [
        ('"ok"\n"x\\ud800"\n', "p.jsonl:2: the prompt is not valid Unicode: '\\\\ud800' at character 1"),
        ('{"messages": [{"role": "user", "content": "\\udc00"}]}\n', "p.jsonl:1: the prompt is not valid Unicode"),
        ('{"id": "\\ud800", "prompt": "Hi"}\n', "p.jsonl:1: the id is not valid Unicode"),
    ]:
        with pytest.raises(InputFileError, match=message):
            read_prompt_file(_write(tmp_path, "p.jsonl", text))
    with pytest.raises(InputFileError, match="l.jsonl:2: the id is not valid Unicode"):
        read_labels(_write(tmp_path, "l.jsonl", '{"id": "a", "label": 1}\n{"id": "b\\ud800", "label": 0}\n'))


def test_a_device_or_pipe_is_not_a_prompts_or_labels_file(tmp_path: Path) -> None:
    """``--prompts /dev/null`` said 'not found' (it exists): it is not a regular file, and the message says so."""
    import os

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for path, kind in ((Path("/dev/null"), "a character device"), (fifo, r"a FIFO \(named pipe\)")):
        with pytest.raises(FileNotFoundError, match=f"prompts file {path} is {kind}: give the path of a file"):
            read_prompt_file(path)
        with pytest.raises(FileNotFoundError, match=f"labels file {path} is {kind}"):
            read_labels(path)


def test_answer_rows_take_the_prompt_from_one_of_prompt_messages_question() -> None:
    chat = [{"role": "user", "content": "Hi"}]
    row = parse_answer_row(3, {"prompt": "P?", "answer": "a"})
    assert (row.id, row.prompt, row.answer, row.prompt_key, row.answer_key, row.id_key) == (
        "3",
        "P?",
        "a",
        "prompt",
        "answer",
        "",
    )
    assert parse_answer_row(1, {"messages": json.dumps(chat), "answer": ""}).prompt == chat  # a CSV cell's JSON
    q = parse_answer_row(1, {"id": 0, "question": " Q? ", "context": "C", "choices": "x; y", "answer": "B"})
    assert q.id == "0" and q.id_key == "id" and q.prompt_key == "question"
    assert (q.prompt.question, q.prompt.context, q.prompt.choices) == ("Q?", "C", ["x", "y"])
    assert parse_answer_row(1, {"prompt": "P", "question": "", "answer": "a"}).prompt_key == "prompt"  # "" is unset
    with pytest.raises(AmbiguousRowError, match="both 'prompt' and 'question'"):
        parse_answer_row(1, {"prompt": "P", "question": "Q", "answer": "a"})
    with pytest.raises(AmbiguousRowError, match="both 'messages' and 'question'"):
        parse_answer_row(1, {"messages": chat, "question": "Q", "answer": "a"})
    with pytest.raises(InputFileError, match="'answers' holds a task file's gold answers"):
        parse_answer_row(1, {"question": "Q", "answers": ["x", "y"]})
    with pytest.raises(InputFileError, match="'prompt' must be text, got int"):
        parse_answer_row(1, {"prompt": 5, "answer": "a"})


def test_an_ambiguous_row_refuses_the_file_even_when_skipping(tmp_path: Path) -> None:
    ok = json.dumps({"prompt": "P", "answer": "a"})
    src = _write(tmp_path, "a.jsonl", ok + "\n" + json.dumps({"prompt": "P", "question": "Q", "answer": "a"}) + "\n")
    with pytest.raises(AmbiguousRowError, match=f"^{src}:2: the row gives both 'prompt' and 'question'"):
        read_answer_rows(src, on_error="skip")
    rows, bad = read_answer_rows(_write(tmp_path, "b.jsonl", ok + "\n{}\n"))
    assert len(rows) == 1 and bad == [
        f"{tmp_path / 'b.jsonl'}:2: no prompt: give 'prompt' (text), 'messages' (a list of {{'role', 'content'}}) or "
        "'question' (as in a task file)"
    ]
    with pytest.raises(InputFileNotFoundError, match="answers file not found"):
        read_answer_rows(tmp_path / "none.jsonl")


def test_write_labels_is_what_read_labels_reads(tmp_path: Path) -> None:
    path = write_labels(tmp_path / "l.csv", ["a", "b,c"], [1, 0])
    assert path.read_text(encoding="utf-8").splitlines() == ["id,label", "a,1", '"b,c",0']
    assert read_labels(path) == {"a": 1, "b,c": 0}
    with pytest.raises(InputFileError, match="label must be 0 or 1, got 2"):
        write_labels(tmp_path / "m.csv", ["a"], [2])
    assert not (tmp_path / "m.csv").exists()
