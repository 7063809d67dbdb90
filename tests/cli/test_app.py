"""The `tracecal` app (tracecal.cli.app): every command registered under its name, in the documented order."""

from __future__ import annotations

import typer
from typer.testing import CliRunner

from tracecal.cli.app import COMMANDS, app

EXPECTED = [
    "generate",
    "score",
    "score-answers",
    "fit-calibrator",
    "evaluate",
    "tasks",
    "estimators",
    "passes",
    "report",
    "secl",
    "serve",
    "selective",
    "learning-curve",
    "ablate",
    "cross-model",
    "frontier",
    "models",
]


def test_every_command_is_registered_in_order() -> None:
    group = typer.main.get_command(app)
    assert list(group.commands) == EXPECTED == list(COMMANDS)  # type: ignore[attr-defined]  # a click Group


def test_help_lists_every_command() -> None:
    r = CliRunner().invoke(app, ["--help"], terminal_width=200)
    assert r.exit_code == 0 and all(name in r.output for name in EXPECTED), r.output


def test_no_arguments_prints_the_help() -> None:
    r = CliRunner().invoke(app, [])
    assert "Usage" in r.output and "generate" in r.output
