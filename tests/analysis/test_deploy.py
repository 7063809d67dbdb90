"""From a run to a calibrator file: every deployable estimator, the refusals, and the CLI's `fit-calibrator RUN`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tracecal.analysis.deploy import deployable, fit_from_run, run_answers
from tracecal.calibrators import load_calibrator
from tracecal.cli.app import app
from tracecal.errors import ValidationError
from tracecal.evaluation.runstore import RunStore
from tracecal.testing import scored_synthetic_run


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tasks = {"triviaqa": (300, 0.4), "svamp": (100, 0.02)}
    return scored_synthetic_run(tmp_path_factory.mktemp("d") / "run", tasks, model="m", dtype="bfloat16")


@pytest.mark.parametrize("name", ["trace", "trace_plus", "trace_plus_cv", "trace_plus_prior"])
def test_each_deployable_estimator_fits_on_the_ranked_tasks_and_records_the_run(run: Path, name: str) -> None:
    assert name in deployable()
    cal = fit_from_run(run, name)
    traces, y = run_answers(RunStore(run), ["triviaqa"])
    assert len(traces) == 300 and set(np.unique(y)) == {0, 1}
    p = cal.confidence(traces)
    assert np.all((p > 0) & (p < 1)) and np.corrcoef(p, y)[0, 1] > 0.2  # fitted on the labels, not at random
    assert cal.provenance["model"] == "m" and cal.provenance["dtype"] == "bfloat16"


def test_a_baseline_or_an_unknown_task_is_refused(run: Path) -> None:
    with pytest.raises(ValidationError, match="cannot be served from a file"):
        fit_from_run(run, "neg_mean_entropy")
    with pytest.raises(ValidationError, match="the run holds triviaqa, svamp"):
        fit_from_run(run, "trace", ["mlqa"])
    with pytest.raises(ValidationError, match="all of one class"):
        fit_from_run(run, "trace", ["svamp"])


def test_fit_calibrator_on_a_run_writes_the_verdicts_estimator(run: Path, tmp_path: Path) -> None:
    out = tmp_path / "cal.json"
    r = CliRunner().invoke(app, ["fit-calibrator", str(run), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "fitted the calibrator of" in r.output and load_calibrator(out).provenance["model"] == "m"
    r = CliRunner().invoke(app, ["fit-calibrator", str(run), "--out", str(tmp_path / "c2.json"), "--labels", "x.csv"])
    assert r.exit_code == 2 and "holds its labels" in r.output and not (tmp_path / "c2.json").exists()
    r = CliRunner().invoke(app, ["fit-calibrator", str(run), "--out", str(out), "--estimator", "mean_prob"])
    assert r.exit_code == 2 and "cannot be served from a file" in r.output
