"""`tracecal.secl.frozen`: the frozen pass saved and loaded, and its sub-streams."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tracecal.secl import FrozenPass


def test_frozen_pass_cache_and_sub_stream(tiny_model, stream, frozen, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    loaded = FrozenPass.load(frozen.save(tmp_path / "f.json"))
    np.testing.assert_array_equal(loaded.v, frozen.v)
    np.testing.assert_array_equal(loaded.tau, frozen.tau)
    assert loaded.p_yes is not None and frozen.p_yes is not None
    np.testing.assert_array_equal(loaded.p_yes, frozen.p_yes)
    assert loaded.answers == frozen.answers and all(
        np.array_equal(a, b) for a, b in zip(loaded.entropy, frozen.entropy, strict=True)
    )
    sub = [stream[0], stream[1], stream[4]]
    part = loaded.select(sub)
    part.check(sub, tiny_model.model_id)
    np.testing.assert_array_equal(part.tau, frozen.tau[[0, 1, 4]])
    np.testing.assert_array_equal(part.p_yes, frozen.p_yes[[0, 1, 4]])
    old = {k: v for k, v in frozen.to_dict().items() if k != "p_yes"}  # a pass saved before p_yes was recorded
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert FrozenPass.load(tmp_path / "old.json").p_yes is None
    assert part.cost.cost("tau") == int(frozen.tau_tokens[[0, 1, 4]].sum())
    with pytest.raises(ValueError):
        part.select(stream)


def test_the_frozen_pass_holds_one_of_everything_per_question(stream, frozen) -> None:  # type: ignore[no-untyped-def]
    n = len(stream)
    assert len(frozen.answers) == len(frozen.entropy) == len(frozen.surprisal) == n
    assert frozen.v.shape == frozen.tau.shape == (n,)
    assert ((frozen.v >= 0) & (frozen.v <= 1)).all() and ((frozen.tau >= 0) & (frozen.tau <= 1)).all()
    # raw P(yes) from the same read: P(yes) ≤ NormPTrue = P(yes)/(P(yes)+P(no)), equal only when P(yes)+P(no) = 1
    assert frozen.p_yes is not None and frozen.p_yes.shape == (n,)
    assert ((frozen.p_yes > 0) & (frozen.p_yes <= frozen.tau + 1e-12)).all()
