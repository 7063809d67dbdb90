"""Scheduling: the units of the needed passes (dependencies and cheap passes first), their weights, what a unit
computes, and that a run with everything on disk loads nothing."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tracecal.evaluation.config import EvalConfig
from tracecal.evaluation.runstore import RunStore
from tracecal.evaluation.scheduler import LocalExecutor, Resources, Scheduler, Unit
from tracecal.passes import PASSES
from tracecal.testing import write_synthetic_run


def _tasks(n: int) -> list[tuple[Any, list[Any]]]:
    exs = [SimpleNamespace(id=f"triviaqa-{i}") for i in range(n)]
    return [(SimpleNamespace(name="triviaqa"), exs)]


def test_units_cover_every_shard_of_every_needed_pass_in_order(tmp_path: Path) -> None:
    cfg = EvalConfig(["triviaqa"], estimators=["trace", "p_true"], shard_size=4)
    sched = Scheduler(RunStore(tmp_path / "run"), cfg, Resources(cfg), lambda *_: None)
    assert [p.name for p in sched.passes] == ["traces", "extra"]  # extra reads the traces: it comes after them
    units = sched.units(_tasks(10))
    assert [(u.pass_name, u.k, u.a, u.b) for u in units] == [
        ("traces", 0, 0, 4),
        ("traces", 1, 4, 8),
        ("traces", 2, 8, 10),
        ("extra", 0, 0, 4),
        ("extra", 1, 4, 8),
        ("extra", 2, 8, 10),
    ]
    assert units[2].weight == 2 * PASSES["traces"].cost_weight


def test_a_complete_run_loads_no_resource_and_computes_nothing(tmp_path: Path) -> None:
    run = write_synthetic_run(tmp_path / "run", tasks=("triviaqa",), n_per_task=10, shard_size=4)
    cfg = EvalConfig(["triviaqa"], estimators=["trace"], shard_size=4)

    class NoLoads(Resources):
        def get(self, kind: str | None) -> Any:
            raise AssertionError(f"loaded {kind}")

    seen: list[tuple[str, int, int]] = []
    sched = Scheduler(RunStore(run), cfg, NoLoads(cfg), lambda *a: seen.append(a))
    tasks = [(SimpleNamespace(name="triviaqa"), [SimpleNamespace(id=f"triviaqa-{i}") for i in range(10)])]
    LocalExecutor().prepare(sched, tasks)
    LocalExecutor().run(sched, tasks, poll_s=0.0)
    assert seen and seen[-1][0] == "run" and seen[-1][1] == seen[-1][2]


def test_unit_weight_is_answers_times_cost() -> None:
    u = Unit("extra", SimpleNamespace(name="t"), 0, 0, 8)
    assert u.weight == 8 * PASSES["extra"].cost_weight


def test_units_carry_the_digests_of_their_questions_and_a_change_is_refused(tmp_path: Path) -> None:
    import pyarrow as pa
    import pytest

    from tracecal.evaluation.runstore import DataChangedError
    from tracecal.evaluation.scheduler import check_stored, question_digest

    q = lambda i, text="Q": SimpleNamespace(id=f"t-{i}", question=f"{text}{i}", context="", choices=[])  # noqa: E731
    tasks = [(SimpleNamespace(name="t"), [q(i) for i in range(6)])]
    cfg = EvalConfig(["triviaqa"], estimators=["trace"], shard_size=4)
    store = RunStore(tmp_path / "run")
    sched = Scheduler(store, cfg, Resources(cfg), lambda *_: None)
    u = sched.units(tasks)[1]
    assert u.digests == {f"t-{i}": question_digest(q(i)) for i in (4, 5)}
    assert question_digest(q(4)) != question_digest(q(4, "other "))
    assert question_digest(SimpleNamespace(id="x", question="Q", golds=["a"])) == question_digest(
        SimpleNamespace(id="x", question="Q", golds=["b"])
    )  # golds are not in it: a corrected gold is relabelled
    sched.save(u, pa.table({"id": ["t-4", "t-5"]}), 0.0)
    check_stored(store, tasks, ["traces"], 4)  # unchanged: fine
    tasks[0][1][5] = q(5, "edited ")
    with pytest.raises(DataChangedError, match="t: 1 question.* of shard 1 of the traces pass changed.*'t-5'"):
        check_stored(store, tasks, ["traces"], 4)


def test_the_backend_decides_the_model_options_and_the_passes_it_cannot_compute(tmp_path: Path) -> None:
    from tracecal.evaluation.scheduler import model_options, unsupported_passes

    every = ["trace", "p_true", "beam_ratio", "tokensar"]
    hf = EvalConfig(["triviaqa"], estimators=every, dtype="bfloat16", batch_size=3)
    assert model_options(hf) == {"backend": "auto", "batch_size": 3, "dtype": "bfloat16"}
    assert unsupported_passes(hf) == {}
    lc = EvalConfig(["triviaqa"], estimators=every, backend="llamacpp", batch_size=3)
    # no dtype (the GGUF's); the threads the process set (--threads or the rule: tracecal.backends.runtime)
    assert model_options(lc) == {"backend": "llamacpp", "batch_size": 3, "threads": "auto"}
    assert unsupported_passes(lc) == {
        "beam": "llama.cpp has no beam search (llama-cpp-python decodes one sequence): use --backend hf"
    }  # P(True), TokenSAR run
    sched = Scheduler(RunStore(tmp_path / "run"), lc, Resources(lc), lambda *_: None)
    assert [p.name for p in sched.passes] == ["traces", "extra", "semantic"] and set(sched.skipped) == {"beam"}
    url = EvalConfig(["triviaqa"], estimators=every, model="http://127.0.0.1:9/v1")
    assert unsupported_passes(url) == {  # a server: neither beams nor given tokens' log-probs
        "beam": "an OpenAI-compatible server returns no beam scores: use --backend hf",
        "extra": "a server returns no next-token log-probs of given tokens (use --backend hf or llamacpp)",
    }


def test_resources_load_the_backend_the_settings_name() -> None:
    from tracecal.backends.llamacpp import LlamaCppModel

    cfg = EvalConfig(["triviaqa"], backend="llamacpp", batch_size=2, chat=False)
    lm = Resources(cfg).get("lm")
    assert isinstance(lm, LlamaCppModel) and lm.model_id == "smollm2-135m-instruct"
    assert lm.batch_size == 2 and lm.chat is False  # --chat is applied as for the HF backend


def test_resources_load_the_embedder_in_the_runs_dtype(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import tracecal.backends.runtime as runtime
    import tracecal.passes.semantic as semantic

    loaded: list[str] = []
    monkeypatch.setattr(semantic, "load_embedder", lambda dtype="float32": loaded.append(dtype) or dtype)
    monkeypatch.setattr(runtime, "cpu_has_bf16", lambda: False)
    for given, want in (("float32", "float32"), ("bfloat16", "bfloat16"), ("auto", "float32")):
        res = Resources(EvalConfig(["triviaqa"], embedder_dtype=given))
        assert res.get("embedder") == want and res.get("embedder") == want  # loaded once
    assert loaded == ["float32", "bfloat16", "float32"]
