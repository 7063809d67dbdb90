"""`tracecal selective` and `tracecal learning-curve` (tracecal.cli.stats) on a synthetic scored run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tracecal.cli.app import app
from tracecal.cli.common import MISSING
from tracecal.cli.stats import _selective_table, _sizes
from tracecal.errors import ValidationError
from tracecal.testing import write_synthetic_run


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_synthetic_run(tmp_path_factory.mktemp("stats") / "run", tasks=("triviaqa",), n_per_task=120, n_seeds=2)


def test_selective_prints_a_table_and_writes_the_file(run: Path) -> None:
    args = ["selective", str(run), "--alpha", "0.5", "--estimators", "trace", "--splits", "2"]
    r = CliRunner().invoke(app, args, terminal_width=200)
    assert r.exit_code == 0, r.output
    assert "realised risk" in r.output and f"selective: {run / 'selective.json'}" in " ".join(r.output.split())
    assert json.loads((run / "selective.json").read_text())["n_splits"] == 2


def test_selective_table_shows_a_missing_threshold_as_a_dash() -> None:
    per = {"trace": {"base_rate": 0.5, "coverage": {"mean": 0.0}, "risk": {"mean": float("nan")}}}
    per["trace"] |= {"violation_share": 0.0, "deploy": None}
    table = _selective_table("triviaqa", per, 0.1, 0.1, 2)
    cells = [next(iter(col.cells)) for col in table.columns]
    assert cells == ["trace", "0.000", MISSING, "0.00", MISSING, MISSING]


def test_learning_curve_prints_tables_and_writes_its_files(run: Path) -> None:
    args = ["learning-curve", str(run), "--sizes", "20,40", "--splits", "2", "--n-boot", "20", "--focus", "trace"]
    r = CliRunner().invoke(app, [*args, "--estimators", "trace,trace_plus"], terminal_width=200)
    assert r.exit_code == 0, r.output
    assert "trace − other" in r.output and "learning curves:" in r.output
    assert (run / "learning_curve.json").is_file() and (run / "learning_curve.csv").is_file()
    assert (run / "learning_curve_triviaqa.svg").is_file()


def test_sizes_are_whole_numbers() -> None:
    assert _sizes("100, 200,") == [100, 200]
    with pytest.raises(ValidationError, match="--sizes must be comma-separated whole numbers, got '1.5'"):
        _sizes("1.5")
