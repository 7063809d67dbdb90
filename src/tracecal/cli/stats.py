"""`tracecal selective RUN_DIR` and `tracecal learning-curve RUN_DIR`: the command functions, registered by the
main app as ``app.command("selective")(selective_command)`` and ``app.command("learning-curve")(...)``.

Both read a scored run through its `RunStore` with the labels it was scored with (no data files needed) and write
their result into it (``selective.json``; ``learning_curve.json`` / ``.csv`` / ``_<task>.svg``). Bad input (not
a scored run, an unknown task or estimator, a size too large for a task, α or δ outside (0, 1)) ends the command
with exit status 2 and one line saying what is wrong, never a traceback.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from tracecal._validation import SEED
from tracecal.cli.common import check_option, console, fmt_num, out_console, shown, split_names, user_errors
from tracecal.errors import ValidationError
from tracecal.stats.splits import SPLITS

__all__ = ["selective_command", "learning_curve_command"]

RunArg = Annotated[Path, typer.Argument(help="a scored run directory (tracecal evaluate --run-dir)")]
TasksOpt = Annotated[str | None, typer.Option("--tasks", help="comma-separated tasks of the run (default: all)")]


def _names(spec: str | None) -> list[str] | None:
    """The names of a comma-separated option; None (the run's own) when it is not given or empty."""
    return split_names(spec) or None


def _ranked_by_default(run_dir: Path) -> list[str] | None:
    """The run's ranked tasks (those with enough correct and wrong answers), saying which are left out; None (every
    task) when the run ranks none or predates the rule."""
    from tracecal.evaluation.ranking import ranked_tasks
    from tracecal.evaluation.runstore import RunStore

    try:
        info = RunStore(run_dir).read_results().get("tasks", {})
    except (OSError, ValueError):  # not a scored run: the command's own check says so
        return None
    ranked = ranked_tasks(info)
    apart = [t for t in info if t not in ranked]
    if not ranked or not apart:
        return None
    console.print(f"[dim]not ranked, left out (--tasks includes them): {shown(', '.join(apart))}[/]")
    return ranked


SELECTIVE_COLUMNS = (
    "coverage, realised risk: share answered and error rate among them on the evaluation splits, each split's "
    "threshold chosen on its calibration split; splits with risk > α: should stay near δ or below; deploy: t: the "
    "threshold to use, on the estimator's raw score (c_TRACE for trace, the fitted probability for trace_plus; "
    "chosen on all of the task's answers, a fitted estimator's on the half its fit did not see; '—': none "
    "certified); coverage (all): the share of all the task's answers at or above it"
)
"""The caption of `tracecal selective`'s tables: what each column means."""


def _selective_table(task: str, per: dict[str, Any], alpha: float, delta: float, n_splits: int) -> Table:
    """Per estimator: mean coverage and realised risk over the splits, the share of splits with risk > α, and
    the deployed threshold with its coverage on all answers."""
    first: dict[str, Any] = next(iter(per.values()), {})
    base = first.get("base_rate", math.nan)
    table = Table(
        title=f"{shown(task)}: answer iff confidence ≥ t, risk ≤ {alpha:g} with probability ≥ {1 - delta:g} "
        f"(base error rate {fmt_num(1 - base)}; mean over {n_splits} splits)",
        caption=SELECTIVE_COLUMNS,
    )
    for c in ("estimator", "coverage", "realised risk", "splits with risk > α", "deploy: t", "coverage (all)"):
        table.add_column(c, justify="left" if c == "estimator" else "right")
    for est, v in per.items():
        dep = v["deploy"] or {}
        table.add_row(
            shown(est),
            fmt_num(v["coverage"]["mean"]),
            fmt_num(v["risk"]["mean"]),
            fmt_num(v["violation_share"], 2),
            fmt_num(dep.get("threshold"), 4),
            fmt_num(dep.get("coverage")),
        )
    return table


@user_errors
def selective_command(
    run_dir: RunArg,
    alpha: Annotated[float, typer.Option(help="error rate allowed among answered questions")] = 0.1,
    delta: Annotated[float, typer.Option(help="allowed probability that the error rate exceeds alpha")] = 0.1,
    estimators: Annotated[str | None, typer.Option(help="comma-separated estimators (default: the run's)")] = None,
    tasks: TasksOpt = None,
    splits: Annotated[int | None, typer.Option(help="calibration / evaluation splits (default: the run's)")] = None,
) -> None:
    """Selective answering with a guarantee: per estimator the threshold with risk ≤ alpha w.p. ≥ 1 − delta
    (Learn-then-Test on each calibration split), its coverage and realised risk on the evaluation splits."""
    from tracecal.analysis.selective import run_selective
    from tracecal.evaluation.runstore import RunStore

    t0 = time.perf_counter()
    check_option("--splits", splits, SPLITS)
    chosen = _names(tasks) or _ranked_by_default(run_dir)
    doc = run_selective(run_dir, alpha, delta, _names(estimators), chosen, splits)
    for task, per in doc["tasks"].items():
        out_console.print(_selective_table(task, per, alpha, delta, doc["n_splits"]))
    path = RunStore(run_dir).artefact_path("selective.json")
    console.print(f"selective: [bold]{shown(path)}[/] ({time.perf_counter() - t0:.1f} s)", highlight=False)


MARK = {"better": "▲", "worse": "▼", "n.s.": "", "n/a": ""}


def _focus_table(task: str, focus: str, lc: dict[str, Any]) -> Table:
    """``focus`` − each other method per size: AUROC and Brier differences with their paired intervals."""
    level = f"{lc['level']:.0%}"
    table = Table(
        title=f"{shown(task)}: {shown(focus)} − other, AUROC / Brier [{level} paired interval] (▲ better, ▼ worse)"
    )
    table.add_column("against")
    for s in lc["sizes"]:
        table.add_column(f"{s}", justify="right")
    pts = lc["estimators"][focus]
    for other in lc["estimators"]:
        if other == focus or not all(other in p.get("vs", {}) for p in pts):
            continue
        cells = []
        for p in pts:
            a, b = p["vs"][other]["auroc"], p["vs"][other]["brier"]
            cells.append(
                f"{a['diff']:+.3f} [{fmt_num(a['lo'])}, {fmt_num(a['hi'])}]{MARK[a['verdict']]}\n"
                f"{b['diff']:+.4f} [{fmt_num(b['lo'], 4)}, {fmt_num(b['hi'], 4)}]{MARK[b['verdict']]}"
            )
        table.add_row(shown(other), *cells)
    return table


def _curve_table(task: str, lc: dict[str, Any]) -> Table:
    """Per estimator and calibration-set size: mean AUROC [bootstrap interval] and mean Brier over the splits."""
    table = Table(
        title=f"{shown(task)}: {lc['n']} answers, {lc['n_correct']} correct — AUROC / Brier, mean over "
        f"{lc['n_splits']} splits [{lc['level']:.0%} bootstrap interval]"
    )
    table.add_column("estimator")
    for s in lc["sizes"]:
        table.add_column(f"{s}", justify="right")
    for est, pts in lc["estimators"].items():
        table.add_row(
            shown(est),
            *[
                f"{fmt_num(p['auroc']['mean'])} [{fmt_num(p['auroc']['lo'])}, {fmt_num(p['auroc']['hi'])}]\n"
                f"{fmt_num(p['brier']['mean'], 4)}"
                for p in pts
            ],
        )
    return table


def _sizes(sizes: str) -> list[int]:
    try:
        return [int(s) for s in sizes.split(",") if s.strip()]
    except ValueError:
        raise ValidationError(f"--sizes must be comma-separated whole numbers, got {sizes!r}") from None


@user_errors
def learning_curve_command(
    run_dir: RunArg,
    sizes: Annotated[str, typer.Option(help="comma-separated calibration-set sizes")] = "100,200,400,800,1600",
    splits: Annotated[int, typer.Option(help="random calibration sets per size")] = 20,
    estimators: Annotated[str, typer.Option(help="comma-separated estimators")] = "trace,trace_plus,trace_plus_prior",
    tasks: TasksOpt = None,
    n_boot: Annotated[int, typer.Option("--n-boot", help="bootstrap resamples of the questions")] = 1000,
    level: Annotated[float, typer.Option(help="level of the bootstrap intervals")] = 0.95,
    seed: Annotated[int, typer.Option(help="random seed")] = 0,
    focus: Annotated[
        str | None, typer.Option(help="comma-separated methods compared (paired bootstrap) with every other one")
    ] = None,
) -> None:
    """Learning curves: AUROC and Brier of each method against the number of calibration answers (mean over
    splits ± bootstrap interval) → RUN/learning_curve.json, .csv and an SVG figure per task; with --focus, each
    focus method's paired differences against the others at every size (▲ / ▼ significantly better / worse)."""
    from tracecal.evaluation.runstore import RunStore
    from tracecal.report.learning_curve import run_learning_curve

    check_option("--seed", seed, SEED)
    t0 = time.perf_counter()
    kw = {"sizes": _sizes(sizes), "n_splits": splits, "n_boot": n_boot, "level": level, "seed": seed}
    doc = run_learning_curve(run_dir, _names(tasks), _names(estimators), focus=split_names(focus), **kw)
    for task in _names(tasks) or list(doc["tasks"]):
        lc = doc["tasks"][task]
        out_console.print(_curve_table(task, lc))
        for f in split_names(focus):
            out_console.print(_focus_table(task, f, lc))
    console.print(
        f"learning curves: [bold]{shown(RunStore(run_dir).artefact_path('learning_curve.json'))}[/], .csv, "
        f"learning_curve_<task>.svg ({time.perf_counter() - t0:.1f} s)",
        highlight=False,
    )
