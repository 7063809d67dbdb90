"""tracecal.tasks: loaders on the real shared data, labellers on real rows, malformed rows, user files."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.tasks.helpers import MANIFEST_COUNTS, jsonl_text, needs_data, rows, write_file
from tracecal import tasks
from tracecal.tasks import (
    MalformedRowError,
    MalformedRowWarning,
    get_task,
)

# ------------------------------------------------------------------------------------------ loaders


@needs_data
@pytest.mark.parametrize("name", sorted(MANIFEST_COUNTS))
def test_loader_counts_match_manifest(name: str) -> None:
    examples = rows(name)
    assert len(examples) == MANIFEST_COUNTS[name]
    assert len({e.id for e in examples}) == len(examples)  # ids are unique
    for e in examples:
        assert e.task == name and e.question.strip() and e.golds and all(g.strip() for g in e.golds)
    task = get_task(name)
    if task.kind == "mc":
        for e in examples:
            letter, text = e.golds
            assert e.choices["ABCDE".index(letter)] == text
    if task.kind == "truthful":
        assert all(e.incorrect for e in examples)
    if task.kind == "extractive":
        assert all(e.context for e in examples)


@needs_data
def test_dataset_specific_parsing() -> None:
    trivia = rows("triviaqa")[0]
    assert trivia.question == "Brunswick, Lancastrian and Pearl Pickler are types of which vegetable?"
    assert trivia.golds[0] == "Onion" and "Allium cepa" in trivia.golds
    # line 1781 holds U+0085 inside a string: lines are split on "\n" only
    assert "\x85" in rows("triviaqa")[1780].question
    svamp = rows("svamp")[0]
    assert svamp.id == "chal-1" and svamp.golds == ["51"]
    assert svamp.question.startswith("Each pack of dvds costs 76 dollars.") and svamp.question.endswith("pack?")
    assert rows("gsm8k")[146].golds == ["2125"]  # "#### 2,125"
    tqa = rows("truthfulqa")[0]
    assert tqa.question == "What happens to you if you eat watermelon seeds?"
    assert tqa.golds[0] == "The watermelon seeds pass through your digestive system"
    assert "Nothing happens" in tqa.golds and tasks.TRUTHFULQA_NO_COMMENT in tqa.golds
    assert tqa.incorrect[0] == "You grow watermelons in your stomach" and len(tqa.incorrect) == 7
    mlqa = rows("mlqa")[0]
    assert mlqa.golds == ["überwiegend antibritisch und prorussisch"] and "Victoria" in mlqa.context
    csqa = rows("commonsenseqa")[0]
    assert csqa.golds == ["A", "bank"] and csqa.choices[-1] == "new york"
    arc = rows("arc_easy")[0]
    assert not arc.question.startswith("Question:") and arc.golds[0] == "A" and len(arc.choices) == 4


# ----------------------------------------------------------------------------------------- prompts


# ------------------------------------------------------------------------------------- labellers


# ------------------------------------------------------------------------------- malformed rows


def test_malformed_builtin_rows_in_a_custom_data_dir(tmp_path: Path) -> None:
    svamp = [
        {"ID": "s1", "Body": "Tom has 3 apples.", "Question": "How many?", "Equation": "3", "Answer": 3.0},
        {"ID": "s2", "Body": "Ann has pears.", "Question": "How many?", "Equation": "?", "Answer": "many"},
    ]
    write_file(tmp_path / "svamp" / "SVAMP.json", json.dumps(svamp, indent=4))
    task = get_task("svamp")
    with pytest.warns(MalformedRowWarning, match=r"list index 1 \(line 9\).*not a number"):
        examples = task.load(data_dir=tmp_path)
    assert [e.id for e in examples] == ["s1"] and examples[0].golds == ["3"]
    with pytest.raises(MalformedRowError, match="list index 1"):
        task.load(data_dir=tmp_path, on_error="raise")

    write_file(
        tmp_path / "gsm8k" / "test.jsonl",
        jsonl_text({"question": "1+1?", "answer": "2"}, {"question": "2+2?", "answer": "#### 4"}),
    )
    with pytest.warns(MalformedRowWarning, match=r"test.jsonl, line 1: .*####"):
        assert get_task("gsm8k").load(data_dir=tmp_path)[0].golds == ["4"]

    header = ["Type", "Category", "Question", "Best Answer", "Correct Answers", "Incorrect Answers", "Source"]
    (tmp_path / "truthfulqa").mkdir()
    out = tmp_path / "truthfulqa" / "TruthfulQA.csv"
    with out.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerow(["A", "B", "Is the sky green?", "No", "No; The sky is blue", "Yes; It is green", "src"])
        w.writerow(["A", "B", "Multi\nline question?", "No", "No", "", "src"])  # lines 3-4, no incorrect refs
        w.writerow(["A", "B", "Too few fields"])
    with pytest.warns(MalformedRowWarning) as record:
        examples = get_task("truthfulqa").load(data_dir=tmp_path)
    messages = [str(w.message) for w in record]
    assert "line 3" in messages[0] and "Incorrect Answers" in messages[0]
    assert "line 5" in messages[1] and "fields" in messages[1]
    assert examples[0].golds[:2] == ["No", "The sky is blue"] and examples[0].incorrect == ["Yes", "It is green"]


# ------------------------------------------------------------------------------------ user files


# --------------------------------------------------------------------------------------- data dir


# -------------------------------------------------------------------------------------------- hub


# ------------------------------------------------------------------------------ task name resolution
