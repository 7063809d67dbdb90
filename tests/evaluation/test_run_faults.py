"""An evaluation under faults (issue 22): a folder that is not a run, a run that lost its config.json, data edited
between runs, a shard of another task, a full disk or a read-only folder, and too few questions to split. Each is
refused with a message before anything is lost or mixed, and the run resumes exactly once the cause is gone."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.evaluation.test_run import FAST, Counting
from tracecal.evaluation.config import ConfigError, EvalConfig
from tracecal.evaluation.run import evaluate, load_task_stats
from tracecal.evaluation.runstore import DataChangedError, RunStore, RunStoreError

Files = dict[str, bytes]


def snapshot(folder: Path) -> Files:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def user_task(path: Path, n: int = 6, edit: Callable[[int, dict[str, Any]], None] | None = None) -> str:
    rows = [{"id": f"q{i}", "question": f"Capital number {i}?", "answer": ["Paris"]} for i in range(n)]
    for i, r in enumerate(rows):
        if edit is not None:
            edit(i, r)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def cfg(tasks: list[str], **kw: Any) -> EvalConfig:
    return EvalConfig(tasks=tasks, **(FAST | {"estimators": ["trace"]} | kw))


@pytest.mark.parametrize("with_config", [True, False])
def test_a_folder_that_is_not_a_run_is_refused_and_left_as_is(tmp_path: Path, tiny_model, with_config: bool) -> None:  # type: ignore[no-untyped-def]
    mine = tmp_path / "notarun"
    (mine / "data").mkdir(parents=True)
    (mine / "data" / "table.csv").write_text("a,b\n1,2\n")
    if with_config:
        (mine / "config.json").write_text(json.dumps({"config": {"lr": 0.1}}))  # the user's own config.json
    before, lm = snapshot(mine), Counting(tiny_model)
    with pytest.raises(RunStoreError, match="not a tracecal run.*choose .*--run-dir"):
        evaluate(mine, cfg(["triviaqa"]), model=lm)
    assert snapshot(mine) == before and not (mine / ".locks").exists() and lm.generated == 0


def test_a_run_that_lost_its_config_json_is_not_resumed_with_other_settings(tmp_path: Path, tiny_model) -> None:  # type: ignore[no-untyped-def]
    run = tmp_path / "run"
    evaluate(run, cfg(["triviaqa"], max_new_tokens=6), model=tiny_model, stages_only=True)
    (run / "config.json").unlink()
    lm = Counting(tiny_model)
    with pytest.raises(RunStoreError, match="holds shards but no config.json.*restore its config.json.*new --run-dir"):
        evaluate(run, cfg(["triviaqa"], max_new_tokens=3), model=lm)
    assert not (run / "config.json").exists() and lm.generated == 0


def test_a_changed_question_is_noticed_and_a_changed_gold_relabelled(tmp_path: Path, tiny_model) -> None:  # type: ignore[no-untyped-def]
    data, run = tmp_path / "qa.jsonl", tmp_path / "run"
    tasks = [user_task(data)]
    evaluate(run, cfg(tasks), model=tiny_model)
    before = snapshot(run)

    def new_question(i: int, r: dict[str, Any]) -> None:
        if i == 5:
            r["question"] = "A different question?"

    user_task(data, edit=new_question)
    lm = Counting(tiny_model)
    for score_only in (False, True):
        with pytest.raises(DataChangedError, match="file-qa: 1 question.* changed since.*'q5'.*new --run-dir"):
            evaluate(run, cfg(tasks), model=lm, score_only=score_only)
    assert lm.generated == 0 and snapshot(run) == before  # nothing rewritten, nothing scored

    def new_gold(i: int, r: dict[str, Any]) -> None:
        r["answer"] = [f"gold {i}"]

    user_task(data, edit=new_gold)  # the questions are back; only the golds changed: relabelled, not regenerated
    res = evaluate(run, cfg(tasks), model=lm)
    assert lm.generated == 0 and res is not None
    rows = RunStore(run).read_table("rows", ["id", "golds"])
    assert rows is not None and rows.column("golds").to_pylist() == [json.dumps([f"gold {i}"]) for i in range(6)]


def test_reordered_rows_are_noticed(tmp_path: Path, tiny_model) -> None:  # type: ignore[no-untyped-def]
    data, run = tmp_path / "qa.jsonl", tmp_path / "run"
    evaluate(run, cfg([user_task(data)]), model=tiny_model, stages_only=True)
    lines = data.read_text().splitlines(keepends=True)
    data.write_text("".join(lines[::-1]))  # same questions, other places: shard k would hold other answers
    with pytest.raises(DataChangedError, match="answers other questions than the data holds at its place"):
        evaluate(run, cfg([str(data)]), model=Counting(tiny_model, fail_after=0))


def test_a_shard_of_another_task_is_a_message_not_a_key_error(tmp_path: Path, tiny_model) -> None:  # type: ignore[no-untyped-def]
    run = tmp_path / "run"
    tasks = [user_task(tmp_path / "a.jsonl"), user_task(tmp_path / "b.jsonl", edit=lambda i, r: r.update(id=f"b{i}"))]
    evaluate(run, cfg(tasks), model=tiny_model)
    shutil.copy(run / "traces" / "file-b" / "00000.parquet", run / "traces" / "file-a" / "00000.parquet")
    for score_only in (False, True):
        with pytest.raises(DataChangedError, match="file-a: shard 0 of the traces pass holds answers to 4 question"):
            evaluate(run, cfg(tasks), model=Counting(tiny_model, fail_after=0), score_only=score_only)
    from tracecal.tasks import get_task

    task = get_task(tasks[0])
    with pytest.raises(DataChangedError, match="question.*the task does not have.*'b0'"):  # the reader's own check
        load_task_stats(RunStore(run), task, task.load(), ["traces"])


def test_a_shard_of_another_model_on_the_same_questions_is_noticed(tmp_path: Path, tiny_model) -> None:  # type: ignore[no-untyped-def]
    """The question digests match (same data), so only the shard's own stamp of the run that made it (model, dtype,
    budgets) tells it from this run's: refused before anything is computed or scored, naming the file."""
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    evaluate(mine, cfg(["triviaqa"], limit=8), model=tiny_model)
    evaluate(theirs, cfg(["triviaqa"], limit=8, model="another-model"), model=tiny_model, stages_only=True)
    shard = mine / "traces" / "triviaqa" / "00001.parquet"
    shutil.copy(theirs / "traces" / "triviaqa" / "00001.parquet", shard)
    before, lm = snapshot(mine), Counting(tiny_model)
    for score_only in (False, True):
        with pytest.raises(DataChangedError, match=r"shard 1 of the traces pass \(.*00001.parquet\) was made by an"):
            evaluate(mine, cfg(["triviaqa"], limit=8), model=lm, score_only=score_only)
    with pytest.raises(DataChangedError, match="model='another-model'; this run's is .*Delete it"):
        evaluate(mine, cfg(["triviaqa"], limit=8), model=lm)
    assert snapshot(mine) == before and lm.generated == 0
    shard.unlink()  # as the message says: the same command computes it anew
    res = evaluate(mine, cfg(["triviaqa"], limit=8), model=lm)
    assert res is not None and lm.generated == 4


