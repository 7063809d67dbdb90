"""`tracecal generate`, `tracecal score` and `tracecal fit-calibrator`: record traces, score them, fit TRACE+.

Each wraps library calls: `tracecal.backends.load_model` and ``generate``, `tracecal.traces.io` to read and
write traces, `tracecal.signals.operators.trace_confidence`, `tracecal.calibrators.traceplus.TracePlus`, and the
input-file readers of `tracecal.tasks.files`.
"""

from __future__ import annotations

import csv as csvmod
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.table import Table

from tracecal._inputs import UserFileNotFoundError, shown_path
from tracecal._validation import Interval
from tracecal.cli.common import (
    FOREIGN,
    DataDirOpt,
    DtypeOpt,
    ModelOpt,
    ThreadsOpt,
    check_option,
    check_provenance,
    check_runtime_options,
    console,
    fail,
    fmt_num,
    out_console,
    progress_bar,
    refuse_input_as_output,
    shown,
    user_errors,
)
from tracecal.errors import ValidationError

__all__ = ["fit_calibrator", "generate", "out_path", "score"]

#: The suffix suggested for each kind of output file when a folder is given instead.
SUFFIX = {"traces": ".parquet", "CSV": ".csv", "calibrator": ".json", "JSONL": ".jsonl"}


def out_path(path: Path, what: str, inputs: Iterable[tuple[Any, ...]] = (), option: str = "--out") -> Path:
    """A file path to write ``what`` to: not a folder, none of the command's ``inputs`` (`refuse_input_as_output`,
    through links), no file on its way; its missing folders are made when it is written (`atomic_write`), so a
    command refused later leaves none behind."""
    if path.is_dir():
        example = path / ("out" + SUFFIX.get(what, ""))
        raise ValidationError(f"{path} is a folder: give a file path for the {what} (e.g. {example})")
    refuse_input_as_output(path, option, inputs)
    return path


def _prompts_and_model(
    task: str | None, prompts: Path | None, model: str | None, limit: int | None, load: dict[str, Any], data_dir: Any
) -> tuple[Any, list[Any], list[str], tuple[str, ...], int | None]:
    """The loaded model (``load``: the `load_model` keywords: batch size, dtype, threads), the prompts with their
    ids, the stop strings and the task's default answer length (None for a prompts file), from ``--prompts`` or
    ``--task`` (the task's prompts are made for the model)."""
    from tracecal.backends import load_model
    from tracecal.tasks.files import check_unique_ids, read_prompt_file

    if prompts is not None:
        plist, ids = read_prompt_file(prompts)
        with console.status("loading model…"):
            lm = load_model(model, **load)
        return lm, plist[:limit], ids[:limit], (), None
    from tracecal.tasks import get_task

    tk = get_task(task or "")
    examples = tk.load(limit=limit, data_dir=data_dir)
    check_unique_ids([ex.id for ex in examples], f"task {task}")
    with console.status("loading model…"):
        lm = load_model(model, **load)
    plist = [tk.prompt(ex, chat=lm.chat) for ex in examples]
    return lm, plist, [ex.id for ex in examples], tuple(tk.stop_strings(lm.chat)), tk.max_new_tokens


LabelsOutOpt = Annotated[
    Path | None,
    typer.Option(
        "--labels-out",
        help="with --task: the labels CSV to write, id,label (0/1) as fit-calibrator --labels reads it "
        "(docs/formats.md); default: OUT with the suffix .labels.csv",
    ),
]


