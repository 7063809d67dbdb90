"""`tracecal report` (tracecal.cli.report): the HTML report of a scored run, refused with one line otherwise."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from tracecal.cli.app import app
from tracecal.testing import write_synthetic_run


def test_report_writes_the_html_and_figures(tmp_path: Path) -> None:
    run = write_synthetic_run(tmp_path / "[run]", tasks=("triviaqa",), n_per_task=30, n_seeds=2)
    out, figures = tmp_path / "r.html", tmp_path / "figs"
    args = ["report", str(run), "--out", str(out), "--figures", str(figures), "--max-examples", "2"]
    r = CliRunner().invoke(app, args, terminal_width=300)
    assert r.exit_code == 0, r.output
    assert out.is_file() and any(figures.glob("*.svg"))
    assert f"report: {out}" in r.output and f"figures: {figures} (SVG)" in r.output


def test_report_on_an_unscored_folder_is_one_line(tmp_path: Path) -> None:
    r = CliRunner().invoke(app, ["report", str(tmp_path), "--out", str(tmp_path / "r.html")])
    assert r.exit_code == 2 and r.output.startswith("error: ") and r.output.count("\n") == 1, r.output
    assert not (tmp_path / "r.html").exists()
