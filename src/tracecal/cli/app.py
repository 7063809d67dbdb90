"""The `tracecal` command line (typer + rich): the app and the registration of every command.

Each command lives in the module of its group and wraps library calls and nothing more; they share one console,
one ``fail``, one number formatter and one decorator mapping user errors to exit status 2
(`tracecal.cli.common`). ``python -m tracecal.cli`` and ``python -m tracecal.cli.app`` run the same app.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable

import typer

from tracecal.cli.analysis import ablate_command, cross_model_command, frontier_command
from tracecal.cli.answers import score_answers
from tracecal.cli.common import show_warning
from tracecal.cli.evaluate import evaluate
from tracecal.cli.listing import list_estimators, list_passes, list_tasks
from tracecal.cli.models import models_command
from tracecal.cli.report import report_command
from tracecal.cli.secl import secl_command
from tracecal.cli.serve import serve_command
from tracecal.cli.stats import learning_curve_command, selective_command
from tracecal.cli.traces import fit_calibrator, generate, score

__all__ = ["COMMANDS", "app", "main"]

app = typer.Typer(
    help="tracecal: single-pass decoding-trace confidence (TRACE / TRACE+), calibration benchmarks and SECL.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


@app.callback()
def _every_command() -> None:
    # a library warning (a pass incomplete on a task, a split with one class, ...) is one line, not a source excerpt
    warnings.showwarning = show_warning


#: Every command by name, in the order of ``tracecal --help``.
COMMANDS: dict[str, Callable[..., None]] = {
    "generate": generate,
    "score": score,
    "score-answers": score_answers,
    "fit-calibrator": fit_calibrator,
    "evaluate": evaluate,
    "tasks": list_tasks,
    "estimators": list_estimators,
    "passes": list_passes,
    "report": report_command,
    "secl": secl_command,
    "serve": serve_command,
    "selective": selective_command,
    "learning-curve": learning_curve_command,
    "ablate": ablate_command,
    "cross-model": cross_model_command,
    "frontier": frontier_command,
    "models": models_command,
}
for _name, _command in COMMANDS.items():
    app.command(_name)(_command)


def main() -> None:  # pragma: no cover
    """The console entry point: the app, with tokenizers' own thread pool off (torch has its threads)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