def _traces(run: Path) -> list[Any]:
    return [pq.read_table(f).drop_columns(["meta"]).to_pylist() for f in sorted((run / "traces").rglob("*.parquet"))]


def test_a_full_disk_loses_nothing_and_the_resumed_run_is_exact(tmp_path: Path, tiny_model, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import tracecal.evaluation.runstore as runstore

    clean, run = tmp_path / "clean", tmp_path / "run"
    evaluate(clean, cfg(["triviaqa"], limit=8), model=tiny_model)
    real = runstore.atomic_write

    def fills_up(path: Path, write: Any) -> None:
        if path.name == "00001.parquet":
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real(path, write)

    monkeypatch.setattr(runstore, "atomic_write", fills_up)
    with pytest.raises(RunStoreError, match="No space left on device; free some space and run the same command"):
        evaluate(run, cfg(["triviaqa"], limit=8), model=tiny_model)
    assert RunStore(run).shard_indices("traces", "triviaqa") == [0] and not list(run.rglob("*.tmp"))
    monkeypatch.setattr(runstore, "atomic_write", real)
    resumed = Counting(tiny_model)
    evaluate(run, cfg(["triviaqa"], limit=8), model=resumed)
    assert resumed.generated == 4 and _traces(run) == _traces(clean)
    metrics = [json.loads((r / "results.json").read_text())["metrics"] for r in (run, clean)]
    assert metrics[0] == metrics[1]


@contextmanager
def read_only(monkeypatch: pytest.MonkeyPatch, folder: Path) -> Iterator[None]:
    """``folder`` refuses every write as a read-only file system would (works as root, where chmod does not)."""
    real_open, real_mkdir = os.open, os.mkdir

    def inside(path: Any) -> bool:
        return os.path.abspath(path).startswith(str(folder))

    def fake_open(path: Any, flags: int, *a: Any, **k: Any) -> int:
        if inside(path) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_open(path, flags, *a, **k)

    def fake_mkdir(path: Any, *a: Any, **k: Any) -> None:
        if inside(path):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        real_mkdir(path, *a, **k)

    with monkeypatch.context() as m:
        m.setattr(os, "open", fake_open)
        m.setattr(os, "mkdir", fake_mkdir)
        yield


@pytest.mark.parametrize("where", ["new", "finished", "shard folder"])
def test_a_read_only_run_dir_is_a_message_and_resumes(tmp_path: Path, tiny_model, monkeypatch, where: str) -> None:  # type: ignore[no-untyped-def]
    run = tmp_path / "parent" / "run"
    (tmp_path / "parent").mkdir()
    if where != "new":
        evaluate(run, cfg(["triviaqa"], limit=8), model=tiny_model)
    if where == "shard folder":
        (run / "traces" / "triviaqa" / "00001.parquet").unlink()
    folder = {"new": tmp_path / "parent", "finished": run, "shard folder": run / "traces" / "triviaqa"}[where]
    before = snapshot(tmp_path)
    with read_only(monkeypatch, folder), pytest.raises(RunStoreError, match="Read-only file system; the folder is"):
        evaluate(run, cfg(["triviaqa"], limit=8, n_seeds=2), model=tiny_model)
    after = snapshot(tmp_path)
    if where == "shard folder":  # the run's config.json (writable) was opened again: same settings, new time
        key = "parent/run/config.json"
        assert json.loads(after.pop(key))["identity"] == json.loads(before.pop(key))["identity"]
    assert after == before  # nothing half-written, nothing lost
    res = evaluate(run, cfg(["triviaqa"], limit=8, n_seeds=2), model=tiny_model)  # writable again: resumes
    assert res is not None and res.tasks["triviaqa"]["n"] == 8


def test_an_immutable_finished_run_is_a_message(tmp_path: Path, tiny_model) -> None:  # type: ignore[no-untyped-def]
    run = tmp_path / "run"
    evaluate(run, cfg(["triviaqa"], limit=8), model=tiny_model)
    if shutil.which("chattr") is None or subprocess.run(["chattr", "-R", "+i", str(run)]).returncode != 0:
        pytest.skip("chattr +i is not available here (needs root and a file system with inode flags)")
    try:
        before = snapshot(run)
        with pytest.raises(RunStoreError, match="Operation not permitted; the folder is read-only or immutable"):
            evaluate(run, cfg(["triviaqa"], limit=8, n_seeds=2), model=tiny_model)
        assert snapshot(run) == before
    finally:
        subprocess.run(["chattr", "-R", "-i", str(run)], check=True)


@pytest.mark.parametrize(("kw", "n"), [({"limit": 1}, 1), ({"cal_frac": 0.01}, 12), ({"cal_frac": 0.99}, 12)])
def test_too_few_questions_to_split_are_refused_before_generating(tmp_path: Path, tiny_model, kw: dict, n: int) -> None:  # type: ignore[no-untyped-def]
    lm = Counting(tiny_model)
    with pytest.raises(ConfigError, match=f"triviaqa: {n} question.* too few to split with --cal-frac.*--limit"):
        evaluate(tmp_path / "run", cfg(["triviaqa"], **kw), model=lm)
    assert lm.generated == 0 and not (tmp_path / "run").exists()


def _restamp(shard: Path, **stamps: bytes | None) -> None:
    """Rewrite ``shard`` with its metadata keys ``stamps`` replaced (None: removed), as an older tracecal (or a
    damaged file) would have left them."""
    table = pq.read_table(shard)
    meta = dict(table.schema.metadata or {})
    for key, value in stamps.items():
        meta.pop(key.encode(), None)
        if value is not None:
            meta[key.encode()] = value
    pq.write_table(table.replace_schema_metadata(meta), shard)


def test_shards_of_an_older_tracecal_without_stamps_resume_by_their_ids(tmp_path: Path, tiny_model) -> None:  # type: ignore[no-untyped-def]
    """A shard written before question digests and run identities were stamped (both metadata keys removed) is
    accepted by its ids (the documented rule): the run resumes, computes only what is missing and scores, also with
    --score-only; a changed question in it goes unnoticed (nothing to compare), a foreign id does not."""
    run = tmp_path / "run"
    evaluate(run, cfg(["triviaqa"], limit=8), model=tiny_model, stages_only=True)
    old = run / "traces" / "triviaqa" / "00000.parquet"
    _restamp(old, tracecal_question_digests=None, tracecal_run_identity=None)
    (run / "traces" / "triviaqa" / "00001.parquet").unlink()  # an interrupted older run: one shard still missing
    before, lm = old.read_bytes(), Counting(tiny_model)
    res = evaluate(run, cfg(["triviaqa"], limit=8), model=lm)
    assert res is not None and lm.generated == 4 and old.read_bytes() == before  # only the missing shard computed
    assert evaluate(run, cfg(["triviaqa"], limit=8), model=lm, score_only=True) is not None and lm.generated == 4


@pytest.mark.parametrize(
    "stamps",
    [
        {"tracecal_question_digests": b"not json"},
        {"tracecal_question_digests": b'["a", "list"]'},
        {"tracecal_question_digests": b'{"x": 5}'},
        {"tracecal_run_identity": b"\xff\xfe not json"},
        {"tracecal_run_identity": b"[1, 2]"},
    ],
)
def test_a_damaged_stamp_is_a_message_saying_what_to_do(tmp_path: Path, tiny_model, stamps: dict[str, bytes]) -> None:  # type: ignore[no-untyped-def]
    """A stamp that is not a JSON object (or digests that are not one string per answer) is a `RunStoreError` naming
    the shard and what to do, never a traceback, for a resumed run and for --score-only."""
    run = tmp_path / "run"
    evaluate(run, cfg(["triviaqa"], limit=8), model=tiny_model, stages_only=True)
    shard = run / "traces" / "triviaqa" / "00001.parquet"
    _restamp(shard, **stamps)
    for score_only in (False, True):
        with pytest.raises(
            RunStoreError,
            match=r"00001.parquet (carries a damaged [a-z-]+ stamp|is not a readable sh).*"
            "delete it and run again to compute it anew",
        ):
            evaluate(run, cfg(["triviaqa"], limit=8), model=Counting(tiny_model, fail_after=0), score_only=score_only)