@user_errors
def generate(
    out: Annotated[Path, typer.Option("--out", "-o", help="traces Parquet file to write")],
    task: Annotated[
        str | None,
        typer.Option("--task", "-t", help="a task name (see `tracecal tasks`) or task file (docs/formats.md)"),
    ] = None,
    prompts: Annotated[Path | None, typer.Option("--prompts", "-p", help="JSONL of prompts (docs/formats.md)")] = None,
    model: ModelOpt = None,
    limit: Annotated[int | None, typer.Option(help="first N rows of the task")] = None,
    max_new_tokens: Annotated[int | None, typer.Option(help="≥ 1; default: the task's, else 32")] = None,
    batch_size: Annotated[int, typer.Option(help="prompts per batch")] = 16,
    top_logprobs: Annotated[int, typer.Option(help="keep top-k alternatives per step")] = 0,
    jsonl: Annotated[Path | None, typer.Option(help="also export the traces as JSONL")] = None,
    data_dir: DataDirOpt = None,
    labels_out: LabelsOutOpt = None,
    dtype: DtypeOpt = "auto",
    threads: ThreadsOpt = None,
) -> None:
    """Generate answers and record their traces (one decoding pass each) → Parquet; with --task, also each answer's
    label (correct or not under the task's labeller) → a labels CSV for fit-calibrator."""
    from tracecal.traces.io import export_jsonl, save_traces

    if (task is None) == (prompts is None):
        fail("give exactly one of --task or --prompts")
    for name, value, lowest in (
        ("--limit", limit, 1),
        ("--max-new-tokens", max_new_tokens, 1),
        ("--batch-size", batch_size, 1),
        ("--top-logprobs", top_logprobs, 0),
    ):
        check_option(name, value, Interval(int, lowest, None))  # 0 is refused, never read as "the default"
    check_runtime_options(dtype, threads)
    inputs = [("prompts file", prompts), ("task file", task), ("model file", model)]
    labels_out = _outputs(inputs, out, jsonl, task, labels_out)
    load = {"batch_size": batch_size, "dtype": dtype, "threads": threads or "auto"}
    lm, plist, ids, stop, task_tokens = _prompts_and_model(task, prompts, model, limit, load, data_dir)
    budget = max_new_tokens if max_new_tokens is not None else task_tokens if task_tokens is not None else 32
    with progress_bar() as pb:
        job = pb.add_task("generating", total=len(plist))
        traces = lm.generate(
            plist,
            max_new_tokens=budget,
            ids=ids,
            stop_strings=stop,
            top_logprobs=top_logprobs,
            progress=lambda n: pb.advance(job, n),
        )
    labels = None if task is None else _label(task, limit, data_dir, traces)
    save_traces(traces, out, inputs)  # the inputs checked again at the write (`atomic_write`)
    if jsonl is not None:
        export_jsonl(traces, jsonl, [*inputs, ("--out file", out)])
    n_tok = sum(t.length for t in traces)
    console.print(f"wrote {len(traces)} traces ({n_tok} answer tokens) to [bold]{shown(out)}[/]")
    if labels is not None and labels_out is not None:
        _write_labels(labels_out, traces, labels, out, [*inputs, ("--out file", out), ("--jsonl file", jsonl)])


def _outputs(inputs: list[Any], out: Path, jsonl: Path | None, task: str | None, labels: Path | None) -> Path | None:
    """Check ``generate``'s output paths before anything runs (none an input, no two the same file); return
    where the labels go (`_labels_path`)."""
    out_path(out, "traces", inputs)
    if jsonl is not None:
        out_path(jsonl, "JSONL", [*inputs, ("--out file", out)], option="--jsonl")
        if jsonl.resolve() == out.resolve():
            fail(f"--jsonl {jsonl} and --out {out} are the same file: give two paths")
    return _labels_path(task, out, labels, [*inputs, ("--out file", out), ("--jsonl file", jsonl)])


def _labels_path(task: str | None, out: Path, labels_out: Path | None, inputs: list[Any]) -> Path | None:
    """Where ``generate`` writes the labels: ``--labels-out``, else (with ``--task``) OUT with the suffix
    ``.labels.csv``; None without a task (a prompts file has no gold answers). Checked before anything runs."""
    if task is None:
        if labels_out is not None:
            fail("--labels-out needs --task: a prompts file has no gold answers to label the answers against")
        return None
    path = labels_out if labels_out is not None else out.with_suffix(".labels.csv")
    out_path(path, "CSV", inputs, option="--labels-out")
    for other, option in ((out, "--out"), *((p, "--jsonl") for what, p in inputs if what == "--jsonl file" and p)):
        if path.resolve() == Path(other).resolve():
            fail(f"--labels-out {path} and {option} {other} are the same file: give two paths")
    return path


