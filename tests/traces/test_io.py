"""Trace persistence (`tracecal.traces.io`): lossless Parquet / JSONL round-trips, atomic writes with the usual
permissions, clear errors on corrupt files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tracecal.traces.io import (
    TraceFileError,
    export_jsonl,
    import_jsonl,
    load_trace_batch,
    load_traces,
    save_traces,
)
from tracecal.traces.trace import Trace, TraceBatch


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


def _trace(s: list[float], h: list[float], id: str = "") -> Trace:
    return Trace(text="x" * len(s), token_ids=np.arange(len(s)), surprisal=s, entropy=h, id=id)


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


def test_saved_files_get_the_usual_permissions(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import os
    import stat

    from tracecal.traces.io import FILE_MODE

    t = Trace(text="a", token_ids=np.array([1]), surprisal=np.array([0.1]), entropy=np.array([0.2]))
    p = save_traces([t], tmp_path / "x.parquet")
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(os.stat(p).st_mode) == FILE_MODE == 0o666 & ~mask  # not mkstemp's 0600


def test_load_traces_refuses_bad_values(tmp_path: Path) -> None:
    p = save_traces([_trace([0.1], [0.2], "ok"), _trace([0.2, -3.0], [0.1, 0.1], "bad1")], tmp_path / "t.parquet")
    with pytest.raises(TraceFileError, match=r"t.parquet: row 1 \(id 'bad1'\): surprisal of token 1 is -3.0"):
        load_traces(p)
    with pytest.raises(TraceFileError, match=r"t.parquet: row 1: surprisal of token 1 is -3.0"):
        load_trace_batch(p)
    tiny = save_traces([_trace([0.1, -1e-8], [0.2, 0.0])], tmp_path / "tiny.parquet")
    assert load_traces(tiny)[0].surprisal[1] == 0.0 and load_trace_batch(tiny).surprisal[1] == 0.0


def test_import_jsonl_refuses_bad_values(tmp_path: Path) -> None:
    p = export_jsonl([_trace([0.1], [0.2], "a"), _trace([0.1], [np.nan], "b")], tmp_path / "t.jsonl")
    text = p.read_text().replace("\n", "\n\n", 1)  # a blank line: the error names the file's line, not the index
    p.write_text(text)
    with pytest.raises(TraceFileError, match=r"t.jsonl:3 \(id 'b'\): entropy of token 0 is nan"):
        import_jsonl(p)
    p.write_text("[" * 50_000 + "]" * 50_000 + "\n")
    with pytest.raises(TraceFileError, match="t.jsonl:1: not a trace \\(nested too deeply\\)"):
        import_jsonl(p)
