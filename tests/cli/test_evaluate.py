"""`tracecal evaluate` (tracecal.cli.evaluate): options → a validated EvalConfig, refused before anything is
written, ``--score-only`` defaults from the run, and the progress view without a terminal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console
from rich.progress import Progress
from typer.testing import CliRunner

from tracecal.cli.app import app
from tracecal.cli.evaluate import CONFIG_OPTIONS, STORED_WITH_SCORE_ONLY, RunView, evaluate_config
from tracecal.testing import write_synthetic_run


def test_the_config_options_are_eval_config_fields() -> None:
    from tracecal.evaluation.config import EvalConfig

    names = set(EvalConfig(["triviaqa"]).to_dict())
    assert set(CONFIG_OPTIONS) <= names and set(STORED_WITH_SCORE_ONLY) <= names


def test_evaluate_config_splits_tasks_and_validates() -> None:
    cfg = evaluate_config(tasks=" triviaqa, svamp ,", estimators="trace", n_seeds=3)
    assert cfg.tasks == ["triviaqa", "svamp"] and cfg.n_seeds == 3
    with pytest.raises(ValueError, match="limit"):
        evaluate_config(tasks="triviaqa", limit=-5)


def test_score_only_takes_the_runs_settings(tmp_path: Path) -> None:
    run = write_synthetic_run(tmp_path / "run", tasks=("triviaqa",), n_per_task=20, n_seeds=2)
    doc = json.loads((run / "config.json").read_text())
    doc["config"] |= {"n_boot": 7, "sel_alpha": 0.4}
    (run / "config.json").write_text(json.dumps(doc))
    cfg = evaluate_config(run, tasks="svamp", estimators="trace")  # outside a command: every stored value
    assert cfg.tasks == ["triviaqa"] and cfg.n_boot == 7 and cfg.sel_alpha == 0.4


def test_bad_options_write_nothing(tmp_path: Path) -> None:
    run = tmp_path / "run"
    for args, msg in [
        (["--metrics", "aurocc"], "unknown metric 'aurocc'"),
        (["--threads", "0"], "--threads must be a whole number ≥ 1, got 0"),
        (["--shard-size", "0"], "shard-size"),
    ]:
        r = CliRunner().invoke(app, ["evaluate", "--run-dir", str(run), "--tasks", "triviaqa", *args])
        assert r.exit_code == 2 and msg in r.output, r.output
        assert not run.exists()


def test_run_view_logs_stages_and_deciles_without_a_terminal() -> None:
    console = Console(record=True, force_terminal=False, width=120)
    with Progress(console=console) as pb:
        view = RunView(pb)
        view("run", 0, 10)
        view("traces · [red]x[/red]", 1, 4)
        view("run", 5, 10)
        view("run", 10, 10)
    text = console.export_text()
    assert "traces · [red]x[/red]" in text
    assert "whole run   0 %" in text and "whole run  50 %" in text and "whole run 100 %" in text
