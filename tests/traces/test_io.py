"""Trace persistence (`tracecal.traces.io`): lossless Parquet / JSONL round-trips, atomic writes with the usual
permissions, clear errors on corrupt files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.traces.disk import fill, read_only, small_filesystem, tmp_files
from tracecal._outputs import atomic_write
from tracecal.errors import ValidationError
from tracecal.traces.io import (
    TraceFileError,
    export_jsonl,
    import_jsonl,
    load_trace_batch,
    load_traces,
    save_traces,
    traces_to_table,
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

    from tracecal._outputs import FILE_MODE

    t = Trace(text="a", token_ids=np.array([1]), surprisal=np.array([0.1]), entropy=np.array([0.2]))
    p = save_traces([t], tmp_path / "x.parquet")
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(os.stat(p).st_mode) == FILE_MODE == 0o666 & ~mask  # not mkstemp's 0600


def _write_unchecked(traces: list[Trace], path: Path) -> Path:
    """A traces file written without the value check of `save_traces` (as another tool could)."""
    import pyarrow.parquet as pq

    pq.write_table(traces_to_table(traces), path)
    return path


def test_load_traces_refuses_bad_values(tmp_path: Path) -> None:
    p = _write_unchecked([_trace([0.1], [0.2], "ok"), _trace([0.2, -3.0], [0.1, 0.1], "bad1")], tmp_path / "t.parquet")
    with pytest.raises(TraceFileError, match=r"t.parquet: row 1 \(id 'bad1'\): surprisal of token 1 is -3.0"):
        load_traces(p)
    with pytest.raises(TraceFileError, match=r"t.parquet: row 1: surprisal of token 1 is -3.0"):
        load_trace_batch(p)
    tiny = save_traces([_trace([0.1, -1e-8], [0.2, 0.0])], tmp_path / "tiny.parquet")
    assert load_traces(tiny)[0].surprisal[1] == 0.0 and load_trace_batch(tiny).surprisal[1] == 0.0


def test_import_jsonl_refuses_bad_values(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    rows = [_trace([0.1], [0.2], "a").to_dict(), _trace([0.1], [np.nan], "b").to_dict()]
    p.write_text("\n\n".join(json.dumps(r) for r in rows) + "\n")  # a blank line: the error names the file's line
    with pytest.raises(TraceFileError, match=r"t.jsonl:3 \(id 'b'\): entropy of token 0 is nan"):
        import_jsonl(p)
    p.write_text("[" * 50_000 + "]" * 50_000 + "\n")
    with pytest.raises(TraceFileError, match="t.jsonl:1: not a trace \\(nested too deeply\\)"):
        import_jsonl(p)


# ---------------------------------------------------------------------------------------------- writes


@pytest.mark.parametrize(
    ("surprisal", "entropy", "message"),
    [
        ([0.1, np.nan], [0.1, 0.1], "surprisal of token 1 is nan"),
        ([0.1, 0.1], [np.inf, 0.1], "entropy of token 0 is inf"),
        ([-2.0], [0.1], "surprisal of token 0 is -2.0"),
        ([0.1], [-0.5], "entropy of token 0 is -0.5"),
        ([1e308], [0.1], "surprisal of token 0 is 1e[+]308; surprisal must be ≤ 10000 nats"),
    ],
)
def test_save_refuses_what_load_would_refuse(tmp_path: Path, surprisal: list, entropy: list, message: str) -> None:
    bad = [_trace([0.1], [0.2], "ok"), _trace(surprisal, entropy, "b7")]
    for write, name in ((save_traces, "t.parquet"), (export_jsonl, "t.jsonl")):
        with pytest.raises(TraceFileError, match=rf"{name}: not written: answer 1 \(id 'b7'\): {message}"):
            write(bad, tmp_path / name)
        assert not (tmp_path / name).exists()
    assert bad[1].surprisal.tolist() == pytest.approx(surprisal, nan_ok=True)  # the traces are not modified


def test_values_at_the_bound_and_round_off_round_trip(tmp_path: Path) -> None:
    from tracecal.traces.segments import MAX_TOKEN_NATS

    t = _trace([MAX_TOKEN_NATS, -1e-8], [0.0, MAX_TOKEN_NATS], "edge")
    back = load_traces(save_traces([t], tmp_path / "t.parquet"))[0]
    assert back.surprisal.tolist() == [MAX_TOKEN_NATS, 0.0] and back.entropy.tolist() == [0.0, MAX_TOKEN_NATS]
    assert t.surprisal[1] == -1e-8  # the caller's trace keeps its value; the read clips the round-off
    assert import_jsonl(export_jsonl([t], tmp_path / "t.jsonl"))[0].surprisal.tolist() == [MAX_TOKEN_NATS, 0.0]


def test_import_jsonl_reads_a_byte_order_mark(tmp_path: Path) -> None:
    p = tmp_path / "bom.jsonl"
    p.write_text("\ufeff" + json.dumps(_trace([0.1], [0.2], "a").to_dict()) + "\n", encoding="utf-8")
    assert [t.id for t in import_jsonl(p)] == ["a"]


def test_writing_through_a_symlink_replaces_its_target_and_keeps_the_link(tmp_path: Path) -> None:
    real = tmp_path / "data" / "real.parquet"
    real.parent.mkdir()
    real.write_bytes(b"old")
    link = tmp_path / "link.parquet"
    link.symlink_to(real)
    save_traces([_trace([0.1], [0.2], "a")], link)
    assert link.is_symlink() and link.resolve() == real.resolve()
    assert [t.id for t in load_traces(real)] == ["a"]
    assert tmp_files(real.parent) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["data", "link.parquet"]
    dangling = tmp_path / "dangling.jsonl"
    dangling.symlink_to(tmp_path / "data" / "new.jsonl")
    export_jsonl([_trace([0.1], [0.2], "b")], dangling)
    assert dangling.is_symlink() and [t.id for t in import_jsonl(tmp_path / "data" / "new.jsonl")] == ["b"]


def test_a_named_pipe_is_written_into_not_replaced(tmp_path: Path) -> None:
    import os
    import stat

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader is there: opening it to write does not block
    try:
        atomic_write(fifo, lambda name: Path(name).write_text("through the pipe\n"))
        assert os.read(reader, 1000) == b"through the pipe\n"
    finally:
        os.close(reader)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and tmp_files(tmp_path) == []


def test_a_character_device_is_written_into_not_replaced(tmp_path: Path) -> None:
    import os
    import stat

    dev = tmp_path / "null"
    try:
        os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # the /dev/null device, in this test's folder
    except (PermissionError, OSError) as e:
        pytest.skip(f"cannot make a device node here ({e}); the named-pipe test covers the same path")
    link = tmp_path / "out.parquet"
    link.symlink_to(dev)  # like /dev/stdout, a link to a device
    save_traces([_trace([0.1], [0.2], "a")], link)
    assert stat.S_ISCHR(os.stat(dev).st_mode) and link.is_symlink() and tmp_files(tmp_path) == []


def test_a_folder_or_read_only_file_is_refused(tmp_path: Path) -> None:
    import os

    with pytest.raises(ValidationError, match="is a folder: give a file path"):
        save_traces([], tmp_path)
    ro = tmp_path / "ro.parquet"
    ro.write_bytes(b"keep me")
    ro.chmod(0o444)
    if os.access(ro, os.W_OK):
        pytest.skip("this process (root) may write a read-only file: nothing to refuse")
    with pytest.raises(PermissionError, match="read-only file: not replaced"):
        save_traces([], ro)
    assert ro.read_bytes() == b"keep me"


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    import errno

    target = tmp_path / "t.csv"
    target.write_bytes(b"old content")

    def half_then_full(name: str) -> None:
        Path(name).write_bytes(b"half")
        raise OSError(errno.ENOSPC, "No space left on device", name)

    with pytest.raises(OSError, match="No space left"):
        atomic_write(target, half_then_full)
    assert target.read_bytes() == b"old content" and tmp_files(tmp_path) == []


def test_a_full_or_read_only_disk_keeps_the_old_file(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    big = [_trace(list(rng.random(4000)), list(rng.random(4000)), f"q{i}") for i in range(40)]  # ~2.5 MB
    with small_filesystem(tmp_path) as mnt:
        old = save_traces(big[:1], mnt / "t.parquet")
        before = old.read_bytes()
        fill(mnt)
        with pytest.raises(OSError, match="No space left on device"):
            save_traces(big, old)
        assert old.read_bytes() == before and tmp_files(mnt) == []
        (mnt / ".filler").unlink()
        read_only(mnt)
        with pytest.raises(OSError, match="(?i)read-only file"):
            save_traces(big[:1], old)
        assert old.read_bytes() == before and tmp_files(mnt) == []


def _refuse_constant(name: str) -> None:
    raise AssertionError(f"not standard JSON: {name}")


def test_jsonl_is_standard_json_and_a_missing_top_k_entry_comes_back(tmp_path: Path) -> None:
    """``-Infinity`` / ``NaN`` are not JSON (a JavaScript ``JSON.parse`` refuses them): written as null, read back
    as −∞ for a top-k entry; a file of an older tracecal, with bare ``-Infinity``, reads the same."""
    t = make_traces()[0]
    assert t.topk_logprobs is not None
    t.topk_logprobs[1, 1] = -np.inf  # fewer alternatives than k at that step
    t.meta["end_prob"] = float("nan")
    path = export_jsonl([t], tmp_path / "t.jsonl")
    doc = json.loads(path.read_text(encoding="utf-8"), parse_constant=_refuse_constant)
    assert doc["topk_logprobs"][1][1] is None and doc["meta"]["end_prob"] is None
    back = import_jsonl(path)[0]
    assert back.topk_logprobs is not None and back.topk_logprobs[1, 1] == -np.inf
    np.testing.assert_array_equal(back.topk_logprobs, t.topk_logprobs)
    path.write_text(json.dumps(t.to_dict()) + "\n", encoding="utf-8")  # the old layout
    old = import_jsonl(path)[0].topk_logprobs
    assert old is not None and old[1, 1] == -np.inf


def test_an_output_that_is_an_input_is_refused_through_links(tmp_path: Path) -> None:
    import os

    from tracecal._outputs import check_output

    src = save_traces([_trace([0.1], [0.2], "a")], tmp_path / "in.parquet")
    shards = tmp_path / "shards"
    shard = save_traces([_trace([0.1], [0.2], "b")], shards / "00000.parquet")
    before = {p: p.read_bytes() for p in (src, shard)}
    (tmp_path / "sym.parquet").symlink_to(src)
    os.link(src, tmp_path / "hard.parquet")
    write = lambda name: Path(name).write_bytes(b"output")  # noqa: E731
    for out in (src, tmp_path / "sym.parquet", tmp_path / "hard.parquet"):
        with pytest.raises(ValidationError, match=f"--out {out} is the traces {src}: writing it would destroy"):
            atomic_write(out, write, [("labels", None), ("traces", src)], "--out")
    with pytest.raises(ValidationError, match=r"the output .*00000.parquet is the traces .*\(a file of .*shards\)"):
        save_traces([_trace([0.1], [0.2], "c")], shard, [("traces", shards)])
    assert {p: p.read_bytes() for p in (src, shard)} == before
    atomic_write(tmp_path / "new.parquet", write, [("traces", src), ("traces", shards)])  # not an input: written
    check_output(os.devnull, [("input", os.devnull)])  # a device is written into, never replaced: no input lost


def test_an_os_error_names_the_target_not_its_temporary_file(tmp_path: Path) -> None:
    import errno

    def full(name: str) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", name)

    def no_name(name: str) -> None:  # pyarrow's errors name no file
        raise OSError(errno.ENOSPC, "Error writing bytes to file. Detail: [errno 28] No space left on device")

    for write in (full, no_name):
        with pytest.raises(OSError, match="No space left") as err:
            atomic_write(tmp_path / "t.json", write)
        assert err.value.filename == str(tmp_path / "t.json") and err.value.errno == errno.ENOSPC
    assert tmp_files(tmp_path) == []


def test_a_processs_open_file_is_written_into_not_replaced(tmp_path: Path) -> None:
    """``--csv /dev/stdout`` with stdout redirected to a file (``> log``): /dev/stdout resolves to that regular file,
    which a rename would replace under the shell's feet (what is printed after would go to a deleted file). It is
    written into instead, through /dev/fd/N, /proc/self/fd/N and a link to either."""
    import os

    log = tmp_path / "log.txt"
    log.write_text("")
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    try:
        inode = log.stat().st_ino
        link = tmp_path / "out.csv"
        link.symlink_to(f"/dev/fd/{fd}")
        for k, path in enumerate([Path(f"/dev/fd/{fd}"), Path(f"/proc/self/fd/{fd}"), link]):
            atomic_write(path, lambda name, k=k: Path(name).write_text(f"part {k}\n"))  # type: ignore[misc]
            assert log.stat().st_ino == inode and tmp_files(tmp_path) == []
        os.write(fd, b"printed after\n")  # the process's own output still reaches the file
    finally:
        os.close(fd)
    assert log.read_text().endswith("printed after\n") and "part 2" in log.read_text()


def test_a_folder_without_traces_is_refused_alike_by_the_api_and_the_cli(tmp_path: Path) -> None:
    """``load_traces(folder)`` with no ``*.parquet`` in it is a `TraceFileError` saying what to give, and
    ``tracecal score FOLDER`` refuses it with the same words (exit 2), not an empty result."""
    from typer.testing import CliRunner

    from tracecal.cli.app import app

    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("not traces\n")
    with pytest.raises(TraceFileError, match="is a folder with no traces file"):
        load_traces(empty)
    r = CliRunner().invoke(app, ["score", str(empty)])
    assert r.exit_code == 2 and "is a folder with no traces file" in " ".join(r.output.split()), r.output
