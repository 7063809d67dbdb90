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
