"""`tracecal report RUN_DIR`: the command function, registered by the main app as
``app.command("report")(report_command)``.

Input it cannot report on (a missing folder, a folder that is not a scored run, a file, damaged results or
tables, an unknown estimator) and files it cannot write end the command with exit status 2 and one line
saying what is wrong and what to do, never a traceback.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from tracecal.cli.common import console, shown, user_errors

__all__ = ["report_command"]


@user_errors
def report_command(
    run_dir: Annotated[Path, typer.Argument(help="a scored run directory (tracecal evaluate --run-dir)")],
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="HTML file to write (default RUN/report.html)")
    ] = None,
    figures: Annotated[
        Path | None, typer.Option("--figures", help="also write every figure as an SVG file into this folder")
    ] = None,
    estimators: Annotated[
        str | None,
        typer.Option(help="comma-separated estimators or groups (trace-only, beam, semantic, extra); default all"),
    ] = None,
    max_examples: Annotated[
        int | None, typer.Option("--max-examples", help="at most this many answers per task in the example browser")
    ] = None,
) -> None:
    """Write a self-contained HTML report: results, reliability diagrams, risk–coverage, token views."""
    from tracecal.report import write_report

    t0 = time.perf_counter()
    path = write_report(run_dir, out=out, figures_dir=figures, estimators=estimators, max_examples=max_examples)
    size = path.stat().st_size / 1e6
    secs = time.perf_counter() - t0
    console.print(f"report: [bold]{shown(path)}[/] ({size:.1f} MB, {secs:.1f} s)", highlight=False)
    if figures is not None:
        console.print(f"figures: [bold]{shown(figures)}[/] (SVG)", highlight=False)
