"""`tracecal.tasks.resolve`: task names and file paths resolved to tasks, with errors that say what to fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tasks.helpers import MANIFEST_COUNTS, jsonl_text, write_file
from tracecal import tasks
from tracecal.tasks import (
    UnknownTaskError,
    get_task,
    task_from_file,
)


def test_unknown_task_and_kind() -> None:
    with pytest.raises(UnknownTaskError) as err:
        get_task("trivia_qa")
    msg = str(err.value)
    assert isinstance(err.value, ValueError)
    assert "Did you mean 'triviaqa'" in msg and all(n in msg for n in MANIFEST_COUNTS)
    assert get_task("ARC-Easy").name == "arc_easy"
    with pytest.raises(ValueError, match="unknown kind"):
        task_from_file("x.jsonl", labeller="bleu")


def test_user_file_as_task_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_file(tmp_path / "data" / "my.jsonl", jsonl_text({"question": "Capital of France?", "answer": "Paris"}))
    for spec in ("data/my.jsonl", str(tmp_path / "data" / "my.jsonl"), Path("data/my.jsonl")):
        task = get_task(spec)
        assert task.name == "file-my" and task.ref == str((tmp_path / "data" / "my.jsonl").resolve())
        assert get_task(task.ref).name == "file-my"  # ref resolves to the same task again
    assert get_task("data/my.jsonl").load()[0].id == "file-my-0"
    # a file named like a built-in task is the user's file, never the built-in one
    write_file(tmp_path / "triviaqa.jsonl", jsonl_text({"question": "2+2?", "answer": "4"}))
    task = get_task("triviaqa.jsonl")
    assert task.name == "file-triviaqa" and task.source.describe() == "triviaqa.jsonl"
    assert get_task("triviaqa").name == "triviaqa" and get_task("triviaqa").ref == "triviaqa"
    assert get_task(" ARC-Easy ").name == "arc_easy"
    # an odd file name still gives a folder-safe name
    write_file(tmp_path / "my data (v2).csv", "question,answer\nq,a\n")
    assert get_task("my data (v2).csv").name == "file-my_data__v2_"


def test_task_name_errors_say_what_to_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(tasks.TaskFileNotFoundError, match=r"no such file: 'data/my.jsonl'") as err:
        get_task("data/my.jsonl")
    assert isinstance(err.value, FileNotFoundError)
    with pytest.raises(FileNotFoundError, match=r"no such file.*built-in task of that name is 'gsm8k'"):
        get_task("gsm8k.jsonl")
    with pytest.raises(FileNotFoundError, match="no such file: 'nowhere/gsm8k'"):
        get_task("nowhere/gsm8k")
    (tmp_path / "folder.json").mkdir()
    with pytest.raises(FileNotFoundError, match="is a directory"):
        get_task("folder.json")
    write_file(tmp_path / "notes.txt", "question,answer\n")
    with pytest.raises(tasks.TaskDataError, match=r"unsupported file format 'txt'; use .jsonl"):
        get_task("notes.txt")
    write_file(tmp_path / "svamp", "[]")  # a file named exactly like a built-in task
    with pytest.raises(tasks.AmbiguousTaskError, match="both the built-in task 'svamp' and a file"):
        get_task("svamp")
    write_file(tmp_path / "mine.jsonl", jsonl_text({"question": "q", "answer": "a"}))
    with pytest.raises(UnknownTaskError, match="The file 'mine.jsonl' exists: pass that path"):
        get_task("mine")
    with pytest.raises(UnknownTaskError, match="user file's task name: pass the file's path"):
        get_task("file-mine")
    with pytest.raises(UnknownTaskError, match="empty task name"):
        get_task("  ")
    with pytest.raises(UnknownTaskError, match="not int"):
        get_task(3)  # type: ignore[arg-type]


def test_get_tasks_refuses_two_files_with_one_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_file(tmp_path / "a" / "my.jsonl", jsonl_text({"question": "q", "answer": "a"}))
    write_file(tmp_path / "b" / "my.csv", "question,answer\nq,a\n")
    with pytest.raises(tasks.TaskNameCollisionError, match=r"a/my.jsonl' and .*b/my.csv' would both be stored as"):
        tasks.get_tasks(["a/my.jsonl", "b/my.csv"])
    got = tasks.get_tasks(["triviaqa", "a/my.jsonl", "TriviaQA", str(tmp_path / "a" / "my.jsonl")])
    assert [t.name for t in got] == ["triviaqa", "file-my"]  # the same task twice is kept once
    assert [t.name for t in tasks.get_tasks("gsm8k")] == ["gsm8k"]
    # the way out the message names
    renamed = task_from_file("b/my.csv", name="my_b")
    assert [t.name for t in tasks.get_tasks(["a/my.jsonl", renamed])] == ["file-my", "my_b"]
