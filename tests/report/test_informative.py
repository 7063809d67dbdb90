"""Which tasks can rank and calibrate (`tracecal.report.informative`): the run's own keys first, else the rule
min(correct, wrong) ≥ 50 on the task's counts; an older run's average recomputed over the ranked tasks."""

from __future__ import annotations

import math
from typing import Any

import pytest

from tracecal.report.informative import MIN_EACH, task_reason, uninformative, with_informative


@pytest.mark.parametrize(
    ("info", "reason"),
    [
        ({"n": 200, "n_correct": 100}, None),
        ({"n": 100, "n_correct": 50}, None),  # exactly 50 of each: enough
        ({"n": 100, "n_correct": 6}, "6 correct answers (< 50): too few to rank or calibrate"),
        ({"n": 100, "n_correct": 51}, "49 wrong answers (< 50): too few to rank or calibrate"),
        ({"n": 300, "n_correct_cal": 2, "n_correct_eval": 4}, "6 correct answers (< 50): too few to rank or calibrate"),
        ({"n": 300, "accuracy": 0.02}, "6 correct answers (< 50): too few to rank or calibrate"),
        ({"n": 300, "accuracy": 0.5}, None),
        ({}, None),  # counts unknown: no evidence against the task
        ({"n": 10, "n_correct": 1, "informative": True}, None),  # the run's own verdict wins
        ({"n": 999, "n_correct": 500, "informative": False, "informative_reason": "why"}, "why"),
    ],
)
def test_task_reason(info: dict[str, Any], reason: str | None) -> None:
    assert task_reason(info) == reason


def test_a_task_marked_uninformative_without_a_reason_still_gets_one() -> None:
    assert str(MIN_EACH) in (task_reason({"informative": False}) or "")


def _old_run() -> dict[str, Any]:
    """Results of a run written before evaluate marked tasks: mlqa has 3 correct answers of 200."""
    counts = {"triviaqa": 100, "svamp": 80, "mlqa": 3}
    auroc = {"triviaqa": 0.70, "svamp": 0.60, "mlqa": 0.99}
    metrics: dict[str, Any] = {
        t: {
            e: {"auroc": {"mean": a + d, "sd": 0.01}, "ece": {"mean": 0.1, "sd": 0.0}}
            for e, d in (("x", 0), ("y", 0.05))
        }
        for t, a in auroc.items()
    }
    metrics["average"] = {e: {"auroc": {"mean": 0.0, "sd": math.nan}} for e in ("x", "y")}  # over all three
    return {
        "tasks": {t: {"n": 200, "n_correct": c} for t, c in counts.items()},
        "metrics": metrics,
        "statistics": {"comparisons": {"triviaqa": {"baseline": "x"}, "average": {"baseline": "x"}}},
    }


def test_an_older_run_gets_marks_and_an_average_over_the_ranked_tasks() -> None:
    old = _old_run()
    tasks = ["triviaqa", "svamp", "mlqa"]
    res = with_informative(old, tasks)
    assert [res["tasks"][t]["informative"] for t in tasks] == [True, True, False]
    assert res["tasks"]["mlqa"]["informative_reason"].startswith("3 correct answers")
    assert uninformative(res, tasks) == {"mlqa": res["tasks"]["mlqa"]["informative_reason"]}
    assert res["metrics"]["average"]["x"]["auroc"]["mean"] == pytest.approx(0.65)
    assert res["metrics"]["average"]["y"]["auroc"]["mean"] == pytest.approx(0.70)
    assert math.isnan(res["metrics"]["average"]["y"]["auroc"]["sd"])
    assert list(res["statistics"]["comparisons"]) == ["triviaqa"]  # the all-task comparison is dropped
    assert old["metrics"]["average"]["x"]["auroc"]["mean"] == 0.0 and "informative" not in old["tasks"]["mlqa"]
    one = with_informative(old, ["triviaqa", "mlqa"])  # one ranked task: no average at all
    assert "average" not in one["metrics"]


def test_a_run_with_the_marks_keeps_its_own_average() -> None:
    new = _old_run()
    for t, ok in (("triviaqa", True), ("svamp", True), ("mlqa", False)):
        new["tasks"][t] |= {"informative": ok, "informative_reason": None if ok else "evaluate's reason"}
    res = with_informative(new, ["triviaqa", "svamp", "mlqa"])
    assert res["metrics"] is new["metrics"] and res["tasks"]["mlqa"]["informative_reason"] == "evaluate's reason"
    every = _old_run()
    every["tasks"]["mlqa"]["n_correct"] = 100  # all ranked: the average stays as written
    assert with_informative(every, ["triviaqa", "svamp", "mlqa"])["metrics"] is every["metrics"]
