"""`tracecal.tasks.labels`: the alias, numeric, F1 and TruthfulQA rules, on real rows and on edge cases."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.tasks.helpers import needs_data, rows
from tracecal import tasks
from tracecal.tasks import (
    alias_match,
    extract_last_number,
    f1_match,
    get_task,
    numeric_match,
    token_f1,
    truthful_match,
)


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
