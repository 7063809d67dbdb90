"""Scoring a stored run block by block (`tracecal.evaluation.blockscore`): the same results as `score_tasks` on every
column of every pass in memory (`load_task_stats`), bit for bit, and only the columns each block needs read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tracecal.estimators import REGISTRY
from tracecal.evaluation import blockscore
from tracecal.evaluation.blockscore import Job, block_inputs, read_columns, score_stored, score_stored_block
from tracecal.evaluation.protocol import ScoreConfig, score_tasks, split_set, task_counts
from tracecal.evaluation.run import load_task_stats
from tracecal.evaluation.runstore import RunStore, RunStoreError
from tracecal.evaluation.stored_tasks import StoredLabels
from tracecal.testing import SYNTHETIC_ESTIMATORS, add_synthetic_passes, write_synthetic_run

TASKS = ("qa1", "qa2")


def stored_tasks(store: RunStore) -> list[tuple[Any, list[Any]]]:
    """(task, examples) with the run's stored labels: examples in an order of their own (the run's is by id)."""
    from types import SimpleNamespace

    rows = store.read_table("rows", ["task", "id", "question", "golds", "correct"]).to_pydict()
    out = []
    for name in TASKS:
        exs = [
            SimpleNamespace(id=i, question=q, golds=json.loads(g), correct=c)
            for t, i, q, g, c in zip(*(rows[k] for k in ("task", "id", "question", "golds", "correct")), strict=True)
            if t == name
        ]
        out.append((StoredLabels(name, f"stored labels of {name}"), exs[::-1]))
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two tasks of 150 answers in shards of 32 (the last one short), every pass the 24 estimators read."""
    path = write_synthetic_run(tmp_path_factory.mktemp("blocks") / "run", TASKS, n_per_task=150, shard_size=32)
    add_synthetic_passes(RunStore(path), TASKS, shard_size=32)
    return path


def assert_same_table(a: pa.Table, b: pa.Table) -> None:
    """The same schema and values, floats bit for bit (NaN included, which `Table.equals` calls unequal)."""
    assert a.schema == b.schema
    for name in a.column_names:
        x, y = a.column(name).combine_chunks(), b.column(name).combine_chunks()
        if pa.types.is_floating(x.type):
            bits = [z.to_numpy(zero_copy_only=False).view(np.uint64) for z in (x, y)]
            assert x.is_null().equals(y.is_null()) and np.array_equal(*bits), name
        else:
            assert x.equals(y), name


def assert_same_results(a: Any, b: Any) -> None:
    """The same JSON (text), per-answer tables and bootstrap draws."""
    assert json.dumps(a.to_json()) == json.dumps(b.to_json())
    assert a.answers.keys() == b.answers.keys()
    for k in a.answers:
        assert_same_table(a.answers[k], b.answers[k])
    assert a.draws.keys() == b.draws.keys()
    for t in a.draws:
        assert a.draws[t].keys() == b.draws[t].keys()
        for e in a.draws[t]:
            assert a.draws[t][e].keys() == b.draws[t][e].keys()
            for m in a.draws[t][e]:
                np.testing.assert_array_equal(a.draws[t][e][m], b.draws[t][e][m])


@pytest.mark.parametrize("n_boot", [0, 50])
def test_block_scoring_equals_scoring_everything_in_memory(run: Path, n_boot: int) -> None:
    store = RunStore(run)
    cfg = ScoreConfig(list(SYNTHETIC_ESTIMATORS), n_seeds=4, n_boot=n_boot)
    tasks = stored_tasks(store)
    passes = ["traces", "extra", "semantic", "beam"]
    before = score_tasks([load_task_stats(store, t, exs, passes) for t, exs in tasks], cfg)
    after = score_stored(store, tasks, cfg)
    assert_same_results(before, after)
    assert after.metrics["qa1"]["trace_plus"]["auroc"]["n_seeds"] == 4 and after.tasks["qa2"]["n"] == 150
    if n_boot:
        assert after.statistics["comparisons"]["qa1"] and len(after.draws["qa1"]["mars"]["auroc"]) == n_boot