def _label(task: str, limit: int | None, data_dir: Any, traces: list[Any]) -> list[int]:
    """Each answer's label under the task's own labeller (``task.label``, as ``evaluate`` labels): 1 correct,
    0 not; the task's examples read again (the same rows ``generate`` prompted with, checked by id). The label
    is also kept in each trace's ``meta["correct"]``."""
    from tracecal.tasks import get_task

    tk = get_task(task)
    examples = tk.load(limit=limit, data_dir=data_dir)
    if [ex.id for ex in examples] != [t.id for t in traces]:
        raise ValidationError(f"task {task}: its rows changed while the answers were generated; run again")
    labels = [tk.label(ex, t.text) for ex, t in zip(examples, traces, strict=True)]
    for t, z in zip(traces, labels, strict=True):
        t.meta["correct"] = z
    return labels


def _write_labels(path: Path, traces: list[Any], labels: list[int], out: Path, inputs: list[Any]) -> None:
    """The labels CSV (`tracecal.tasks.files.write_labels`) and where it went, with the fit-calibrator command."""
    from tracecal.tasks.files import write_labels

    write_labels(path, [t.id for t in traces], labels, inputs, "--labels-out")
    where, traces_file = shown(path), shown(out)
    console.print(
        f"wrote the labels ({sum(labels)} of {len(labels)} answers correct) to [bold]{where}[/]; fit a calibrator: "
        f"tracecal fit-calibrator {traces_file} --labels {where} --out cal.json",
        highlight=False,
    )


def _score_rows(traces: list[Any], conf: Any, prob: Any) -> list[dict[str, Any]]:
    """One row per trace: id, tokens, stop reason, c_TRACE, (TRACE+ probability,) answer text, its risky spans (JSON,
    `tracecal.signals.spans.spans_json`: character offsets into the answer)."""
    from tracecal.signals.spans import spans_json

    rows = []
    for i, (t, spans) in enumerate(zip(traces, spans_json(traces), strict=True)):
        r: dict[str, Any] = {"id": t.id, "tokens": t.length, "stop": t.stop_reason, "c_trace": float(conf[i])}
        if prob is not None:
            r["p_trace_plus"] = float(prob[i])
        r["answer"] = t.text
        r["spans"] = spans
        rows.append(r)
    return rows


def _score_table(title: str, rows: list[dict[str, Any]], show: int) -> Table:
    """The first ``show`` rows as a table (numbers with 4 decimals, a missing one as `MISSING`; the spans' JSON is
    left to ``--csv``)."""
    table = Table(title=title)
    cols = [c for c in (rows[0].keys() if rows else ["id"]) if c != "spans"]
    for col in cols:
        table.add_column(col, overflow="fold", max_width=60 if col == "answer" else None)
    for r in rows[:show]:
        table.add_row(*[fmt_num(r[c], 4) if isinstance(r[c], float) else shown(r[c]) for c in cols])
    return table


def _write_csv(path: Path, rows: list[dict[str, Any]], inputs: Iterable[tuple[str, Path | None]]) -> None:
    """The rows as CSV, written with `tracecal._outputs.atomic_write` (never a half-written file, never one of
    ``inputs``)."""
    from tracecal._outputs import atomic_write

    def write(name: str) -> None:
        with open(name, "w", newline="", encoding="utf-8") as f:
            w = csvmod.DictWriter(f, fieldnames=list(rows[0].keys()) if rows else ["id"])
            w.writeheader()
            w.writerows(rows)

    atomic_write(path, write, [(what, given, "*.parquet") for what, given in inputs], "--csv")


