"""Selective answering on a scored run (`tracecal.analysis.selective`): the document, its command, the threshold
to deploy, and that the gateway's reader does not pull the report renderer in."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tracecal.analysis.selective import deployed_threshold, run_selective
from tracecal.cli.app import app
from tracecal.evaluation.runstore import RunStore
from tracecal.testing import write_synthetic_run


def test_selective_on_a_run_and_its_command(tmp_path: Path) -> None:
    run = write_synthetic_run(tmp_path / "run", tasks=("triviaqa", "svamp"), n_per_task=120, n_seeds=3)
    doc = run_selective(run, alpha=0.5, delta=0.2, estimators=["trace", "mean_prob"], n_splits=4)
    assert RunStore(run).read_artefact("selective")["alpha"] == 0.5 and doc["n_splits"] == 4
    v = doc["tasks"]["triviaqa"]["trace"]
    assert 0 <= v["coverage"]["mean"] <= 1 and 0 <= v["violation_share"] <= 1 and v["deploy"]["threshold"] > 0
    r = CliRunner().invoke(
        app, ["selective", str(run), "--alpha", "0.5", "--delta", "0.2", "--estimators", "trace", "--splits", "3"]
    )
    assert r.exit_code == 0, r.output
    assert "realised risk" in r.output and json.loads((run / "selective.json").read_text())["n_splits"] == 3
    for args, msg in (
        (["--alpha", "1.5"], "alpha"),
        (["--estimators", "nope"], "unknown estimator"),
        (["--tasks", "mlqa"], "not in"),
    ):
        bad = CliRunner().invoke(app, ["selective", str(run), *args])
        assert bad.exit_code == 2 and msg in bad.output and "Traceback" not in bad.output
    missing = CliRunner().invoke(app, ["selective", str(tmp_path / "nowhere")])
    assert missing.exit_code == 2 and "not a run directory" in missing.output


def test_the_deployed_threshold_is_read_back_from_selective_json(tmp_path: Path) -> None:
    run = write_synthetic_run(tmp_path / "run", tasks=("triviaqa",), n_per_task=60, n_seeds=2)
    doc = run_selective(run, alpha=0.5, delta=0.2, estimators=["trace"], n_splits=2)
    doc["tasks"]["triviaqa"]["trace"]["deploy"] |= {"threshold": 0.25, "n_threshold": 60, "coverage": 0.5}
    (run / "selective.json").write_text(json.dumps(doc))
    got = deployed_threshold(run / "selective.json", "trace")
    assert (got["threshold"], got["task"], got["model"], got["coverage"]) == (0.25, "triviaqa", "synthetic", 0.5)
    assert len(got["sha256"]) == 64 and got["alpha"] == 0.5
    doc["tasks"]["triviaqa"]["trace"]["deploy"]["threshold"] = float("inf")
    (run / "selective.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="every answer would abstain"):
        deployed_threshold(run / "selective.json", "trace")


def test_reading_a_threshold_does_not_import_the_report() -> None:
    code = "import sys, tracecal.analysis.selective; print(any(m.startswith('tracecal.report') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_selective_json_is_standard_json_and_a_null_threshold_certifies_nothing(tmp_path: Path) -> None:
    run = write_synthetic_run(tmp_path / "run", tasks=("triviaqa",), n_per_task=60, n_seeds=2)
    doc = run_selective(run, alpha=0.001, delta=0.01, estimators=["trace"], n_splits=2)  # no α this small holds
    assert doc["tasks"]["triviaqa"]["trace"]["deploy"]["threshold"] == float("inf")
    text = (run / "selective.json").read_text()
    stored = json.loads(text, parse_constant=lambda c: pytest.fail(f"selective.json holds {c}"))
    deploy = stored["tasks"]["triviaqa"]["trace"]["deploy"]
    assert deploy["threshold"] is None and deploy["certified"] is False
    with pytest.raises(ValueError, match="every answer would abstain"):
        deployed_threshold(run / "selective.json", "trace")
