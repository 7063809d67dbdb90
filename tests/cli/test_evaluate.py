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


def _one_line_error(r: object) -> str:
    out = r.output  # type: ignore[attr-defined]
    assert r.exit_code == 2 and "Traceback" not in out, out  # type: ignore[attr-defined]
    lines = [ln for ln in out.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, out
    return lines[0]


SMALL = ["--tasks", "triviaqa", "--limit", "8", "--shard-size", "4", "--estimators", "trace", "--seeds", "2"]
SMALL += ["--max-new-tokens", "4", "--n-boot", "0", "--no-report"]


def test_faults_are_one_line_messages_with_exit_2(tmp_path: Path, tiny_model, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import errno

    import tracecal.backends as backends
    import tracecal.evaluation.runstore as runstore

    monkeypatch.setattr(backends, "load_model", lambda *a, **k: tiny_model)
    runner = CliRunner()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.json").write_text('{"my": "settings"}')
    for extra in ([], ["--score-only"]):
        r = runner.invoke(app, ["evaluate", "--run-dir", str(mine), *SMALL, *extra])
        assert "not a tracecal run" in _one_line_error(r)
    assert [p.name for p in mine.iterdir()] == ["config.json"]
    assert (mine / "config.json").read_text() == '{"my": "settings"}'
    for args, option in ((["--cal-frac", "0.01"], "--cal-frac"), (["--limit", "1"], "--limit")):
        r = runner.invoke(app, ["evaluate", "--run-dir", str(tmp_path / "few"), *SMALL, *args])
        assert "too few to split" in _one_line_error(r) and option in r.output
    assert not (tmp_path / "few").exists()
    real = runstore.atomic_write

    def full(path: Path, write: object) -> None:
        if path.suffix == ".parquet" and path.name == "00001.parquet":
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real(path, write)  # type: ignore[arg-type]

    monkeypatch.setattr(runstore, "atomic_write", full)
    run = tmp_path / "run"
    r = runner.invoke(app, ["evaluate", "--run-dir", str(run), *SMALL])
    assert "No space left on device; free some space and run the same command again" in _one_line_error(r)
    monkeypatch.setattr(runstore, "atomic_write", real)
    r = runner.invoke(app, ["evaluate", "--run-dir", str(run), *SMALL])
    assert r.exit_code == 0, r.output
