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