def test_an_incomplete_pass_leaves_its_estimators_not_run_as_before(run: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    (copy / "beam" / "qa2" / "00001.parquet").unlink()
    store = RunStore(copy)
    cfg = ScoreConfig(["trace", "beam_ratio", "p_true"], n_seeds=3, n_boot=0)
    tasks = stored_tasks(store)
    with pytest.raises(RuntimeError, match="qa2: the beam pass is incomplete"):
        score_stored(store, tasks, cfg)
    data = [load_task_stats(store, t, exs, ["traces", "extra", "beam"], allow_missing=True) for t, exs in tasks]
    with pytest.warns(UserWarning, match="qa2: beam pass incomplete; not scored there: beam_ratio"):
        after = score_stored(store, tasks, cfg, allow_missing=True)
    assert_same_results(score_tasks(data, cfg), after)
    assert after.tasks["qa2"]["not_run"] == ["beam_ratio"] and after.tasks["qa1"]["not_run"] == []


def test_a_block_reads_only_its_columns(run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = RunStore(run)
    reads: list[tuple[str, tuple[str, ...]]] = []
    real = blockscore.read_columns

    def spy(store: RunStore, pass_name: str, task: str, columns: Any) -> Any:
        reads.append((pass_name, tuple(columns)))
        return real(store, pass_name, task, columns)

    monkeypatch.setattr(blockscore, "read_columns", spy)
    cfg = ScoreConfig(["mars"], n_seeds=2, n_boot=0)
    y = score_stored(store, stored_tasks(store)[:1], cfg).answers["rows"].column("correct").to_numpy()
    assert reads[-2:] == [("traces", ("surprisal", "entropy")), ("semantic", ("mars_u",))]  # the block
    assert ("traces", ("id", "text", "stop_reason", "entropy_kind", "surprisal")) in reads  # the frame
    assert ("semantic", ("id",)) in reads and not any("prompt" in c or "token_strings" in c for _, c in reads)
    reads.clear()
    job = Job("qa1", "p_true", y)
    one = score_stored_block(store, job, None, ScoreConfig(["p_true"], n_seeds=2, n_boot=0))
    assert reads == [("traces", ("surprisal", "entropy")), ("extra", ("p_true",))]
    assert one.name == "p_true" and one.raw is not None and len(one.raw) == 150


def test_block_inputs_are_the_traces_values_and_the_stats(run: Path) -> None:
    store = RunStore(run)
    inputs = block_inputs(store, "qa1", REGISTRY["tokensar"].stats | {"beam"})
    traces = store.read_traces("qa1")
    assert np.array_equal(inputs.batch.lengths, [len(t.surprisal) for t in traces])
    assert np.array_equal(inputs.batch.entropy, np.concatenate([t.entropy for t in traces]))
    assert set(inputs.stats) == {"tokensar_rel", "beam"} and inputs.stats["beam"].shape == (150, 5)
    assert len(inputs.stats["tokensar_rel"]) == len(inputs.batch.surprisal) and inputs.traces is None


def test_shards_are_read_in_order_whatever_their_schemas(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "r")
    store.write_shard("extra", "t", 0, pa.table({"id": ["a", "b"], "p_true": [0.1, 0.2]}))
    store.write_shard("extra", "t", 1, pa.table({"id": ["c"], "p_true": [0.3], "later": [1.0]}))
    store.write_shard("extra", "t", 10, pa.table({"id": ["d"], "p_true": [0.4]}))
    got = read_columns(store, "extra", "t", ["id", "p_true"])
    assert got is not None and got.column("id").to_pylist() == ["a", "b", "c", "d"]
    assert read_columns(store, "extra", "other", ["id"]) is None
    pq.write_table(pa.table({"x": [1]}), store.shard_files("extra", "t")[1])  # a column a shard lacks: null
    assert read_columns(store, "extra", "t", ["id"]).column("id").to_pylist() == ["a", "b", None, "d"]  # type: ignore[union-attr]
    store.shard_files("extra", "t")[1].write_bytes(b"not parquet")
    with pytest.raises(RunStoreError, match="the extra shards of .* cannot be read"):
        read_columns(store, "extra", "t", ["id", "p_true"])


def test_a_changed_or_short_run_is_refused_as_by_load_task_stats(run: Path) -> None:
    store = RunStore(run)
    task, exs = stored_tasks(store)[0]
    cfg = ScoreConfig(["trace"], n_seeds=2, n_boot=0)
    with pytest.raises(RuntimeError, match="qa1: the run holds 150 answers for the 149 questions asked"):
        score_stored(store, [(task, exs[1:])], cfg)
    exs[0].id = "elsewhere"
    with pytest.raises(RunStoreError, match="answers to 1 question"):
        score_stored(store, [(task, exs)], cfg)


def test_the_splits_and_resamples_are_those_of_the_task(run: Path) -> None:
    y = np.array([0, 1] * 40)
    cfg = ScoreConfig(["trace"], n_seeds=3, n_boot=20)
    sp = split_set(y, cfg)
    assert sp.cal.shape == (3, 28) and sp.n == 80
    counts = task_counts(y, "qa1", cfg)
    assert counts is not None and counts.shape == (20, 80) and task_counts(y, "qa2", cfg).tolist() != counts.tolist()
    assert task_counts(y, "qa1", ScoreConfig(["trace"], n_boot=0)) is None
