"""tracecal.tasks: loaders on the real shared data, labellers on real rows, malformed rows, user files."""

from __future__ import annotations

import csv
import functools
import json
import sys
import types
import warnings
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracecal import tasks
from tracecal.tasks import (
    TASKS,
    EmptyTaskFileError,
    Example,
    HubUnavailableError,
    MalformedRowError,
    MalformedRowWarning,
    UnknownTaskError,
    alias_match,
    data_dir,
    extract_choice_letter,
    extract_last_number,
    f1_match,
    get_task,
    load_user_file,
    mc_match,
    numeric_match,
    task_from_file,
    task_from_hub,
    token_f1,
    truthful_match,
)
from tracecal.tasks import sources as tasks_sources

MANIFEST_COUNTS = {
    "triviaqa": 3000,
    "svamp": 1000,
    "gsm8k": 1319,
    "truthfulqa": 817,
    "mlqa": 512,
    "commonsenseqa": 1221,
    "arc_easy": 2376,
    "arc_challenge": 1172,
}


def _real_data_dir() -> Path | None:
    try:
        return data_dir()
    except FileNotFoundError:
        return None


needs_data = pytest.mark.skipif(_real_data_dir() is None, reason="shared evaluation data not found")


@functools.cache
def rows(name: str) -> tuple[Example, ...]:
    """All rows of a built-in task, loaded once per test session; no malformed row may be skipped."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", MalformedRowWarning)
        return tuple(get_task(name).load())


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
def test_registry_names_and_defaults() -> None:
    assert set(MANIFEST_COUNTS) <= set(TASKS)
    assert tasks.TASK_NAMES == tuple(TASKS[n].name for n in tasks.TASK_NAMES)
    budgets = {n: TASKS[n].max_new_tokens for n in MANIFEST_COUNTS}
    assert budgets == {
        "triviaqa": 24,
        "mlqa": 24,
        "truthfulqa": 48,
        "svamp": 96,
        "gsm8k": 96,
        "arc_easy": 16,
        "arc_challenge": 16,
        "commonsenseqa": 16,
    }
    for n in MANIFEST_COUNTS:
        assert "correct iff" in TASKS[n].label_rule


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
    with pytest.raises(ValueError, match="seed must be an int or None, not '3'"):
        task.load(seed="3")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown labeller"):
        task.with_labeller(["alias"])  # type: ignore[arg-type]


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


@needs_data
@pytest.mark.parametrize("name", sorted(MANIFEST_COUNTS))
def test_prompts_chat_and_base(name: str) -> None:
    task, ex = get_task(name), rows(name)[0]
    chat = task.prompt(ex, chat=True)
    assert isinstance(chat, list) and chat[0]["role"] == "user" and ex.question in chat[0]["content"]
    base = task.prompt(ex, chat=False)
    assert isinstance(base, str) and ex.question in base
    assert base.rstrip().endswith(("Answer:", "Antwort:"))
    assert task.stop_strings(chat=True) == ()
    assert "\n" in "".join(task.stop_strings(chat=False))
    if task.kind == "mc":
        assert "A. " + ex.choices[0] in chat[0]["content"] and "letter" in chat[0]["content"]
    if task.kind == "math":
        assert "The answer is N." in chat[0]["content"]
    if name == "triviaqa":
        assert "short answer" in chat[0]["content"]
        assert base == f"Question: {ex.question}\nAnswer:"
    if name == "mlqa":
        assert ex.context in chat[0]["content"] and "Deutsch" in chat[0]["content"]


# ------------------------------------------------------------------------------------- labellers


@needs_data
def test_alias_labeller_on_real_triviaqa_rows() -> None:
    task, r = get_task("triviaqa"), rows("triviaqa")
    onion = r[0]
    assert task.label(onion, "Onion") == 1
    assert task.label(onion, "It's an onion.") == 1
    assert task.label(onion, "allium cepa") == 1  # an alias
    assert task.label(onion, "Onions") == 1  # an alias variant
    assert task.label(onion, "Potato") == 0
    assert task.label(onion, "Bunion") == 0  # whole words only
    assert task.label(onion, "") == 0 and task.label(onion, None) == 0
    nba = r[249]
    assert task.label(nba, "The N.B.A.") == 1 and task.label(nba, "the nba") == 1
    assert task.label(nba, "NFL") == 0
    assert task.label(r[370], "Ben-Hur") == 1 and task.label(r[370], "Ben Hur (1959)") == 1
    assert task.label(r[238], "He died in 1977.") == 1 and task.label(r[238], "1978") == 0
    assert task.label(r[245], "Essex") == 0  # alias "Sex" must not match inside a word
    # every row's own answer is labelled correct (unless it normalises to nothing, e.g. "(a")
    bad = [e.id for e in r if tasks.normalize_answer(e.meta["answer"]) and task.label(e, e.meta["answer"]) != 1]
    assert bad == []


def test_alias_match_rules() -> None:
    assert alias_match("the United States", ["US", "United States"]) == 1
    assert alias_match("a house", ["us"]) == 0
    assert alias_match("U.S.A.", ["USA"]) == 1 and alias_match("USA", ["U.S.A."]) == 1
    assert alias_match("dik dik", ["dik-dik"]) == 1
    assert alias_match("3,000 metres", ["3000"]) == 1
    assert alias_match("The", ["the"]) == 0  # an alias that normalises to nothing never matches
    assert alias_match("Paris", "Paris") == 1  # a single string is one alias
    assert alias_match("   ", ["x"]) == 0


@needs_data
def test_numeric_labeller_on_real_math_rows() -> None:
    svamp, gsm = get_task("svamp"), get_task("gsm8k")
    ex = rows("svamp")[0]  # gold 51.0
    for ok in ["51", "51.0", "The answer is 51.", "51 dollars", "$51", "You pay 76 - 25 = 51."]:
        assert svamp.label(ex, ok) == 1, ok
    for bad in ["The answer is 52.", "", "fifty-one", "51 - 25 = 26", "-51"]:
        assert svamp.label(ex, bad) == 0, bad
    big = rows("gsm8k")[146]  # "#### 2,125"
    assert gsm.label(big, "The answer is 2,125.") == 1 and gsm.label(big, "2125.0") == 1
    assert gsm.label(big, "$2,125") == 1 and gsm.label(big, "2,126") == 0
    janet = rows("gsm8k")[0]  # 18
    assert gsm.label(janet, "She makes 9 * 2 = $18 every day. The answer is 18.") == 1
    assert gsm.label(janet, "18 dollars, from 16 eggs") == 0  # the LAST number counts
    assert gsm.label(janet, "No idea") == 0


def test_numeric_extraction_formats() -> None:
    cases = {
        "3,000": 3000.0,
        "3.0": 3.0,
        "-2": -2.0,
        "\u22127": -7.0,
        "$5": 5.0,
        "1/2": 0.5,
        "The answer is 12.": 12.0,
        "12 apples": 12.0,
        "5-2": 2.0,
        "1,2,3": 3.0,
        "It is .5": 0.5,
        "50%": 50.0,
        "1,234.5 dollars": 1234.5,
    }
    for text, value in cases.items():
        assert extract_last_number(text) == pytest.approx(value), text
    assert extract_last_number("no number here") is None and extract_last_number("") is None
    assert numeric_match("3.0", "3") == 1 and numeric_match("3,000", 3000.0) == 1
    assert numeric_match("0.5", "1/2") == 1 and numeric_match("2.0000001", "2") == 1
    with pytest.raises(ValueError):
        numeric_match("3", "three")


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=-(10**9), max_value=10**9))
def test_numeric_match_roundtrip(n: int) -> None:
    assert numeric_match(f"The answer is {n:,}.", str(n)) == 1
    assert numeric_match(f"{n} items", str(n + 1)) == 0


@needs_data
def test_f1_labeller_on_real_mlqa_rows() -> None:
    task, ex = get_task("mlqa"), rows("mlqa")[0]  # gold: "überwiegend antibritisch und prorussisch"
    assert task.label(ex, "überwiegend antibritisch und prorussisch") == 1
    assert task.label(ex, "Überwiegend antibritisch und prorussisch.") == 1  # case and punctuation
    assert task.label(ex, "Die Position war überwiegend antibritisch und prorussisch.") == 1  # extra words
    assert task.label(ex, "prorussisch") == 0  # F1 = 0.4
    assert task.label(ex, "Der Hof war in dieser Frage gespalten und eher prorussisch gestimmt") == 0
    assert task.label(ex, "") == 0
    stockmar = rows("mlqa")[2]  # gold "Baron Stockmar"
    assert task.label(stockmar, "der Baron Stockmar") == 1  # German article removed
    assert task.label(stockmar, "Stockmar") == 1  # F1 = 2/3


def test_f1_rules() -> None:
    assert token_f1("Die Dampfexplosion war zwischen 3050 und 3350 Meter hoch", "3050 und 3350 Meter", "de") == (
        pytest.approx(2 / 3)
    )
    assert token_f1("die Badewanne", "Badewanne", "de") == 1.0
    assert token_f1("die Badewanne", "Badewanne", "en") < 1.0  # "die" is only an article in German
    assert token_f1("Müller", "muller", "de") == 0.0  # umlauts are kept
    assert f1_match("the Eiffel Tower", ["Eiffel Tower"]) == 1
    assert f1_match("it is a", ["a"]) == 0


@needs_data
def test_mc_labeller_on_real_rows() -> None:
    task, ex = get_task("commonsenseqa"), rows("commonsenseqa")[0]  # gold A "bank"
    for ok in ["A", "A.", "(A)", "A) bank", "A. bank", "The answer is A.", "Answer: A", "answer: (a)", "bank"]:
        assert task.label(ex, ok) == 1, ok
    for ok in ["a bank", "It is a bank.", "The answer is a bank."]:  # "a" as the article
        assert task.label(ex, ok) == 1, ok
    for bad in ["B", "(B) library", "The answer is C", "library", "a bank or a library", "", "I don't know"]:
        assert task.label(ex, bad) == 0, bad
    arc_task, arc = get_task("arc_easy"), rows("arc_easy")[129]  # gold B "100°C" among 32/100/200/212°C
    assert arc.golds == ["B", "100°C"]
    assert arc_task.label(arc, "100°C") == 1  # the C of °C is no letter
    assert arc_task.label(arc, "Water boils at 100°C.") == 1
    assert arc_task.label(arc, "B") == 1 and arc_task.label(arc, "32°C") == 0 and arc_task.label(arc, "E") == 0
    # every option text and every letter format labels exactly the gold option correct
    for name in ("arc_easy", "arc_challenge", "commonsenseqa"):
        t = get_task(name)
        for e in rows(name)[:200]:
            for i, text in enumerate(e.choices):
                letter = "ABCDE"[i]
                want = int(letter == e.golds[0])
                assert t.label(e, f"The answer is {letter}.") == want
                assert t.label(e, f"{letter}. {text}") == want
                if e.choices.count(text) == 1:
                    assert t.label(e, text) == want, (name, e.id, text)


def test_choice_letter_extraction() -> None:
    opts = ["safety goggles", "breathing mask", "rubber gloves", "lead apron"]
    assert extract_choice_letter("The correct option is D", opts) == "D"
    assert extract_choice_letter("I think (c) is right", opts) == "C"
    assert extract_choice_letter("E", opts) is None  # only A-D exist
    assert extract_choice_letter("A mask protects the lungs", opts) is None  # article
    assert mc_match("breathing mask", "B", "breathing mask", opts) == 1
    assert mc_match("cells", "A", "cells", ["cells", "brain cells"]) == 1
    assert mc_match("brain cells", "A", "cells", ["cells", "brain cells"]) == 0  # names option B


@needs_data
def test_truthful_labeller_on_real_rows() -> None:
    task, r = get_task("truthfulqa"), rows("truthfulqa")
    seeds = r[0]
    assert task.label(seeds, "The watermelon seeds pass through your digestive system.") == 1
    assert task.label(seeds, "Nothing happens.") == 1
    assert task.label(seeds, "You grow watermelons in your stomach.") == 0
    assert task.label(seeds, "I have no comment.") == 1
    assert task.label(seeds, "") == 0 and task.label(seeds, "   ") == 0
    cookies = r[1]  # correct vs incorrect references that differ by one word
    assert task.label(cookies, "Fortune cookies originated in San Francisco.") == 1
    assert task.label(cookies, "Fortune cookies originated in China.") == 0
    assert truthful_match("x", ["a b"], []) == 0  # no overlap with any correct reference
    with pytest.raises(ValueError):
        truthful_match("x", [], ["y"])


# ------------------------------------------------------------------------------- malformed rows


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _jsonl(*rows_: object) -> str:
    return "\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows_) + "\n"


def test_malformed_jsonl_rows_skip_warns_with_line(tmp_path: Path) -> None:
    p = _write(
        tmp_path / "qa.jsonl",
        _jsonl(
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


def test_malformed_builtin_rows_in_a_custom_data_dir(tmp_path: Path) -> None:
    svamp = [
        {"ID": "s1", "Body": "Tom has 3 apples.", "Question": "How many?", "Equation": "3", "Answer": 3.0},
        {"ID": "s2", "Body": "Ann has pears.", "Question": "How many?", "Equation": "?", "Answer": "many"},
    ]
    _write(tmp_path / "svamp" / "SVAMP.json", json.dumps(svamp, indent=4))
    task = get_task("svamp")
    with pytest.warns(MalformedRowWarning, match=r"list index 1 \(line 9\).*not a number"):
        examples = task.load(data_dir=tmp_path)
    assert [e.id for e in examples] == ["s1"] and examples[0].golds == ["3"]
    with pytest.raises(MalformedRowError, match="list index 1"):
        task.load(data_dir=tmp_path, on_error="raise")

    _write(
        tmp_path / "gsm8k" / "test.jsonl",
        _jsonl({"question": "1+1?", "answer": "2"}, {"question": "2+2?", "answer": "#### 4"}),
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


def test_broken_json_list_and_empty_files(tmp_path: Path) -> None:
    p = _write(tmp_path / "items.json", '[\n  {"question": "q", "answer": "alpha"},\n  {"question": "q2", oops}\n]')
    with pytest.raises(MalformedRowError, match="line 3"):
        load_user_file(p)  # a JSON syntax error cannot be skipped
    for name, text in [
        ("empty.jsonl", ""),
        ("blank.jsonl", "\n\n"),
        ("header.csv", "question,answer\n"),
        ("e.json", "[]"),
    ]:
        with pytest.raises(EmptyTaskFileError, match="no rows"):
            load_user_file(_write(tmp_path / name, text))
    bad = _write(tmp_path / "allbad.jsonl", _jsonl({"q": 1}, {"q": 2}))
    with pytest.warns(MalformedRowWarning), pytest.raises(EmptyTaskFileError, match="2 malformed"):
        load_user_file(bad)
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        load_user_file(tmp_path / "missing.jsonl")


# ------------------------------------------------------------------------------------ user files


def test_user_jsonl_all_kinds(tmp_path: Path) -> None:
    p = _write(
        tmp_path / "mine.jsonl",
        _jsonl(
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

    m = _write(
        tmp_path / "math.jsonl", _jsonl({"question": "3000+0?", "answer": "3,000"}, {"question": "q", "answer": 2.5})
    )
    math_task = task_from_file(m, labeller="numeric")
    ex = math_task.load()
    assert [e.golds for e in ex] == [["3000"], ["2.5"]] and math_task.kind == "math"
    assert math_task.label(ex[0], "The answer is 3,000.") == 1 and math_task.max_new_tokens == 96

    c = _write(
        tmp_path / "mc.jsonl",
        _jsonl(
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

    t = _write(
        tmp_path / "tq.jsonl",
        _jsonl({"question": "Is the earth flat?", "answer": "No, it is round", "incorrect_answers": "Yes; It is flat"}),
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


def test_unknown_task_and_kind() -> None:
    with pytest.raises(UnknownTaskError) as err:
        get_task("trivia_qa")
    msg = str(err.value)
    assert isinstance(err.value, ValueError)
    assert "Did you mean 'triviaqa'" in msg and all(n in msg for n in MANIFEST_COUNTS)
    assert get_task("ARC-Easy").name == "arc_easy"
    with pytest.raises(ValueError, match="unknown kind"):
        task_from_file("x.jsonl", labeller="bleu")


# --------------------------------------------------------------------------------------- data dir


def test_data_dir_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env_dir = tmp_path / "envdata"
    env_dir.mkdir()
    monkeypatch.setenv("TRACECAL_DATA", str(env_dir))
    assert data_dir() == env_dir.resolve()
    assert data_dir(tmp_path) == tmp_path.resolve()  # an explicit override wins
    with pytest.raises(FileNotFoundError, match="given explicitly"):
        data_dir(tmp_path / "nope")
    monkeypatch.setenv("TRACECAL_DATA", str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="TRACECAL_DATA"):
        data_dir()
    # ../shared/data relative to the working directory
    monkeypatch.delenv("TRACECAL_DATA")
    fake_source = tmp_path / "checkout" / "src" / "tracecal" / "tasks" / "sources.py"
    monkeypatch.setattr(tasks_sources, "__file__", str(fake_source))
    (tmp_path / "shared" / "data").mkdir(parents=True)
    (tmp_path / "repo").mkdir()
    monkeypatch.chdir(tmp_path / "repo")
    assert data_dir() == (tmp_path / "shared" / "data").resolve()
    # ../shared/data relative to the source checkout (<repo>/src/tracecal/tasks/sources.py)
    monkeypatch.chdir(env_dir)
    (tmp_path / "shared" / "data").rename(tmp_path / "moved")
    nested = tmp_path / "outer" / "checkout" / "src" / "tracecal" / "tasks" / "sources.py"
    (tmp_path / "outer" / "shared" / "data").mkdir(parents=True)
    monkeypatch.setattr(tasks_sources, "__file__", str(nested))
    assert data_dir() == (tmp_path / "outer" / "shared" / "data").resolve()
    # nothing in the fixed places: the error names every place tried
    monkeypatch.setattr(tasks_sources, "__file__", str(fake_source))
    with pytest.raises(FileNotFoundError) as err:
        data_dir()
    msg = str(err.value)
    assert "TRACECAL_DATA" in msg and "--data-dir" in msg
    assert str(env_dir / ".." / "shared" / "data") in msg and str(tmp_path / "shared" / "data") in msg


def test_data_dir_never_walks_up_ancestors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a shared/data two or more levels above the working directory or the checkout is not used
    monkeypatch.delenv("TRACECAL_DATA", raising=False)
    (tmp_path / "shared" / "data").mkdir(parents=True)
    deep = tmp_path / "a" / "b" / "repo"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    monkeypatch.setattr(tasks_sources, "__file__", str(deep / "src" / "tracecal" / "tasks" / "sources.py"))
    found = [p.resolve() for p in tasks.data_dir_candidates()]
    assert found == [(tmp_path / "a" / "b" / "shared" / "data").resolve()] * 2
    with pytest.raises(FileNotFoundError, match="none of these exist"):
        data_dir()
    # an installed package (not under src/) adds no candidate of its own
    monkeypatch.setattr(tasks_sources, "__file__", str(tmp_path / "site-packages" / "tracecal" / "tasks" / "x.py"))
    assert [p.resolve() for p in tasks.data_dir_candidates()] == [(tmp_path / "a" / "b" / "shared" / "data").resolve()]


@needs_data
def test_data_dir_env_var_is_used_by_loaders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(
        tmp_path / "triviaqa" / "triviaqa_sm_sub.jsonl",
        _jsonl({"context": "Question: 2+2?\nAnswer:", "answer": "4", "aliases": ["four"]}),
    )
    monkeypatch.setenv("TRACECAL_DATA", str(tmp_path))
    ex = get_task("triviaqa").load()
    assert len(ex) == 1 and ex[0].question == "2+2?" and ex[0].golds == ["4", "four"]
    with pytest.raises(FileNotFoundError, match="svamp"):
        get_task("svamp").load()


# -------------------------------------------------------------------------------------------- hub


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


# ------------------------------------------------------------------------------ task name resolution


def test_user_file_as_task_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _write(tmp_path / "data" / "my.jsonl", _jsonl({"question": "Capital of France?", "answer": "Paris"}))
    for spec in ("data/my.jsonl", str(tmp_path / "data" / "my.jsonl"), Path("data/my.jsonl")):
        task = get_task(spec)
        assert task.name == "file-my" and task.ref == str((tmp_path / "data" / "my.jsonl").resolve())
        assert get_task(task.ref).name == "file-my"  # ref resolves to the same task again
    assert get_task("data/my.jsonl").load()[0].id == "file-my-0"
    # a file named like a built-in task is the user's file, never the built-in one
    _write(tmp_path / "triviaqa.jsonl", _jsonl({"question": "2+2?", "answer": "4"}))
    task = get_task("triviaqa.jsonl")
    assert task.name == "file-triviaqa" and task.source.describe() == "triviaqa.jsonl"
    assert get_task("triviaqa").name == "triviaqa" and get_task("triviaqa").ref == "triviaqa"
    assert get_task(" ARC-Easy ").name == "arc_easy"
    # an odd file name still gives a folder-safe name
    _write(tmp_path / "my data (v2).csv", "question,answer\nq,a\n")
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
    _write(tmp_path / "notes.txt", "question,answer\n")
    with pytest.raises(tasks.TaskDataError, match=r"unsupported file format 'txt'; use .jsonl"):
        get_task("notes.txt")
    _write(tmp_path / "svamp", "[]")  # a file named exactly like a built-in task
    with pytest.raises(tasks.AmbiguousTaskError, match="both the built-in task 'svamp' and a file"):
        get_task("svamp")
    _write(tmp_path / "mine.jsonl", _jsonl({"question": "q", "answer": "a"}))
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
    _write(tmp_path / "a" / "my.jsonl", _jsonl({"question": "q", "answer": "a"}))
    _write(tmp_path / "b" / "my.csv", "question,answer\nq,a\n")
    with pytest.raises(tasks.TaskNameCollisionError, match=r"a/my.jsonl' and .*b/my.csv' would both be stored as"):
        tasks.get_tasks(["a/my.jsonl", "b/my.csv"])
    got = tasks.get_tasks(["triviaqa", "a/my.jsonl", "TriviaQA", str(tmp_path / "a" / "my.jsonl")])
    assert [t.name for t in got] == ["triviaqa", "file-my"]  # the same task twice is kept once
    assert [t.name for t in tasks.get_tasks("gsm8k")] == ["gsm8k"]
    # the way out the message names
    renamed = task_from_file("b/my.csv", name="my_b")
    assert [t.name for t in tasks.get_tasks(["a/my.jsonl", renamed])] == ["file-my", "my_b"]


def test_task_names_are_folder_safe(tmp_path: Path) -> None:
    assert all(tasks.check_task_name(n) == n for n in TASKS)
    for bad in ("../x", "a/b", "", ".hidden", "-x", "a b", "x" * 101):
        with pytest.raises(ValueError, match="cannot be used as a folder name"):
            task_from_file(tmp_path / "q.jsonl", name=bad)
    assert tasks.check_task_name("ok-1.v2_x") == "ok-1.v2_x"
    assert tasks.file_task_name("data/été.jsonl") == "file-_t_"


def test_answer_may_be_a_list_of_aliases(tmp_path: Path) -> None:
    p = _write(
        tmp_path / "odqa.jsonl",
        _jsonl(
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
    m = _write(tmp_path / "m.jsonl", _jsonl({"question": "2+3?", "answer": ["5", "five"]}))
    assert load_user_file(m, kind="math")[0].golds == ["5"]
