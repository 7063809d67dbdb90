"""`tracecal.tasks.choices`: the multiple-choice rule (option letters, option texts) on real rows and edge cases."""

from __future__ import annotations

from tests.tasks.helpers import needs_data, rows
from tracecal.tasks import (
    extract_choice_letter,
    get_task,
    mc_match,
)


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
