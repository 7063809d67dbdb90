"""`tracecal.passes.base`: the registry of passes, stat lookup, dependency order, shard tables."""

from __future__ import annotations

import numpy as np
import pytest

import tracecal.passes  # noqa: F401  (registers the built-in passes)
from tracecal.errors import TracecalError
from tracecal.passes.base import ANSWER, PASSES, TOKEN, Pass, UnknownStatError, passes_for, provider_of, stat_kind


def test_builtin_passes_are_registered_with_their_stats() -> None:
    assert {"traces", "extra", "semantic", "beam"} <= set(PASSES)
    assert provider_of("p_true") == "extra" and stat_kind("p_true") == ANSWER and stat_kind("surprisal") == TOKEN
    assert passes_for(["p_true", "beam"]) == ["traces", "extra", "beam"]


def test_an_unknown_stat_is_a_tracecal_error() -> None:
    assert issubclass(UnknownStatError, TracecalError) and issubclass(UnknownStatError, ValueError)
    with pytest.raises(UnknownStatError, match="no registered pass provides the stat 'nope'"):
        provider_of("nope")


def test_to_table_checks_every_provided_stat() -> None:
    class Toy(Pass):
        name = "toy"
        provides = {"a": ANSWER, "t": TOKEN}

    table = Toy().to_table(["x", "y"], {"a": [0.5, np.nan], "t": [[1.0], [2.0, 3.0]]})
    assert table.column_names == ["id", "a", "t"] and table.column("t").to_pylist() == [[1.0], [2.0, 3.0]]
    with pytest.raises(ValueError, match="did not compute 't'"):
        Toy().to_table(["x"], {"a": [0.5]})
    with pytest.raises(ValueError, match="'a' has 1 values for 2 answers"):
        Toy().to_table(["x", "y"], {"a": [0.5], "t": [[], []]})
