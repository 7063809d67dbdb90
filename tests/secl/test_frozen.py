"""`tracecal.secl.frozen`: the frozen pass saved and loaded, and its sub-streams."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tracecal.secl import FrozenPass


def test_frozen_pass_cache_and_sub_stream(tiny_model, stream, frozen, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    loaded = FrozenPass.load(frozen.save(tmp_path / "f.json"))
    np.testing.assert_array_equal(loaded.v, frozen.v)
    np.testing.assert_array_equal(loaded.tau, frozen.tau)
    assert loaded.answers == frozen.answers and all(
        np.array_equal(a, b) for a, b in zip(loaded.entropy, frozen.entropy, strict=True)
    )
    sub = [stream[0], stream[1], stream[4]]
    part = loaded.select(sub)
    part.check(sub, tiny_model.model_id)
    np.testing.assert_array_equal(part.tau, frozen.tau[[0, 1, 4]])
    assert part.cost.cost("tau") == int(frozen.tau_tokens[[0, 1, 4]].sum())
    with pytest.raises(ValueError):
        part.select(stream)


def test_the_frozen_pass_holds_one_of_everything_per_question(stream, frozen) -> None:  # type: ignore[no-untyped-def]
    n = len(stream)
    assert len(frozen.answers) == len(frozen.entropy) == len(frozen.surprisal) == n
    assert frozen.v.shape == frozen.tau.shape == (n,)
    assert ((frozen.v >= 0) & (frozen.v <= 1)).all() and ((frozen.tau >= 0) & (frozen.tau <= 1)).all()
