"""`tracecal tasks`, `tracecal estimators`, `tracecal passes` (tracecal.cli.listing)."""

from __future__ import annotations

from typer.testing import CliRunner

from tracecal.cli.app import app
from tracecal.cli.listing import _table

runner = CliRunner()


def test_estimators_and_passes_are_listed() -> None:
    r = runner.invoke(app, ["estimators"])
    assert r.exit_code == 0 and "tokensar_rel" in r.output and "semantic" in r.output
    r = runner.invoke(app, ["passes"])
    assert r.exit_code == 0, r.output
    for name in ("traces", "extra", "semantic", "beam"):
        assert name in r.output


def test_tasks_are_listed_with_their_answer_length() -> None:
    from tracecal.tasks import TASK_NAMES

    r = runner.invoke(app, ["tasks"])
    assert r.exit_code == 0, r.output
    assert all(name in r.output for name in TASK_NAMES)


def test_cells_are_shown_as_written() -> None:
    """A description with brackets (a formula such as E[x]) is text, not rich markup."""
    table = _table("t", ("name", "description"), [("a", "E[bold]x[/bold]")])
    assert list(table.columns[1].cells) == ["E\\[bold]x\\[/bold]"]
