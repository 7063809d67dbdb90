"""Trace storage: lossless Parquet / JSONL round-trips and clear errors on corrupt files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tracecal.trace import (
    Trace,
    TraceBatch,
    TraceFileError,
    export_jsonl,
    import_jsonl,
    load_trace_batch,
    load_traces,
    save_traces,
)


def make_traces() -> list[Trace]:
    rng = np.random.default_rng(1)
    out = []
    for i, n in enumerate([3, 1, 0, 7]):
        out.append(
            Trace(
                text="x" * n,
                token_ids=rng.integers(0, 50000, n),
                surprisal=rng.random(n) * 3 + 1e-17,
                entropy=rng.random(n) * 5,
                token_strings=["x"] * n,
                offsets=np.arange(n),
                prompt=f"prompt <script>{i}</script> ünï",
                prompt_ids=rng.integers(0, 50000, 5),
                stop_reason="eos" if n else "eos",
                model_id="m",
                decoding={"strategy": "greedy", "max_new_tokens": 8},
                topk_ids=rng.integers(0, 100, (n, 2)) if i == 0 else None,
                topk_logprobs=-rng.random((n, 2)) if i == 0 else None,
                id=f"q{i}",
                meta={"task": "t"},
            )
        )
    return out


def assert_same(a: list[Trace], b: list[Trace]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.to_dict() == y.to_dict()
        assert x.surprisal.dtype == np.float64 and x.token_ids.dtype == np.int64
        np.testing.assert_array_equal(x.surprisal, y.surprisal)  # bit-exact


def test_parquet_roundtrip_lossless(tmp_path: Path) -> None:
    tr = make_traces()
    save_traces(tr, tmp_path / "t.parquet")
    assert_same(tr, load_traces(tmp_path / "t.parquet"))


def test_jsonl_roundtrip_lossless(tmp_path: Path) -> None:
    tr = make_traces()
    export_jsonl(tr, tmp_path / "t.jsonl")
    assert_same(tr, import_jsonl(tmp_path / "t.jsonl"))


def test_batch_from_parquet_matches_from_traces(tmp_path: Path) -> None:
    tr = make_traces()
    save_traces(tr, tmp_path / "t.parquet")
    a, b = load_trace_batch(tmp_path / "t.parquet"), TraceBatch.from_traces(tr)
    np.testing.assert_array_equal(a.offsets, b.offsets)
    np.testing.assert_array_equal(a.entropy, b.entropy)
    np.testing.assert_array_equal(a.token_ids, b.token_ids)


def test_shard_directory(tmp_path: Path) -> None:
    tr = make_traces()
    save_traces(tr[:2], tmp_path / "shards" / "00000.parquet")
    save_traces(tr[2:], tmp_path / "shards" / "00001.parquet")
    assert_same(tr, load_traces(tmp_path / "shards"))


def test_corrupt_parquet_is_a_clear_error(tmp_path: Path) -> None:
    p = tmp_path / "bad.parquet"
    save_traces(make_traces(), p)
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])  # truncated file
    with pytest.raises(TraceFileError, match="not a readable Parquet"):
        load_traces(p)
    p.write_text("hello")
    with pytest.raises(TraceFileError):
        load_traces(p)
    with pytest.raises(FileNotFoundError):
        load_traces(tmp_path / "missing.parquet")


def test_foreign_parquet_refused(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"a": [1, 2]}), tmp_path / "other.parquet")
    with pytest.raises(TraceFileError, match="missing columns"):
        load_traces(tmp_path / "other.parquet")


def test_inconsistent_trace_refused() -> None:
    with pytest.raises(ValueError, match="surprisal"):
        Trace(text="a", token_ids=[1, 2], surprisal=[0.1], entropy=[0.1, 0.2])
    with pytest.raises(ValueError, match="entropy_kind"):
        Trace(text="a", token_ids=[1], surprisal=[0.1], entropy=[0.1], entropy_kind="approx")


def test_batch_validation() -> None:
    with pytest.raises(ValueError, match="offsets"):
        TraceBatch(np.zeros(3), np.zeros(3), np.array([0, 2]))
    with pytest.raises(ValueError):
        TraceBatch.from_lists([[1.0]], [[1.0, 2.0]])


def test_saved_files_get_the_usual_permissions(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import os
    import stat

    from tracecal.trace import _UMASK

    t = Trace(text="a", token_ids=np.array([1]), surprisal=np.array([0.1]), entropy=np.array([0.2]))
    p = save_traces([t], tmp_path / "x.parquet")
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o666 & ~_UMASK  # not mkstemp's 0600
