"""Selective answering: the Learn-then-Test threshold keeps its guarantee on data with a known error curve (the
naive empirical threshold does not), the edge cases, and `tracecal selective` on a run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import binom
from typer.testing import CliRunner

from tracecal.cli import app
from tracecal.report.synthetic import write_synthetic_run
from tracecal.runstore import RunStore
from tracecal.selective import (
    empirical_threshold,
    guaranteed_threshold,
    ltt_threshold,
    min_answered,
    selective_outcome,
)
from tracecal.selective_run import run_selective

ALPHA = DELTA = 0.1


def _draw(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Confidence c ~ U(0, 1), P(wrong | c) = 0.4·(1 − c): the selective risk of "answer iff c ≥ t" is
    R(t) = E[0.4·(1 − c) | c ≥ t] = 0.2·(1 − t), so R(t) ≤ α = 0.1 exactly when t ≥ 0.5."""
    c = rng.random(n)
    return c, (rng.random(n) >= 0.4 * (1 - c)).astype(int)


def risk(t: float) -> float:
    return 0.2 * (1 - min(t, 1.0))


def test_guarantee_holds_where_the_naive_threshold_fails() -> None:
    """Over 1,000 calibration sets the LTT threshold's true risk exceeds α in ≤ δ of them (up to Monte-Carlo
    error), while the empirical threshold's does in about half."""
    rng = np.random.default_rng(0)
    reps = 1000
    ltt = [ltt_threshold(*_draw(rng, 400), ALPHA, DELTA) for _ in range(reps)]
    naive = [empirical_threshold(*_draw(rng, 400), ALPHA) for _ in range(reps)]
    v_ltt = np.mean([risk(t.threshold) > ALPHA for t in ltt])
    v_naive = np.mean([risk(t.threshold) > ALPHA for t in naive])
    assert v_ltt <= DELTA + 3 * math.sqrt(DELTA * (1 - DELTA) / reps), v_ltt
    assert v_naive > 0.3, v_naive  # clearly above δ
    cov = np.mean([1 - min(t.threshold, 1.0) for t in ltt])
    assert 0.05 < cov < 0.5  # it answers something, and never more than the oracle's 50 %


def test_the_threshold_is_the_last_rejection_of_the_fixed_sequence() -> None:
    rng = np.random.default_rng(3)
    c, y = _draw(rng, 300)
    t = ltt_threshold(c, y, ALPHA, DELTA)
    order = np.argsort(-c)
    n = np.arange(1, 301)
    k = np.cumsum(1 - y[order])
    p = binom.cdf(k, n, ALPHA)
    tested = n >= min_answered(ALPHA, DELTA)
    first_fail = np.flatnonzero(tested & (p > DELTA))[0]
    assert t.n_answered == first_fail and t.threshold == c[order][first_fail - 1]  # the one before the failure
    assert t.p_value <= DELTA and t.n_errors == k[first_fail - 1]
    assert guaranteed_threshold(c, y, ALPHA, DELTA) == t.threshold
    assert min_answered(0.1, 0.1) == 22  # 0.9^22 = 0.098 ≤ 0.1 < 0.9^21


def test_edge_cases_and_bad_input() -> None:
    assert ltt_threshold(np.arange(100.0), np.zeros(100, int), ALPHA, DELTA).threshold == math.inf
    t = ltt_threshold(np.arange(100.0), np.ones(100, int), ALPHA, DELTA)
    assert t.threshold == 0.0 and t.coverage == 1.0  # all correct: answer everything
    out = selective_outcome([0.9, 0.8, 0.1], [1, 0, 1], 0.5, alpha=0.1)
    assert out == {"sel_coverage": 2 / 3, "sel_risk": 0.5, "sel_violation": 1.0}
    nothing = selective_outcome([0.9, 0.8], [1, 0], math.inf, alpha=0.1)
    assert nothing["sel_coverage"] == 0 and math.isnan(nothing["sel_risk"]) and nothing["sel_violation"] == 0.0
    ties = ltt_threshold(np.r_[np.ones(50), np.zeros(50)], np.r_[np.ones(50), np.zeros(50)].astype(int), 0.1, 0.1)
    assert ties.n_answered == 50  # tied scores enter together
    with pytest.raises(ValueError, match="alpha"):
        ltt_threshold([0.1, 0.2], [0, 1], 1.2, 0.1)
    with pytest.raises(ValueError, match="delta"):
        ltt_threshold([0.1, 0.2], [0, 1], 0.1, 0)
    with pytest.raises(ValueError, match="non-finite"):
        ltt_threshold([np.nan, 0.2], [0, 1])
    with pytest.raises(ValueError, match="different lengths"):
        ltt_threshold([0.1, 0.2, 0.3], [0, 1])


def test_selective_on_a_run_and_its_command(tmp_path: Path) -> None:
    run = write_synthetic_run(tmp_path / "run", tasks=("triviaqa", "svamp"), n_per_task=120, n_seeds=3)
    doc = run_selective(run, alpha=0.5, delta=0.2, estimators=["trace", "mean_prob"], n_splits=4)
    assert RunStore(run).read_artefact("selective")["alpha"] == 0.5 and doc["n_splits"] == 4
    v = doc["tasks"]["triviaqa"]["trace"]
    assert 0 <= v["coverage"]["mean"] <= 1 and 0 <= v["violation_share"] <= 1 and v["deploy"]["threshold"] > 0
    r = CliRunner().invoke(app, ["selective", str(run), "--alpha", "0.5", "--delta", "0.2", "--estimators",
                                 "trace", "--splits", "3"])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "realised risk" in r.output and json.loads((run / "selective.json").read_text())["n_splits"] == 3
    for args, msg in ((["--alpha", "1.5"], "alpha"), (["--estimators", "nope"], "unknown estimator"),
                      (["--tasks", "mlqa"], "not in")):  # fmt: skip
        bad = CliRunner().invoke(app, ["selective", str(run), *args])
        assert bad.exit_code == 2 and msg in bad.output and "Traceback" not in bad.output
    missing = CliRunner().invoke(app, ["selective", str(tmp_path / "nowhere")])
    assert missing.exit_code == 2 and "not a run directory" in missing.output