@user_errors
def score(
    traces_path: Annotated[Path, typer.Argument(help="traces Parquet file (or folder of shards; docs/formats.md)")],
    calibrator: Annotated[
        Path | None, typer.Option("--calibrator", "-c", help="calibrator JSON (any kind: TRACE+, its variants, Platt…)")
    ] = None,
    csv: Annotated[Path | None, typer.Option("--csv", help="write all rows as CSV here")] = None,
    show: Annotated[int, typer.Option(help="rows to print in the table")] = 20,
    allow_foreign_calibrator: Annotated[
        bool, typer.Option(FOREIGN, help="use a --calibrator made on another model's or dtype's answers (warns)")
    ] = False,
) -> None:
    """Score traces: TRACE confidence and, with a calibrator of any kind, its calibrated probability (a calibrator made
    on another model's or dtype's answers than the traces record is refused)."""
    from tracecal.calibrators import load_calibrator
    from tracecal.signals.operators import trace_confidence
    from tracecal.traces.io import load_traces
    from tracecal.traces.provenance import traces_provenance

    inputs = [("traces", traces_path), ("calibrator", calibrator)]
    if csv is not None:
        out_path(csv, "CSV", inputs, option="--csv")
    traces = load_traces(traces_path)
    cal = load_calibrator(calibrator) if calibrator else None
    if calibrator is not None and cal is not None:
        made = traces_provenance(traces, None)
        check_provenance(calibrator, cal.provenance, (made["model"], made["dtype"]), allow_foreign_calibrator, "score")
    conf = trace_confidence(traces)
    prob = cal.confidence(traces, score=conf) if cal is not None else None  # a score reader reads c_TRACE
    rows = _score_rows(traces, conf, prob)
    if csv is not None:
        _write_csv(csv, rows, inputs)
        console.print(f"wrote {len(rows)} rows to [bold]{shown(csv)}[/]")
    kind = traces[0].entropy_kind if traces else "-"
    title = f"{shown(traces_path)} — {len(traces)} answers (entropy: {kind})"
    out_console.print(_score_table(title, rows, show))
    n_empty = sum(t.is_empty for t in traces)
    if n_empty:
        console.print(f"[yellow]{n_empty} zero-token answers have no trace: their confidence is NaN[/]")


@user_errors
def fit_calibrator(
    traces_path: Annotated[
        Path, typer.Argument(help="traces of the calibration split (Parquet), or an evaluated run directory")
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="calibrator JSON to write")],
    labels: Annotated[
        Path | None, typer.Option(help="traces: CSV or JSONL with columns id,label (0/1) (docs/formats.md)")
    ] = None,
    estimator: Annotated[
        str | None,
        typer.Option(help="a run: the estimator to serve (default: the run's verdict); traces: trace_plus"),
    ] = None,
    tasks: Annotated[str | None, typer.Option(help="a run: tasks to fit on (default: its ranked tasks)")] = None,
    C: Annotated[float, typer.Option("--C", help="traces: inverse L2 strength of TRACE+")] = 1.0,
) -> None:
    """Fit a calibrator and save it as JSON: TRACE+ on labelled traces (each trace id once, one label each), or
    the calibrator of an evaluated run's estimator on every labelled answer of its ranked tasks."""
    inputs: list[tuple[str, Path | str | None]] = [("traces", traces_path), ("labels file", labels)]
    out_path(out, "calibrator", inputs)
    if not traces_path.exists():
        raise UserFileNotFoundError(
            f"traces file not found: {shown_path(traces_path)} (and no run directory of that name)"
        )
    if traces_path.is_dir():
        if labels is not None:
            raise ValidationError(f"--labels: {traces_path} is a run directory, which holds its labels: drop --labels")
        _fit_from_run(traces_path, out, estimator, tasks, inputs)
        return
    if labels is None or estimator not in (None, "trace_plus") or tasks is not None:
        raise ValidationError(
            "a traces file needs --labels (and takes neither --estimator nor --tasks); a run directory needs none"
        )
    from tracecal.calibrators.traceplus import TracePlus
    from tracecal.tasks.files import join_labels, read_labels
    from tracecal.traces.io import load_traces
    from tracecal.traces.provenance import traces_provenance

    traces = load_traces(traces_path)
    y = np.array(join_labels([t.id for t in traces], read_labels(labels), str(labels)))
    cal = TracePlus(C=C).fit(traces, y)
    cal.provenance = traces_provenance(traces, traces_path)  # the model and dtype its answers record
    cal.save(out, inputs)
    console.print(f"fitted TRACE+ on {len(traces)} answers (base rate {y.mean():.3f}); wrote [bold]{shown(out)}[/]")


def _fit_from_run(run: Path, out: Path, estimator: str | None, tasks: str | None, inputs: list[Any]) -> None:
    """`fit-calibrator RUN`: `tracecal.analysis.deploy.fit_from_run` (the verdict's estimator by default)."""
    from tracecal.analysis.deploy import fit_from_run

    if estimator is None:
        from tracecal.report.verdict import run_verdict

        estimator = run_verdict(run).recommended or "trace_plus_cv"
    names = [t for t in (tasks or "").split(",") if t.strip()] or None
    cal = fit_from_run(run, estimator, names)
    cal.save(out, inputs)
    console.print(f"fitted the calibrator of {estimator} on {shown(run)}; wrote [bold]{shown(out)}[/]")
