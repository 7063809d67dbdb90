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


def test_an_interrupted_pass_resumes_from_its_answer_checkpoint(tiny_model, stream, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Killed after its first chunk (4 questions at batch size 1), the pass resumes from the checkpoint, generates
    only the other 4, and equals an uninterrupted pass; a checkpoint of another model is not resumed from."""
    import tracecal.secl.frozen as frozen_mod
    from tracecal.secl import frozen_pass

    real, calls = frozen_mod.generate_answers, []

    def dies_second(lm, items, batch_size, cost):  # type: ignore[no-untyped-def]
        calls.append(len(items))
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(lm, items, batch_size, cost)

    monkeypatch.setattr(frozen_mod, "generate_answers", dies_second)
    ckpt = tmp_path / "f.json.answers"
    with pytest.raises(KeyboardInterrupt):
        frozen_pass(tiny_model, stream, batch_size=1, checkpoint=ckpt)
    saved = json.loads(ckpt.read_text())
    assert len(saved["ids"]) == 4 and saved["ids"] == [it.id for it in stream[:4]]
    calls.clear()
    monkeypatch.setattr(frozen_mod, "generate_answers", lambda *a: (calls.append(len(a[1])), real(*a))[1])
    resumed = frozen_pass(tiny_model, stream, batch_size=1, checkpoint=ckpt)
    assert calls == [4]
    whole = frozen_pass(tiny_model, stream, batch_size=1)
    assert resumed.answers == whole.answers and resumed.cost.passes == whole.cost.passes
    np.testing.assert_allclose(resumed.tau, whole.tau)
    assert all(np.allclose(a, b) for a, b in zip(resumed.entropy, whole.entropy, strict=True))
    saved["model_id"] = "another-model"
    ckpt.write_text(json.dumps(saved))
    calls.clear()
    frozen_pass(tiny_model, stream, batch_size=1, checkpoint=ckpt)
    assert calls == [4, 4]  # all 8 generated again


def test_frozen_for_checkpoints_beside_the_cache_and_removes_it_when_saved(tiny_model, stream, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from tracecal.secl.cache import checkpoint_path, frozen_for

    cache = tmp_path / "frozen.json"
    got = frozen_for(tiny_model, stream, cache, 8)
    assert cache.is_file() and not checkpoint_path(cache).exists() and len(got) == len(stream)
    assert checkpoint_path(cache).name == "frozen.json.answers"
