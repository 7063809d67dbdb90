"""`tracecal.tasks.base`: `Task.load` (limit, seed, on_error, malformed and empty files) and task-name checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tasks.helpers import jsonl_text, needs_data, rows, write_file
from tracecal import tasks
from tracecal.tasks import (
    TASKS,
    EmptyTaskFileError,
    MalformedRowError,
    MalformedRowWarning,
    get_task,
    load_user_file,
    task_from_file,
)


@needs_data
def test_limit_is_file_order_and_seed_is_deterministic() -> None:
    task = get_task("gsm8k")
    first = task.load(limit=5)
    assert [e.id for e in first] == [e.id for e in rows("gsm8k")[:5]]
    assert first[0].golds == ["18"] and first[0].meta["line"] == 1
    a, b = task.load(limit=7, seed=3), task.load(limit=7, seed=3)
    assert [e.id for e in a] == [e.id for e in b] and len(a) == 7
    assert [e.id for e in a] != [e.id for e in first[:7]]
    assert task.load(limit=0) == []
    with pytest.raises(ValueError, match="limit"):
        task.load(limit=-1)
    with pytest.raises(ValueError, match="on_error"):
        task.load(on_error="ignore")
    with pytest.raises(ValueError, match=r"seed must be a whole number in \[0, 4294967295\] or None, got '3'"):
        task.load(seed="3")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown labeller"):
        task.with_labeller(["alias"])  # type: ignore[arg-type]


def test_malformed_jsonl_rows_skip_warns_with_line(tmp_path: Path) -> None:
    p = write_file(
        tmp_path / "qa.jsonl",
        jsonl_text(
            {"question": "Capital of France?", "answer": "Paris"},
            '{"question": "broken", ',
            "",
            {"question": "No answer here"},
            {"question": "  ", "answer": "x"},
            {"question": "Capital of Italy?", "answers": ["Rome", "Roma"]},
        ),
    )
    with pytest.warns(MalformedRowWarning) as record:
        examples = load_user_file(p, kind="qa")
    messages = [str(w.message) for w in record]
    assert len(messages) == 3
    assert all(str(p) in m for m in messages)
    assert "line 2" in messages[0] and "invalid JSON" in messages[0]
    assert "line 4" in messages[1] and "answer" in messages[1]
    assert "line 5" in messages[2] and "question" in messages[2]
    assert [e.golds for e in examples] == [["Paris"], ["Rome", "Roma"]]
    assert [e.meta["line"] for e in examples] == [1, 6]
    with pytest.raises(MalformedRowError) as err:
        load_user_file(p, kind="qa", on_error="raise")
    assert err.value.line == 2 and "line 2" in str(err.value) and str(p) in str(err.value)
    assert isinstance(err.value, ValueError)


def test_broken_json_list_and_empty_files(tmp_path: Path) -> None:
    p = write_file(tmp_path / "items.json", '[\n  {"question": "q", "answer": "alpha"},\n  {"question": "q2", oops}\n]')
    with pytest.raises(MalformedRowError, match="line 3"):
        load_user_file(p)  # a JSON syntax error cannot be skipped
    for name, text in [
        ("empty.jsonl", ""),
        ("blank.jsonl", "\n\n"),
        ("header.csv", "question,answer\n"),
        ("e.json", "[]"),
    ]:
        with pytest.raises(EmptyTaskFileError, match="no rows"):
            load_user_file(write_file(tmp_path / name, text))
    bad = write_file(tmp_path / "allbad.jsonl", jsonl_text({"q": 1}, {"q": 2}))
    with pytest.warns(MalformedRowWarning), pytest.raises(EmptyTaskFileError, match="2 malformed"):
        load_user_file(bad)
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        load_user_file(tmp_path / "missing.jsonl")


def test_task_names_are_folder_safe(tmp_path: Path) -> None:
    assert all(tasks.check_task_name(n) == n for n in TASKS)
    for bad in ("../x", "a/b", "", ".hidden", "-x", "a b", "x" * 101):
        with pytest.raises(ValueError, match="cannot be used as a folder name"):
            task_from_file(tmp_path / "q.jsonl", name=bad)
    assert tasks.check_task_name("ok-1.v2_x") == "ok-1.v2_x"
    assert tasks.file_task_name("data/été.jsonl") == "file-_t_"


def test_a_lone_surrogate_in_a_row_is_a_malformed_row(tmp_path: Path) -> None:
    """A JSON ``\\ud800`` escape without its pair (in a question, a context, a choice or an id) would reach the
    tokenizer as a TypeError: the row is malformed instead, named by file and line (skipped, or raised)."""
    good = {"id": "a", "question": "Capital of France?", "answer": "Paris"}
    bad = [
        good | {"id": "b", "question": "Capital\ud800?"},
        good | {"id": "c", "context": "\udfff"},
        good | {"id": "\ud800"},
    ]
    p = write_file(tmp_path / "qa.jsonl", jsonl_text(good, *bad))
    with pytest.warns(MalformedRowWarning) as caught:
        exs = load_user_file(p)
    assert [ex.id for ex in exs] == ["a"]
    shown = " ".join(str(w.message) for w in caught)
    for line, field in ((2, "question"), (3, "context"), (4, "id")):
        assert f"line {line}" in shown and f"field '{field}' is not valid Unicode" in shown, shown
    with pytest.raises(MalformedRowError, match=r"line 2.*field 'question' is not valid Unicode: '\\ud800'"):
        load_user_file(p, on_error="raise")
    mc = {"question": "Pick", "choices": ["A", "B\ud800"], "answer": "A"}
    with pytest.raises(MalformedRowError, match="field 'choices' is not valid Unicode"):
        load_user_file(write_file(tmp_path / "mc.jsonl", jsonl_text(mc)), kind="mc", on_error="raise")
