"""Which tasks rank estimators: the informative rule, the average and the marks over ranked tasks only, and the
leader with every estimator against it."""

from __future__ import annotations

import numpy as np
import pytest

from tracecal.estimators import Inputs
from tracecal.evaluation.protocol import ScoreConfig, TaskStats, score_tasks
from tracecal.evaluation.ranking import informative, leader_comparisons, ranked_tasks
from tracecal.evaluation.results import results_markdown, results_tables
from tracecal.traces.trace import TraceBatch


def _task(name: str, n: int, acc: float, seed: int) -> TaskStats:
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < acc).astype(np.int64)
    lengths = rng.integers(1, 8, n)
    H = [list(rng.gamma(2.0, 0.5 if y[i] else 1.2, lengths[i])) for i in range(n)]
    S = [list(rng.gamma(1.5, 0.4 if y[i] else 0.8, lengths[i])) for i in range(n)]
    return TaskStats(name, [f"{name}{i}" for i in range(n)], y, Inputs(TraceBatch.from_lists(S, H)), "rule")


@pytest.mark.parametrize(
    ("n_correct", "n", "ranked"), [(50, 100, True), (49, 300, False), (251, 300, False), (0, 0, False)]
)
def test_informative_needs_enough_answers_of_each_class(n_correct: int, n: int, ranked: bool) -> None:
    why = informative(n_correct, n)
    assert (why is None) == ranked
    if not ranked:
        assert "fewer than 50" in why and str(n) in why


def test_a_task_of_few_correct_answers_is_kept_out_of_the_average_and_the_marks() -> None:
    data = [_task("big", 400, 0.4, 0), _task("other", 300, 0.5, 1), _task("few", 300, 0.03, 2)]
    cfg = ScoreConfig(estimators=["trace", "neg_mean_entropy", "mean_prob"], n_seeds=3, n_boot=100)
    res = score_tasks(data, cfg)
    few = res.tasks["few"]
    assert few["informative"] is False and "correct answers of 300" in few["informative_reason"]
    assert ranked_tasks(res.tasks) == ["big", "other"]
    for est in cfg.estimators:  # the average is over the two ranked tasks only
        mean = np.mean([res.metrics[t][est]["auroc"]["mean"] for t in ("big", "other")])
        assert res.metrics["average"][est]["auroc"]["mean"] == pytest.approx(mean)
    comp = res.statistics["comparisons"]
    assert set(comp) == {"big", "other", "average"}
    assert res.statistics["ranked"] == {"tasks": ["big", "other"], "over": "average"}
    md = results_markdown(res)
    assert "**Not ranked**" in md and "- few:" in md
    ranked_part = md.split("**Not ranked**")[0]
    assert "| few |" in ranked_part  # in the task summary, with its reason …
    assert "few" not in ranked_part.split("**AUROC**")[1].split("\n")[2]  # … but not a column of the ranked tables
    titles = [str(t.title) for t in results_tables(res, ["auroc"])]
    assert any("NOT RANKED" in t for t in titles)


def test_without_ranked_tasks_there_is_no_average_and_no_leader() -> None:
    data = [_task("a", 100, 0.05, 0), _task("b", 100, 0.02, 1)]
    res = score_tasks(data, ScoreConfig(estimators=["trace", "mean_prob"], n_seeds=2, n_boot=50))
    assert "average" not in res.metrics and "leader" not in res.statistics
    assert res.statistics["ranked"] == {"tasks": [], "over": None}


def test_min_per_class_zero_ranks_every_task() -> None:
    data = [_task("a", 60, 0.1, 0), _task("b", 60, 0.5, 1)]
    res = score_tasks(data, ScoreConfig(estimators=["trace"], n_seeds=2, n_boot=0, min_per_class=0))
    assert "average" in res.metrics and all(i["informative"] for i in res.tasks.values())


def test_the_leader_is_the_highest_auroc_and_level_means_an_interval_holding_zero() -> None:
    data = [_task("a", 400, 0.4, 3)]
    cfg = ScoreConfig(estimators=["trace", "neg_mean_entropy", "mean_prob", "p_true"], n_seeds=3, n_boot=200)
    data[0].inputs.stats["p_true"] = np.random.default_rng(0).random(400)  # no signal: far below the leader
    res = score_tasks(data, cfg)
    lead = res.statistics["leader"]
    aurocs = {e: res.metrics["a"][e]["auroc"]["mean"] for e in cfg.estimators}
    assert lead["estimator"] == max(aurocs, key=aurocs.get)
    assert lead["estimators"]["p_true"]["auroc"]["verdict"] == "worse"
    for est, m in lead["estimators"].items():
        a = m["auroc"]
        assert a["diff"] == pytest.approx(aurocs[est] - aurocs[lead["estimator"]])
        assert (a["verdict"] == "n.s.") == (a["lo"] <= 0 <= a["hi"])


def test_leader_comparisons_without_draws_is_none() -> None:
    assert leader_comparisons({}, {}, 0.95) is None
