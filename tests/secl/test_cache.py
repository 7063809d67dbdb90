"""The frozen-pass file cache (tracecal.secl.cache): reused for the same model and (a sub-stream of) the same
stream, recomputed otherwise, never overwriting another stream's file; what it does is reported, one line each."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import tracecal.secl.cache as cache_mod
from tracecal.secl.cache import frozen_for, matching_pass
from tracecal.secl.frozen import FrozenPass


def _items(n: int) -> list[Any]:
    return [SimpleNamespace(id=f"d/{i}", domain="d") for i in range(n)]


def _pass(items: list[Any], model_id: str = "m") -> FrozenPass:
    n = len(items)
    return FrozenPass(
        ids=[it.id for it in items],
        domains=[it.domain for it in items],
        model_id=model_id,
        answers=[f"a{i}" for i in range(n)],
        entropy=[np.zeros(2) for _ in range(n)],
        surprisal=[np.ones(2) for _ in range(n)],
        tau=np.linspace(0, 1, n),
        v=np.linspace(1, 0, n),
        tau_tokens=np.full(n, 3, dtype=np.int64),
        v_tokens=np.full(n, 4, dtype=np.int64),
    )


@pytest.fixture()
def computed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Replace the model's frozen pass by `_pass` and record how many questions each call computed."""
    calls: list[int] = []

    def fake(lm: Any, items: Any, batch_size: int, progress: Any = None, checkpoint: Any = None) -> FrozenPass:
        calls.append(len(items))
        return _pass(list(items), lm.model_id)

    monkeypatch.setattr(cache_mod, "frozen_pass", fake)
    return calls


def test_computed_then_reused_for_a_sub_stream(tmp_path: Path, computed: list[int]) -> None:
    lm, cache, notes = SimpleNamespace(model_id="m"), tmp_path / "frozen.json", []
    first = frozen_for(lm, _items(4), cache, 2, report=notes.append)
    assert computed == [4] and cache.is_file() and len(first) == 4
    sub = _items(4)[1:3]
    again = frozen_for(lm, sub, cache, 2, report=notes.append)
    assert computed == [4] and again.ids == ["d/1", "d/2"]
    np.testing.assert_array_equal(again.tau, first.tau[1:3])
    assert notes == ["frozen pass over 4 questions…", f"reusing the frozen pass from {cache}"]


@pytest.mark.parametrize(("model_id", "n", "why"), [("other", 2, "computed with 'm', not 'other'"), ("m", 5, "lacks")])
def test_a_mismatch_is_recomputed_and_the_file_kept(
    tmp_path: Path, computed: list[int], model_id: str, n: int, why: str
) -> None:
    cache = tmp_path / "frozen.json"
    _pass(_items(3)).save(cache)
    before, notes = cache.read_text(), []
    got = frozen_for(SimpleNamespace(model_id=model_id), _items(n), cache, 2, report=notes.append)
    assert computed == [n] and len(got) == n and got.model_id == model_id
    assert cache.read_text() == before  # never overwrites another stream's cache
    assert notes[0].startswith(f"{cache} does not match (") and why in notes[0] and notes[0].endswith("; recomputing")


def test_a_pass_in_another_dtype_is_recomputed_and_the_dtype_round_trips(tmp_path: Path, computed: list[int]) -> None:
    """bf16 weights change answers: a pass computed in float32 is not reused for a bfloat16 model; the dtype is
    saved with the pass, and a file saved before it was recorded reads as float32."""
    cache = tmp_path / "frozen.json"
    _pass(_items(3)).save(cache)
    assert FrozenPass.load(cache).dtype == "float32"
    bf16 = SimpleNamespace(model_id="m", model=SimpleNamespace(dtype="torch.bfloat16"))
    notes: list[str] = []
    frozen_for(bf16, _items(3), cache, 2, report=notes.append)
    assert computed == [3] and "computed in float32, not bfloat16" in notes[0]
    p = _pass(_items(2))
    p.dtype = "bfloat16"
    p.save(tmp_path / "b.json")
    assert FrozenPass.load(tmp_path / "b.json").dtype == "bfloat16" == p.select(_items(2)[:1]).dtype
    assert matching_pass(FrozenPass.load(tmp_path / "b.json"), bf16, _items(1)).ids == ["d/0"]
    d = json.loads((tmp_path / "b.json").read_text())
    del d["dtype"]  # a pass saved before the dtype was recorded
    (tmp_path / "old.json").write_text(json.dumps(d))
    assert FrozenPass.load(tmp_path / "old.json").dtype == "float32"


def test_without_a_cache_it_computes_and_logs(computed: list[int], caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("INFO", logger="tracecal.secl.cache"):
        frozen_for(SimpleNamespace(model_id="m"), _items(2), None, 2)
    assert computed == [2] and "frozen pass over 2 questions" in caplog.text


def test_a_file_that_is_not_a_frozen_pass_is_an_error(tmp_path: Path, computed: list[int]) -> None:
    bad = tmp_path / "frozen.json"
    bad.write_text('{"format": 99}')
    with pytest.raises(ValueError, match="not a SECL frozen-pass file"):
        frozen_for(SimpleNamespace(model_id="m"), _items(2), bad, 2)
    for content, why in (
        (b'{"x": "\xe9"}', f"^SECL frozen-pass file {bad}: not UTF-8 text \\(byte 7"),
        (b"[1, 2]", f"^{bad}: not a SECL frozen-pass file \\(format 'list'"),
        (b"{half", f"^SECL frozen-pass file {bad}: not JSON at line 1 column 2"),
    ):
        bad.write_bytes(content)  # a file of the user's given as --cache: named, never recomputed over
        with pytest.raises(ValueError, match=why):  # read through the one checked opener (tracecal._inputs)
            frozen_for(SimpleNamespace(model_id="m"), _items(2), bad, 2)
        assert bad.read_bytes() == content
    bad.unlink()
    bad.mkdir()  # a folder (or a FIFO) as --cache: refused before opening, never blocked on
    with pytest.raises(ValueError, match=f"^SECL frozen-pass file {bad} is a folder"):
        FrozenPass.load(bad)
    assert computed == []


def test_matching_pass() -> None:
    frozen = _pass(_items(3))
    assert matching_pass(frozen, SimpleNamespace(model_id="m"), _items(3)[::-1]).ids == ["d/2", "d/1", "d/0"]
    with pytest.raises(ValueError, match="computed with 'm', not 'x'"):
        matching_pass(frozen, SimpleNamespace(model_id="x"), _items(3))


def test_a_cache_without_raw_p_yes_gets_it_read_when_needed(
    tmp_path: Path, computed: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass saved before raw P(yes) was recorded: read for the stream's answers when the ``ptrue`` target needs
    it (the file is not rewritten), left alone otherwise."""
    cache = tmp_path / "frozen.json"
    _pass(_items(3)).save(cache)
    before, reads = cache.read_text(), []

    def fake_read(lm: Any, items: Any, answers: Any, batch_size: int) -> tuple[Any, Any, Any]:
        reads.append(list(answers))
        return None, np.full(len(answers), 0.25), None

    monkeypatch.setattr(cache_mod, "read_p_true", fake_read)
    lm = SimpleNamespace(model_id="m")
    assert frozen_for(lm, _items(3)[:2], cache, 2).p_yes is None and reads == []
    got = frozen_for(lm, _items(3)[:2], cache, 2, need_p_yes=True)
    assert reads == [["a0", "a1"]] and got.p_yes is not None and got.p_yes.tolist() == [0.25, 0.25]
    assert computed == [] and cache.read_text() == before
