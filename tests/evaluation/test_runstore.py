"""The run store: claims held by kernel locks (released when a worker dies), locked config updates, atomic
shards, reading back, and a worker that waits for the shard another worker holds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pytest

from tests.evaluation.test_run import Counting
from tracecal.evaluation.config import EvalConfig
from tracecal.evaluation.run import evaluate
from tracecal.evaluation.runstore import ConfigMismatchError, NotARunError, RunStore, RunStoreError


def test_a_claim_excludes_other_holders_until_released(tmp_path: Path) -> None:
    a, b = RunStore(tmp_path), RunStore(tmp_path)
    c = a.claim("traces", "t", 0)
    assert c is not None
    assert b.claim("traces", "t", 0) is None  # another open file description: excluded, even in this process
    assert b.claim("traces", "t", 1) is not None  # other shards are free
    c.release()
    again = b.claim("traces", "t", 0)
    assert again is not None
    again.release()


def test_a_killed_workers_claim_is_free_at_once(tmp_path: Path) -> None:
    code = (
        "import sys; from tracecal.evaluation.runstore import RunStore\n"
        f"c = RunStore({str(tmp_path)!r}).claim('traces', 't', 3)\n"
        "print('held' if c else 'busy', flush=True); sys.stdin.read()\n"
    )
    p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "held"
        assert RunStore(tmp_path).claim("traces", "t", 3) is None
    finally:
        p.kill()
        p.wait()
    c = RunStore(tmp_path).claim("traces", "t", 3)  # no pid files, no time-out: the kernel released it
    assert c is not None
    c.release()


def test_config_identity_is_checked_and_tasks_merged(tmp_path: Path) -> None:
    s = RunStore(tmp_path / "r")
    with pytest.raises(NotARunError, match="not a run directory"):
        s.config()
    s.open({"tasks": ["a"]}, {"model": "m", "dtype": "float32"})
    stored = s.open({"tasks": ["b"]}, {"model": "m", "dtype": "float32"})
    assert stored["tasks"] == ["a", "b"]
    with pytest.raises(ConfigMismatchError, match="model='m', not 'other'"):
        s.open({"tasks": ["a"]}, {"model": "other", "dtype": "float32"})
    assert s.config()["config"]["tasks"] == ["a", "b"]  # the refused open wrote nothing


def test_legacy_run_directories_are_read_with_their_old_identity(tmp_path: Path) -> None:
    from tracecal.evaluation.config import legacy_identity

    run = tmp_path / "old"
    run.mkdir()
    old = {"config": {"tasks": ["triviaqa"], "limit": 10, "model": None, "dtype": "auto", "shard_size": 64}}
    (run / "config.json").write_text(json.dumps(old))
    s = RunStore(run)
    ident = EvalConfig(tasks=["triviaqa"], limit=10, dtype="float32").identity()  # what auto meant on that CPU
    s.open({"tasks": ["triviaqa"]}, ident, legacy=legacy_identity)  # auto on a CPU was float32: accepted
    assert json.loads((run / "config.json").read_text())["identity"]["dtype"] == "float32"
    with pytest.raises(ConfigMismatchError, match="limit=10, not 11"):
        RunStore(run).open({"tasks": []}, ident | {"limit": 11}, legacy=legacy_identity)


def test_identity_defaults_compare_a_key_either_side_lacks(tmp_path: Path) -> None:
    """A key of ``defaults`` (``backend``, written only for llama.cpp) is compared as its default where an identity
    lacks it: an old run without it resumes as the default and keeps its identity as it was; another value is
    refused both ways."""
    d = {"backend": "hf"}
    old = RunStore(tmp_path / "old")
    old.open({"tasks": ["a"]}, {"model": "m", "dtype": "float32"})
    old.open({"tasks": ["a"]}, {"model": "m", "dtype": "float32"}, defaults=d)  # the same run
    assert old.config()["identity"] == {"model": "m", "dtype": "float32"}  # nothing added to it
    with pytest.raises(ConfigMismatchError, match="backend='hf', not 'llamacpp'"):
        old.check({"backend": "llamacpp", "model": "m", "dtype": None}, defaults=d)
    new = RunStore(tmp_path / "new")
    new.open({"tasks": ["a"]}, {"backend": "llamacpp", "model": "m", "dtype": None}, defaults=d)
    with pytest.raises(ConfigMismatchError, match="backend='llamacpp', not 'hf'"):
        new.open({"tasks": ["a"]}, {"model": "m", "dtype": "float32"}, defaults=d)
    new.check({"backend": "llamacpp", "model": "m", "dtype": None}, defaults=d)
    assert new.config()["identity"]["backend"] == "llamacpp"


def test_shards_and_tables_round_trip(tmp_path: Path) -> None:
    s = RunStore(tmp_path)
    assert s.read_pass("extra", "t") is None and not s.has("extra", "t", 0)
    s.write_shard("extra", "t", 1, pa.table({"id": ["c"], "x": [3.0]}))
    s.write_shard("extra", "t", 0, pa.table({"id": ["a", "b"], "x": [1.0, 2.0]}))
    t = s.read_pass("extra", "t")
    assert t is not None and t.column("id").to_pylist() == ["a", "b", "c"]  # shard order
    assert s.shard_count("extra", "t") == 2
    with pytest.raises(RunStoreError, match="cannot be used"):
        s.write_shard("extra", "../escape", 0, pa.table({"id": ["a"]}))
    with pytest.raises(RunStoreError, match="unknown run table"):
        s.write_table("secrets", pa.table({"id": ["a"]}))
    s.add_time("generate/t", 1.5)
    s.add_time("generate/t", 2.0)
    assert s.timings() == {"generate/t": 3.5}
    s.add_time("generate/t", 1.0, cpu_seconds=0.75)  # a worker's process CPU time beside the wall seconds
    assert s.timings() == {"generate/t": 4.5, "cpu/generate/t": 0.75}
    assert not list(tmp_path.rglob("*.tmp"))


def test_a_worker_waits_for_the_shard_another_worker_holds(tmp_path: Path, tiny_model) -> None:  # type: ignore[no-untyped-def]
    run = tmp_path / "run"
    cfg = EvalConfig(tasks=["triviaqa"], estimators=["trace"], limit=8, shard_size=4, n_seeds=2, max_new_tokens=4)
    other = RunStore(run).claim("traces", "triviaqa", 1)  # "another worker" holds shard 1
    assert other is not None
    seen: list[str] = []

    def progress(desc: str, done: int, total: int) -> None:
        seen.append(desc)
        if desc.startswith("waiting") and other is not None:
            other.release()  # the other worker dies: its shard becomes free

    res = evaluate(run, cfg, progress=progress, poll_s=0.0, model=tiny_model)
    assert any(d.startswith("waiting for other workers to finish 1 shard") for d in seen)
    assert res is not None and res.tasks["triviaqa"]["n"] == 8


def test_two_workers_share_one_run_directory(tmp_path: Path, tiny_model) -> None:  # type: ignore[no-untyped-def]
    run = tmp_path / "run"

    def cfg() -> EvalConfig:
        return EvalConfig(tasks=["triviaqa"], estimators=["trace"], limit=16, shard_size=4, n_seeds=2, max_new_tokens=4)

    done: dict[str, int] = {}

    def worker(name: str) -> None:
        counted = Counting(tiny_model)
        evaluate(run, cfg(), poll_s=0.0, stages_only=True, model=counted)
        done[name] = counted.generated

    threads = [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(done.values()) == 16  # every question generated exactly once between the two workers
    assert [len(RunStore(run).read_traces_shard("triviaqa", k)) for k in range(4)] == [4, 4, 4, 4]


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("own_config", [True, False])
def test_a_folder_of_other_files_is_never_written_into(tmp_path: Path, own_config: bool) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("my notes")
    if own_config:
        (mine / "config.json").write_text(json.dumps({"name": "my project", "tasks": "not a list"}))
    before = _snapshot(mine)
    s = RunStore(mine)
    with pytest.raises(RunStoreError, match="not a tracecal run") as e:
        s.open({"tasks": ["a"]}, {"model": "m"})
    assert "--run-dir" in str(e.value)
    with pytest.raises(RunStoreError, match="not a tracecal run"):
        s.check({"model": "m"})
    if own_config:
        with pytest.raises(NotARunError, match="not a tracecal run"):
            s.config()
    assert _snapshot(mine) == before and not (mine / ".locks").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    RunStore(empty).open({"tasks": ["a"]}, {"model": "m"})  # an empty folder is fine
    assert RunStore(empty).exists()


def test_shards_without_their_config_json_are_refused(tmp_path: Path) -> None:
    s = RunStore(tmp_path / "r")
    s.open({"tasks": ["t"]}, {"model": "m", "max_new_tokens": 6})
    s.write_shard("traces", "t", 0, pa.table({"id": ["a"]}))
    (s.path / "config.json").unlink()
    with pytest.raises(RunStoreError, match="holds shards but no config.json.*restore its config.json"):
        s.open({"tasks": ["t"]}, {"model": "m", "max_new_tokens": 3})
    assert not (s.path / "config.json").exists()  # no config claiming other settings


def test_shards_carry_question_digests(tmp_path: Path) -> None:
    s = RunStore(tmp_path)
    s.write_shard("extra", "t", 0, pa.table({"id": ["a", "b"], "x": [1.0, 2.0]}), {"a": "d1", "b": "d2"})
    s.write_shard("extra", "t", 2, pa.table({"id": ["c"], "x": [3.0]}))
    assert s.shard_indices("extra", "t") == [0, 2] and s.shard_count("extra", "t") == 2
    assert s.shard_stamp("extra", "t", 0) == (["a", "b"], {"a": "d1", "b": "d2"})
    assert s.shard_stamp("extra", "t", 2) == (["c"], None)  # written without digests (an older run)
    (tmp_path / "extra" / "t" / "00002.parquet").write_bytes(b"not parquet")
    with pytest.raises(RunStoreError, match="not a readable shard.*delete it"):
        s.shard_stamp("extra", "t", 2)


def test_json_files_are_standard_json_and_read_back_with_nan(tmp_path: Path) -> None:
    s = RunStore(tmp_path)
    metrics = {"t": {"e": {"auroc": {"mean": float("nan"), "sd": float("inf"), "n_seeds": 2}}}}
    s.write_results({"config": {"model": None}, "tasks": {}, "metrics": metrics}, "", "")
    s.write_artefact("selective", {"threshold": float("inf")})
    for name in ("results.json", "selective.json"):
        text = (tmp_path / name).read_text()
        assert "NaN" not in text and "Infinity" not in text
        json.loads(text, parse_constant=lambda c, name=name: pytest.fail(f"{name} holds {c}"))
    back = s.read_results()
    assert back["metrics"]["t"]["e"]["auroc"]["mean"] != back["metrics"]["t"]["e"]["auroc"]["mean"]  # NaN
    assert back["config"]["model"] is None and s.read_artefact("selective") == {"threshold": None}


def test_write_errors_are_messages_and_leave_files_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    import tracecal.evaluation.runstore as runstore

    s = RunStore(tmp_path / "r")
    s.open({"tasks": ["t"]}, {"model": "m"})
    before = (s.path / "config.json").read_bytes()

    def full(path: Path, write: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(runstore, "atomic_write", full)
    with pytest.raises(RunStoreError, match="cannot write .*00000.parquet: No space left on device; free some space"):
        s.write_shard("traces", "t", 0, pa.table({"id": ["a"]}))
    with pytest.raises(RunStoreError, match="free some space"):
        s.open({"tasks": ["t", "u"]}, {"model": "m"})
    assert (s.path / "config.json").read_bytes() == before and not s.has("traces", "t", 0)
    monkeypatch.undo()
    real_open = os.open

    def read_only(path: object, flags: int, *a: object) -> int:
        if str(path).startswith(str(s.path)) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_open(path, flags, *a)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", read_only)
    with pytest.raises(RunStoreError, match="Read-only file system; the folder is read-only or immutable"):
        s.add_time("score", 1.0)
    with pytest.raises(RunStoreError, match="read-only or immutable"):
        s.claim("traces", "t", 0)
