"""`tracecal.tasks.user`: user task files (JSONL, CSV; every kind), Hugging Face Hub datasets."""

from __future__ import annotations

import csv
import sys
import types
from pathlib import Path

import pytest

from tests.tasks.helpers import jsonl_text, write_file
from tracecal.tasks import (
    TASKS,
    HubUnavailableError,
    MalformedRowWarning,
    get_task,
    load_user_file,
    task_from_file,
    task_from_hub,
)


def test_user_jsonl_all_kinds(tmp_path: Path) -> None:
    p = write_file(
        tmp_path / "mine.jsonl",
        jsonl_text(
            {
                "id": "q1",
                "question": "Who wrote Hamlet?",
                "answers": ["Shakespeare", "William Shakespeare"],
                "src": "x",
            },
            {"question": "Largest planet?", "answer": "Jupiter", "context": "The planets..."},
        ),
    )
    qa = load_user_file(p, kind="qa")
    assert qa[0].id == "q1" and qa[0].meta["src"] == "x" and qa[1].id == "file-mine-1"
    assert qa[1].context == "The planets..."
    task = task_from_file(p)
    assert task.name == "file-mine" and task.ref == str(p.resolve())
    assert task.label(qa[0], "It was William Shakespeare.") == 1
    assert "Context: The planets..." in task.prompt(qa[1], chat=True)[0]["content"]
    assert get_task(str(p)).name == "file-mine"  # a file path works as a task name

    m = write_file(
        tmp_path / "math.jsonl",
        jsonl_text({"question": "3000+0?", "answer": "3,000"}, {"question": "q", "answer": 2.5}),
    )
    math_task = task_from_file(m, labeller="numeric")
    ex = math_task.load()
    assert [e.golds for e in ex] == [["3000"], ["2.5"]] and math_task.kind == "math"
    assert math_task.label(ex[0], "The answer is 3,000.") == 1 and math_task.max_new_tokens == 96

    c = write_file(
        tmp_path / "mc.jsonl",
        jsonl_text(
            {"question": "Colour of the sky?", "choices": ["green", "blue", "red"], "answer": "B"},
            {"question": "2+2?", "choices": ["3", "4"], "answer": "4"},
            {"question": "First?", "choices": ["x", "y"], "answer": 0},
            {"question": "Bad gold?", "choices": ["x", "y"], "answer": "z"},
        ),
    )
    with pytest.warns(MalformedRowWarning, match="line 4"):
        mc = load_user_file(c, kind="mc")
    assert [e.golds for e in mc] == [["B", "blue"], ["B", "4"], ["A", "x"]]
    assert task_from_file(c, "mc").label(mc[0], "The answer is (B)") == 1

    t = write_file(
        tmp_path / "tq.jsonl",
        jsonl_text(
            {"question": "Is the earth flat?", "answer": "No, it is round", "incorrect_answers": "Yes; It is flat"}
        ),
    )
    tq = task_from_file(t, labeller="truthful")
    ex = tq.load()[0]
    assert ex.incorrect == ["Yes", "It is flat"]
    assert tq.label(ex, "No, the earth is round.") == 1 and tq.label(ex, "Yes, it is flat.") == 0


def test_user_csv(tmp_path: Path) -> None:
    p = tmp_path / "mine.csv"
    with p.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["id", "question", "answers", "choices", "note"])
        w.writerow(["a", "Pick the fruit", "apple", "car; apple; house", "n1"])
        w.writerow(["b", "Pick the colour", "C", '["dog", "cat", "red"]', ""])
        w.writerow(["c", "", "x", "a; b", ""])
    with pytest.warns(MalformedRowWarning, match=r"mine.csv, line 4: .*question"):
        ex = load_user_file(p, kind="mc")
    assert [e.golds for e in ex] == [["B", "apple"], ["C", "red"]]
    assert ex[0].choices == ["car", "apple", "house"] and ex[0].meta["note"] == "n1"
    assert "note" not in ex[1].meta  # empty cells are dropped
    q = tmp_path / "qa.csv"
    q.write_text(
        "question,answers\nWho painted the Mona Lisa?,Leonardo da Vinci; Leonardo; da Vinci\n", encoding="utf-8"
    )
    task = task_from_file(q, "alias", name="art", register=True)
    try:
        assert get_task("art") is task
        e = task.load()[0]
        assert e.golds == ["Leonardo da Vinci", "Leonardo", "da Vinci"] and task.label(e, "It was da Vinci.") == 1
    finally:
        TASKS.pop("art", None)


def test_hub_errors_and_mapping(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)  # "not installed"
    with pytest.raises(HubUnavailableError, match=r"tracecal\[hub\]"):
        task_from_hub("trivia_qa", "validation", "question", "answer", "alias")

    fake = types.ModuleType("datasets")

    def offline(*args: object, **kwargs: object) -> object:
        raise ConnectionError("no network")

    fake.load_dataset = offline  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "datasets", fake)
    task = task_from_hub("org/some_qa", "validation", "q", "a", "alias")
    with pytest.raises(HubUnavailableError, match="offline"):
        task.load()

    data = [{"q": "Capital of France?", "a": {"value": "Paris", "aliases": ["Paris, France"]}}, {"q": "", "a": "x"}]
    fake.load_dataset = lambda *a, **k: data  # type: ignore[attr-defined]
    with pytest.warns(MalformedRowWarning, match="row 1"):
        ex = task.load()
    assert task.name == "hub-some_qa" and ex[0].golds == ["Paris", "Paris, France"]
    assert task.label(ex[0], "paris") == 1


def test_answer_may_be_a_list_of_aliases(tmp_path: Path) -> None:
    p = write_file(
        tmp_path / "odqa.jsonl",
        jsonl_text(
            {"question": "Capital of France?", "answer": ["Paris", "Paris, France", " ", "Paris"]},
            {"question": "Largest planet?", "answer": ["Jupiter"], "answers": ["planet Jupiter"]},
            {"question": "Empty list?", "answer": []},
            {"question": "Bad list?", "answer": [{"text": "x"}]},
            {"question": "Bad type?", "answer": {"text": "x"}},
        ),
    )
    with pytest.warns(MalformedRowWarning) as record:
        ex = load_user_file(p)
    messages = [str(w.message) for w in record]
    assert [e.golds for e in ex] == [["Paris", "Paris, France"], ["Jupiter", "planet Jupiter"]]
    assert "line 3" in messages[0] and "missing field 'answer'" in messages[0]
    assert "line 4" in messages[1] and "field 'answer' must hold strings" in messages[1]
    assert "line 5" in messages[2] and "a string, a number or a list of strings, not dict" in messages[2]
    assert get_task(str(p)).label(ex[0], "It is Paris, France.") == 1
    m = write_file(tmp_path / "m.jsonl", jsonl_text({"question": "2+3?", "answer": ["5", "five"]}))
    assert load_user_file(m, kind="math")[0].golds == ["5"]


def test_max_new_tokens_zero_is_refused_not_read_as_the_default(tmp_path: Path) -> None:
    from tracecal.errors import ValidationError

    p = write_file(tmp_path / "qa.jsonl", jsonl_text({"question": "Capital of France?", "answer": "Paris"}))
    default = task_from_file(p).max_new_tokens
    assert default > 0 and task_from_file(p, max_new_tokens=5).max_new_tokens == 5
    for bad in (0, -3, 2.5):
        with pytest.raises(ValidationError, match=rf"max_new_tokens must be a whole number ≥ 1, got {bad}"):
            task_from_file(p, max_new_tokens=bad)  # type: ignore[arg-type]
