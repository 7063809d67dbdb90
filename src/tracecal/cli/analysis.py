"""`tracecal ablate RUN_DIR` (the TRACE paper's ablations on a stored run, scoring only), `tracecal cross-model
LABEL=RUN ...` (the paper's Table 2 from scored runs' results files) and `tracecal frontier RUN_DIR` (AUROC and
Brier of each estimator against its compute per answer)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Annotated

import typer

from tracecal._validation import Interval, check_params
from tracecal.cli.common import check_option, note, out_console, safe_text, split_names, user_errors
from tracecal.errors import ValidationError

__all__ = ["ablate_command", "cross_model_command", "frontier_command"]

GROUPS = ("ladder", "operators", "features", "shuffle", "sweep", "transfer", "fusion")


@user_errors
def ablate_command(
    run_dir: Annotated[Path, typer.Argument(help="a scored run directory (tracecal evaluate --run-dir)")],
    tasks: Annotated[
        str | None, typer.Option("--tasks", help="comma-separated tasks of the run (default: all)")
    ] = None,
    groups: Annotated[str | None, typer.Option("--groups", help=f"some of {','.join(GROUPS)} (default: all)")] = None,
    seeds: Annotated[int, typer.Option("--seeds", help="calibration/evaluation splits")] = 20,
    cal_frac: Annotated[float, typer.Option("--cal-frac", help="calibration share of each task")] = 0.35,
    seed: Annotated[int, typer.Option("--seed", help="seed of the within-trace shuffle")] = 0,
) -> None:
    """Score the TRACE ablations on a run's stored traces; writes RUN/ablations.json and RUN/ablations.md."""
    from tracecal.analysis.ablation_tables import ablation_markdown
    from tracecal.analysis.ablations import ABLATION_CONSTRAINTS, run_ablations
    from tracecal.evaluation.runstore import RunStore

    options = {"n_seeds": "--seeds", "cal_frac": "--cal-frac", "seed": "--seed"}
    check_params({"n_seeds": seeds, "cal_frac": cal_frac, "seed": seed}, ABLATION_CONSTRAINTS, rename=options.get)
    chosen = split_names(groups) or None
    unknown = [g for g in chosen or () if g not in GROUPS]
    if unknown:
        raise ValidationError(f"unknown ablation group {unknown[0]!r}; groups: {', '.join(GROUPS)}")
    doc = run_ablations(run_dir, split_names(tasks) or None, seeds, cal_frac, seed, chosen)
    store = RunStore(run_dir)
    out_console.print(safe_text(ablation_markdown(doc), newlines=True), markup=False, highlight=False)
    note(f"wrote {store.artefact_path('ablations.json')} and {store.artefact_path('ablations.md')}")


def _write_text(name: str, text: str) -> None:
    Path(name).write_text(text, encoding="utf-8")


def _runs(specs: list[str]) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for spec in specs:
        label, sep, path = spec.partition("=")
        if not sep or not label or not path:
            raise ValidationError(f"expected LABEL=RUN_DIR (e.g. Qwen2.5-1.5B=runs/qwen), got {spec!r}")
        if label in out:  # a second run of one label would replace the first in the table
            raise ValidationError(f"label {label!r} is given twice ({label}={out[label]}, {spec}): one label per model")
        out[label] = Path(path)
    return out


@user_errors
def cross_model_command(
    runs: Annotated[list[str], typer.Argument(help="LABEL=RUN_DIR (or LABEL=results.json), one per model")],
    out: Annotated[Path | None, typer.Option("--out", help="also write the Markdown (and .json beside it)")] = None,
    min_correct: Annotated[
        int, typer.Option("--min-correct", help="only settings whose task has at least this many correct answers")
    ] = 0,
) -> None:
    """The cross-model table (TRACE paper, Table 2) from scored runs: per model and pooled, best baseline against
    TRACE, TRACE+ and trace_plus_cv, with paired intervals and settings won."""
    import json

    from tracecal._outputs import atomic_write, check_output
    from tracecal.analysis.cross_model import cross_model_markdown, cross_model_table, read_results
    from tracecal.evaluation.result_json import plain_json

    paths = _runs(runs)
    inputs = [(f"results of {label}", p, "results.json") for label, p in paths.items()]
    for path in (out, None if out is None else out.with_suffix(".json")):
        if path is not None:
            check_output(path, inputs, "--out")  # before anything is read (a run's results.json beside --out)
    check_option("--min-correct", min_correct, Interval(int, 0, None))
    doc = cross_model_table({label: read_results(p) for label, p in paths.items()}, min_correct=min_correct)
    md = cross_model_markdown(doc)
    out_console.print(safe_text(md, newlines=True), markup=False, highlight=False)
    if out is not None:
        text = json.dumps(plain_json(doc), indent=1, default=str, allow_nan=False)  # standard JSON: NaN as null
        for path, body in ((out, md), (out.with_suffix(".json"), text)):
            atomic_write(path, functools.partial(_write_text, text=body), inputs, "--out")
        note(f"wrote {out} and {out.with_suffix('.json')}")


@user_errors
def frontier_command(
    run_dir: Annotated[Path, typer.Argument(help="a scored run directory (tracecal evaluate --run-dir)")],
    tasks: Annotated[
        str | None, typer.Option("--tasks", help="comma-separated tasks (default: those with a samples pass)")
    ] = None,
    estimators: Annotated[
        str | None, typer.Option("--estimators", help="comma-separated estimators (default: the run's)")
    ] = None,
    timings: Annotated[
        Path | None,
        typer.Option("--timings", help="a timings.json for the passes whose shards were copied from another run"),
    ] = None,
    n_boot: Annotated[int | None, typer.Option("--n-boot", help="bootstrap resamples (default: the run's)")] = None,
) -> None:
    """The cost–quality frontier: AUROC and Brier of each estimator (paired intervals against TRACE+) against its
    decode tokens, forward passes and CPU-seconds per answer; writes RUN/frontier.json, frontier.md and
    frontier_<task>.svg (scored on the questions every pass holds: a run stopped part-way is read as far as it got)."""
    from tracecal._inputs import read_json
    from tracecal.report.frontier import run_frontier

    if n_boot is not None:
        check_option("--n-boot", n_boot, Interval(int, 0, None))
    extra = None
    if timings is not None:
        extra = read_json(timings, "--timings")
        if not isinstance(extra, dict) or not all(isinstance(v, int | float) for v in extra.values()):
            raise ValidationError(f"--timings {timings}: expected a run's timings.json ({{stage: seconds}})")
    names = split_names(estimators) or None
    run_frontier(run_dir, split_names(tasks) or None, estimators=names, timings=extra, n_boot=n_boot)
    out_console.print(safe_text((run_dir / "frontier.md").read_text(), newlines=True), markup=False, highlight=False)
    note(f"wrote {run_dir / 'frontier.json'}, {run_dir / 'frontier.md'} and frontier_<task>.svg")
