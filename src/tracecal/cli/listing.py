"""`tracecal tasks`, `tracecal estimators`, `tracecal passes`: tables of what is registered."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rich.table import Table

from tracecal.cli.common import out_console, shown, user_errors

__all__ = ["list_estimators", "list_passes", "list_tasks"]


def _table(title: str, columns: Sequence[str], rows: Iterable[Sequence[str]]) -> Table:
    """A table of plain-text cells (markup escaped), every column folding long cells."""
    table = Table(title=title)
    for c in columns:
        table.add_column(c, overflow="fold")
    for row in rows:
        table.add_row(*[shown(cell) for cell in row])
    return table


@user_errors
def list_tasks() -> None:
    """List the built-in tasks with their default answer length and labelling rule."""
    from tracecal.tasks import TASK_NAMES, get_task

    rows = [(name, str(get_task(name).max_new_tokens), get_task(name).label_rule) for name in TASK_NAMES]
    out_console.print(_table("tasks", ("task", "max new tokens", "label rule"), rows))


@user_errors
def list_estimators() -> None:
    """List the registered estimators: family, the stats each reads, the passes those come from, the formula."""
    from tracecal.estimators import REGISTRY, passes_of

    rows = [
        (name, cls.family, ",".join(sorted(cls.stats)), ",".join(sorted(passes_of(cls))), cls.description)
        for name, cls in REGISTRY.items()
    ]
    out_console.print(_table("estimators", ("name", "family", "reads", "passes", "description"), rows))


@user_errors
def list_passes() -> None:
    """List the registered passes: the stats each computes, what it depends on, its relative cost."""
    from tracecal.passes import PASSES

    rows = [
        (
            name,
            ", ".join(f"{k} ({v})" for k, v in cls.provides.items()),
            ",".join(cls.depends) or "-",
            cls.resource or "-",
            f"{cls.cost_weight:g}",
            cls.description,
        )
        for name, cls in PASSES.items()
    ]
    columns = ("name", "computes", "depends on", "needs", "cost / answer", "description")
    out_console.print(_table("passes (stat calculators)", columns, rows))
