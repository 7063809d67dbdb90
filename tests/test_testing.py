"""The synthetic run writer (`tracecal.testing`): the format of evaluate, the default estimators, determinism."""

from __future__ import annotations

from pathlib import Path

from tracecal.estimators import PAPER_BASELINES, REGISTRY
from tracecal.evaluation.runstore import RunStore
from tracecal.testing import SYNTHETIC_ESTIMATORS, write_synthetic_run


def test_the_default_estimators_are_the_papers_24() -> None:
    assert len(SYNTHETIC_ESTIMATORS) == 24 and set(SYNTHETIC_ESTIMATORS) <= set(REGISTRY)
    assert list(SYNTHETIC_ESTIMATORS[3:22]) == PAPER_BASELINES


def test_a_synthetic_run_is_scored_and_deterministic(tmp_path: Path) -> None:
    a = write_synthetic_run(tmp_path / "a", tasks=("svamp",), n_per_task=20, shard_size=8, seed=4)
    b = write_synthetic_run(tmp_path / "b", tasks=("svamp",), n_per_task=20, shard_size=8, seed=4)
    sa, sb = RunStore(a), RunStore(b)
    assert sa.read_table("scores").equals(sb.read_table("scores"))
    assert sa.read_results()["metrics"] == sb.read_results()["metrics"]
    assert [t.id for t in sa.read_traces("svamp")] == [f"svamp-{i}" for i in range(20)]
    assert sa.config()["config"]["limit"] == 20 and sa.config()["identity"]["shard_size"] == 8


def test_no_library_module_imports_it() -> None:
    src = Path(__file__).resolve().parents[1] / "src" / "tracecal"
    users = [
        p.relative_to(src)
        for p in src.rglob("*.py")
        if p.name != "testing.py"
        and ("from tracecal.testing" in p.read_text() or "import tracecal.testing" in p.read_text())
    ]
    assert users == []


def test_accuracy_sets_the_share_of_correct_answers_of_the_tasks_named(tmp_path: Path) -> None:
    run = write_synthetic_run(tmp_path / "r", tasks=("triviaqa", "mlqa"), n_per_task=400, accuracy={"mlqa": 0.02})
    info = RunStore(run).read_results()["tasks"]
    assert info["mlqa"]["n_correct"] < 20 and 80 <= info["triviaqa"]["n_correct"] <= 320
    plain = write_synthetic_run(tmp_path / "p", tasks=("triviaqa", "mlqa"), n_per_task=400)
    assert RunStore(plain).read_results()["tasks"]["triviaqa"] == info["triviaqa"]  # the others drawn as before
