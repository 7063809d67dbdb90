"""The smallest certified error rate per estimator (`tracecal.report.selective`): exact on data with a known answer,
minimal on the grid, read from the run's seed-0 predictions, and printed as the terminal table."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from tracecal.evaluation.runstore import RunStore
from tracecal.report.data import load_run
from tracecal.report.selective import (
    ALPHAS,
    best_of,
    cell_text,
    certified,
    certified_summary,
    certified_tables,
    run_delta,
)
from tracecal.stats.selective import SelectiveThreshold, ltt_threshold
from tracecal.testing import write_synthetic_run


def test_thirty_right_answers_on_top_certify_alpha_008_at_30_percent() -> None:
    """30 correct answers ranked above 70 wrong ones, δ = 0.1: a threshold answering n answers with no error
    is certified iff (1 − α)^n ≤ δ, so the 30 certify α ≥ 1 − 0.1^(1/30) = 0.0739 → α* = 0.08 on the grid; one
    more answer (1 error in 31) has p = 0.28 > δ at α = 0.08, so exactly the 30 are answered."""
    score = np.r_[np.linspace(1, 0.7, 30), np.linspace(0.6, 0, 70)]
    y = np.r_[np.ones(30), np.zeros(70)].astype(np.int64)
    c = certified(score, y, 0.1)
    assert c.alpha == 0.08 and (c.n_cal, c.n_answered, c.n_errors) == (100, 30, 0)
    assert c.coverage == 0.3 and c.threshold == pytest.approx(0.7) and c.delta == 0.1
    assert cell_text(c) == "0.08 · 30%"
    assert math.isinf(ltt_threshold(score, y, 0.07, 0.1).threshold)  # minimal: 0.07 certifies nothing


def test_alpha_star_is_the_first_certified_alpha_of_the_grid() -> None:
    rng = np.random.default_rng(3)
    for _ in range(20):
        y = (rng.random(120) < rng.uniform(0.1, 0.9)).astype(np.int64)
        score = y * rng.uniform(0, 2) + rng.normal(size=120)
        delta = float(rng.choice([0.05, 0.1, 0.2]))
        c = certified(score, y, delta)
        finite = [a for a in ALPHAS if math.isfinite(ltt_threshold(score, y, a, delta).threshold)]
        if not finite:
            assert math.isnan(c.alpha) and c.n_answered == 0 and cell_text(c) == "none"
            continue
        assert c.alpha == finite[0]
        assert c == ltt_threshold(score, y, c.alpha, delta)


def test_a_wrong_answer_on_top_certifies_nothing() -> None:
    """The fixed sequence starts at the most confident answers: a wrong one there ends it (α ≥ 0.9 tests it alone,
    smaller α need more answers than the three there are, or meet the error among the first ones)."""
    c = certified(np.array([3.0, 2.0, 1.0]), np.array([0, 1, 1]), 0.1)
    assert math.isnan(c.alpha) and math.isinf(c.threshold) and c.coverage == 0 and c.n_cal == 3
    assert cell_text(None) == "—"


@pytest.fixture(scope="module")
def synth(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("sel") / "run"
    return write_synthetic_run(run, tasks=("triviaqa", "svamp"), n_per_task=90, n_seeds=2, seed=4)


def test_the_summary_reads_the_seed0_evaluation_split_of_the_predictions(synth: Path) -> None:
    run = load_run(synth)
    pred = RunStore(synth).read_table("predictions").to_pydict()
    summary = certified_summary(run, ["trace", "p_true", "not_in_the_run"])
    assert list(summary) == ["triviaqa", "svamp"] and run_delta(run.results) == 0.1
    for task, per in summary.items():
        assert set(per) == {"trace", "p_true"}
        pairs = enumerate(zip(pred["task"], pred["split"], strict=True))
        rows = [i for i, (t, s) in pairs if t == task and s == "eval"]
        for est, c in per.items():
            raw = np.array([pred[f"raw:{est}"][i] for i in rows])
            y = np.array([pred["correct"][i] for i in rows])
            assert c == certified(raw, y, 0.1) and c.n_cal == len(rows) < 90
    assert run_delta({"statistics": {"selective": {"delta": 0.05}}}) == 0.05
    assert run_delta({"statistics": {"selective": {"delta": "x"}}}) == 0.1


def test_best_of_prefers_the_smaller_alpha_then_the_larger_coverage() -> None:
    def c(a: float, k: int) -> SelectiveThreshold:
        return SelectiveThreshold(0.5, k, 0, 0.01, a, 0.1, "ltt", 100)

    per = {"a": c(0.3, 10), "b": c(0.2, 5), "c": c(0.2, 9), "d": c(math.nan, 0)}
    assert best_of(per) == {"c"}
    assert best_of({"d": per["d"]}) == set()


def test_the_terminal_table_lists_every_estimator_and_task(synth: Path) -> None:
    (table,) = certified_tables(synth)
    console = Console(width=250, record=True)
    console.print(table)
    text = console.export_text()
    run = load_run(synth)
    summary = certified_summary(run, run.estimators)
    assert "smallest error rate α" in text and "probability ≥ 0.9" in text
    for est in run.estimators:
        line = next(ln for ln in text.splitlines() if ln.startswith(f"│ {est} "))
        assert [cell_text(summary[t][est]) for t in run.tasks] == [s.strip() for s in line.split("│")[2:-1]]
    for task in run.tasks:
        assert task in text
    assert certified_tables(synth, ["trace"])[0].row_count == 1


def test_the_terminal_table_marks_no_best_on_a_task_too_small_to_rank(tmp_path: Path) -> None:
    run = write_synthetic_run(
        tmp_path / "run",
        tasks=("triviaqa", "mlqa"),
        n_per_task=300,
        estimators=("trace", "mean_prob", "p_true"),
        n_seeds=2,
        accuracy={"triviaqa": 0.5, "mlqa": 0.02},
    )
    (table,) = certified_tables(run)
    cols = {str(c.header).split("\n")[0]: c for c in table.columns}
    assert "not ranked" in str(cols["mlqa"].header) and "not ranked" not in str(cols["triviaqa"].header)
    assert not any("bold green" in str(x) for x in cols["mlqa"].cells)
    assert any("bold green" in str(x) for x in cols["triviaqa"].cells)
