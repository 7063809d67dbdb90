"""`tracecal.tasks.labellers`: the registry of named correctness rules."""

from __future__ import annotations

import doctest

import pytest

import tracecal.tasks.labellers as labellers
from tracecal.errors import ValidationError
from tracecal.tasks.example import Example
from tracecal.tasks.labellers import LABELLERS, UnknownLabellerError, f1_labeller, get_labeller


def test_registry_and_lookup() -> None:
    assert sorted(LABELLERS) == ["alias", "f1", "f1_de", "mc", "numeric", "truthful"]
    assert get_labeller("alias") is LABELLERS["alias"] and get_labeller(LABELLERS["mc"]) is LABELLERS["mc"]
    ex = Example(id="1", task="t", question="q", golds=["Paris"])
    assert LABELLERS["alias"](ex, "It is Paris.") == 1 and LABELLERS["alias"](ex, None) == 0
    assert f1_labeller("de").name == "f1_de" and "umlauts kept" in f1_labeller("de").rule
    assert doctest.testmod(labellers).failed == 0


def test_an_unknown_labeller_names_the_known_ones() -> None:
    assert issubclass(UnknownLabellerError, ValidationError)
    with pytest.raises(UnknownLabellerError, match="unknown labeller 'exact'; known: alias, f1"):
        get_labeller("exact")


def test_agrees_puts_the_reference_answer_in_the_golds_place() -> None:
    """Self-consistency and the sampling clusters compare two answers by the task's own rule (`Labeller.agrees`)."""
    ex = Example(id="1", task="t", question="q", golds=["unused"], choices=["red", "green", "blue"])
    alias, numeric, mc = LABELLERS["alias"], LABELLERS["numeric"], LABELLERS["mc"]
    assert alias.agrees(ex, "Paris", "The city of Paris.") == 1
    assert alias.agrees(ex, "The city of Paris.", "Paris") == 0  # containment: not symmetric
    assert alias.agrees(ex, "", "Paris") == 0 and alias.agrees(ex, "Paris", "") == 0
    assert numeric.agrees(ex, "3 + 9 = 12 apples", "so 12.0") == 1 and numeric.agrees(ex, "12", "13") == 0
    assert numeric.agrees(ex, "no idea", "12") == 0  # a reference without a number matches nothing
    assert numeric.agrees(ex, "-1,500", "it is -1500") == 1
    assert mc.agrees(ex, "The answer is B", "green") == 1 and mc.agrees(ex, "B", "(C)") == 0
    assert mc.agrees(ex, "I do not know", "B") == 0
    truthful = Example(id="2", task="t", question="q", golds=["x"], incorrect=["the moon is made of cheese"])
    assert LABELLERS["truthful"].agrees(truthful, "the moon is rock", "the moon is rock and dust") == 1
    assert LABELLERS["truthful"].agrees(truthful, "the moon is rock", "the moon is made of cheese") == 0
    assert f1_labeller("de").agrees(ex, "der Rhein", "Rhein") == 1
