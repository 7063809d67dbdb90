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


def test_report_never_writes_over_a_file_of_the_run(tmp_path: Path) -> None:
    """``--out`` naming one of the run's own files (results.json, a shard, through a link too) is refused before
    anything is read, the file byte-identical; ``--out RUN/report.html`` is the default report; a link is followed
    and kept, a character device written into (both through `tracecal._outputs.atomic_write`)."""
    import os

    run = write_synthetic_run(tmp_path / "run", tasks=("triviaqa",), n_per_task=30, n_seeds=2)
    files = [p for p in sorted(run.rglob("*")) if p.is_file()]
    before = {p: p.read_bytes() for p in files}
    (tmp_path / "link.json").symlink_to(run / "results.json")
    shard = next(run.glob("*/*/*.parquet"))
    for out in (run / "results.json", run / "config.json", tmp_path / "link.json", shard):
        r = CliRunner().invoke(app, ["report", str(run), "--out", str(out), "--max-examples", "1"])
        assert r.exit_code == 2 and "Traceback" not in r.output, r.output
        assert f"error: --out {out} is the file of the run" in " ".join(r.output.split())
    assert {p: p.read_bytes() for p in files} == before
    for out in (run / "report.html", tmp_path / "link.html", Path(os.devnull)):
        if out.name == "link.html":
            out.symlink_to(tmp_path / "real.html")
        r = CliRunner().invoke(app, ["report", str(run), "--out", str(out), "--max-examples", "1"])
        assert r.exit_code == 0, r.output
    assert (run / "report.html").is_file() and (tmp_path / "link.html").is_symlink()
    assert (tmp_path / "real.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_a_full_or_read_only_disk_is_a_message_and_loses_nothing(tmp_path: Path) -> None:
    """A real full disk (a small tmpfs filled up) under ``--out`` and ``--figures``: one line with what to do,
    exit 2, the old report as it was, no temporary file; then the same disk read-only."""
    from tests.traces.disk import fill, read_only, small_filesystem, tmp_files

    run = write_synthetic_run(tmp_path / "run", tasks=("triviaqa",), n_per_task=30, n_seeds=2)
    with small_filesystem(tmp_path) as mnt:
        out, figures = mnt / "r.html", mnt / "figs"
        out.write_text("old report")
        figures.mkdir()
        fill(mnt)
        for extra in ([], ["--figures", str(figures)]):
            r = CliRunner().invoke(app, ["report", str(run), "--out", str(out), "--max-examples", "1", *extra])
            line = " ".join(r.output.split())
            assert r.exit_code == 2 and "Traceback" not in r.output and line.startswith("error: cannot write"), line
            assert "No space left on device; free some space and run the same command again" in line
        assert out.read_text() == "old report" and tmp_files(mnt) == [] and tmp_files(figures) == []
        (mnt / ".filler").unlink()
        read_only(mnt)
        r = CliRunner().invoke(app, ["report", str(run), "--out", str(mnt / "new.html"), "--max-examples", "1"])
        line = " ".join(r.output.split())
        assert r.exit_code == 2 and f"error: cannot write {mnt / 'new.html'}: Read-only file system" in line, line
        assert "make it writable or choose another output path, then run again" in line


def test_figures_naming_a_file_is_one_line_before_anything_is_read(tmp_path: Path) -> None:
    """``--figures`` naming a file (one of the run's, or ``/dev/null``) was ``.../results.json/reliability_x.svg: Not
    a directory``: now it says the option wants a folder, and the file is byte-identical."""
    run = write_synthetic_run(tmp_path / "run", tasks=("triviaqa",), n_per_task=30, n_seeds=2)
    before = (run / "results.json").read_bytes()
    for figures in (run / "results.json", Path("/dev/null")):
        r = CliRunner().invoke(app, ["report", str(run), "--out", str(tmp_path / "r.html"), "--figures", str(figures)])
        line = " ".join(r.output.split())
        assert (
            r.exit_code == 2
            and line == f"error: --figures {figures} is not a folder: give a folder for the SVG figures"
        )
    assert (run / "results.json").read_bytes() == before and not (tmp_path / "r.html").exists()
