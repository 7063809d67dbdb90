"""The verdict of a run: the recommendation and its interval, the tasks apart, selective answering and the labels
it needs, the commands to serve it (which then work)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from tracecal.report.data import load_run
from tracecal.report.verdict import SERVABLE, labels_needed, run_verdict, verdict_of
from tracecal.testing import scored_synthetic_run


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tasks = {"triviaqa": (400, 0.3), "svamp": (200, 0.03), "mlqa": (300, 0.5)}
    return scored_synthetic_run(tmp_path_factory.mktemp("v") / "run", tasks)


def test_the_verdict_recommends_a_servable_leader_or_one_level_with_it(run: Path) -> None:
    v = run_verdict(run)
    res = load_run(run).results
    avg = res["metrics"]["average"]
    best = max(v.table, key=lambda r: r["auroc"])
    assert v.leader == best["estimator"] == res["statistics"]["leader"]["estimator"]
    assert v.recommended in SERVABLE
    assert v.recommended == v.leader or v.recommended in v.level_with
    assert v.recommended in v.headline and f"{avg[v.recommended]['auroc']['mean']:.3f}" in v.headline
    assert v.ranked == ["triviaqa", "mlqa"] and set(v.not_ranked) == {"svamp"}
    assert any(line.startswith("Not ranked: svamp") for line in v.lines)
    assert any(line.startswith("Calibration: ECE") for line in v.lines)
    assert set(v.selective) == {"triviaqa", "mlqa"}  # thresholds only where the task ranks
    assert v.commands[0].startswith(f"tracecal fit-calibrator {run} --estimator {v.recommended}")
    assert v.commands[1].startswith("tracecal serve --model synthetic --dtype float32 --calibrator")


def test_a_baseline_leader_gives_way_to_a_servable_estimator_level_with_it(run: Path) -> None:
    data = load_run(run)
    lead = data.results["statistics"]["leader"]
    other = next(e for e in lead["estimators"] if e in SERVABLE)
    # rewrite the stored comparison: a baseline leads, the servable estimator is level with it
    data.results["statistics"]["leader"] = {
        "estimator": "neg_mean_entropy",
        "level": 0.95,
        "estimators": {other: {"auroc": {"diff": -0.001, "lo": -0.01, "hi": 0.01, "verdict": "n.s."}}},
    }
    v = verdict_of(data)
    assert v.leader == "neg_mean_entropy" and v.recommended == other
    assert "which the gateway cannot serve" in v.headline


def test_no_ranked_task_gives_no_verdict_and_says_why(tmp_path: Path) -> None:
    path = scored_synthetic_run(tmp_path / "r", {"svamp": (120, 0.02)})
    v = run_verdict(path)
    assert v.recommended is None and v.headline.startswith("No verdict")
    assert "svamp" in v.lines[0] and "fewer than 50" in v.lines[0]


def test_labels_needed_grows_as_the_signal_weakens_and_is_none_without_one() -> None:
    rng = np.random.default_rng(1)
    y = (rng.random(400) < 0.5).astype(np.int64)
    strong = labels_needed(y + rng.normal(0, 0.5, 400), y, 0.1, 0.1)
    weak = labels_needed(y + rng.normal(0, 1.0, 400), y, 0.1, 0.1)
    assert strong is not None and weak is not None and strong <= weak
    assert labels_needed(rng.random(400), y, 0.1, 0.1) is None


def test_labels_needed_is_consistent_with_what_the_run_certifies(run: Path) -> None:
    v = run_verdict(run)
    for s in v.selective.values():
        certified_at_alpha = math.isfinite(s["alpha_star"]) and s["alpha_star"] <= s["alpha"]
        assert (s["labels_needed"] is None) or not certified_at_alpha
        if s["labels_needed"]:
            assert s["labels_needed"] > s["n"]  # the run's own size did not certify it


def test_a_run_scored_before_verdicts_says_how_to_get_one(tmp_path: Path) -> None:
    from tracecal.testing import write_synthetic_run

    path = write_synthetic_run(tmp_path / "old", tasks=("triviaqa",), n_per_task=200, accuracy={"triviaqa": 0.5})
    v = run_verdict(path)
    assert v.recommended is None and "older tracecal" in v.headline and "--score-only" in v.lines[0]
