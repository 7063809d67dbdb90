"""The `tracecal` command line (typer + rich). Each command wraps library calls and nothing more."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

app = typer.Typer(
    help="tracecal: single-pass decoding-trace confidence (TRACE / TRACE+), calibration benchmarks and SECL.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
console = Console(stderr=True)
out_console = Console()

ModelOpt = Annotated[
    str | None,
    typer.Option("--model", "-m", help="HF model id, local dir or .gguf path (default: offline SmolLM2-135M)"),
]
DataDirOpt = Annotated[
    Path | None,
    typer.Option("--data-dir", help="evaluation data folder (default: $TRACECAL_DATA or ../shared/data)"),
]


def progress_bar() -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )


def fail(msg: str, code: int = 2) -> None:
    console.print(f"[bold red]error:[/] {msg}", soft_wrap=True, markup=True)
    raise typer.Exit(code)


def _read_prompt_file(path: Path) -> tuple[list[Any], list[str]]:
    """A JSONL of prompts: each line a JSON string, or an object with `prompt` (or `messages`) and `id`."""
    prompts: list[Any] = []
    ids: list[str] = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({e.msg})") from e
            if isinstance(obj, str):
                prompts.append(obj)
                ids.append(str(len(ids)))
            elif isinstance(obj, dict) and (obj.get("prompt") or obj.get("messages")):
                prompts.append(obj.get("messages") or obj["prompt"])
                ids.append(str(obj.get("id", len(ids))))
            else:
                raise ValueError(f"{path}:{lineno}: expected a string or an object with a non-empty 'prompt'")
    if not prompts:
        raise ValueError(f"{path}: no prompts found")
    return prompts, ids


@app.command()
def generate(
    out: Annotated[Path, typer.Option("--out", "-o", help="traces Parquet file to write")],
    task: Annotated[str | None, typer.Option("--task", "-t", help="a task name (see `tracecal tasks`)")] = None,
    prompts: Annotated[Path | None, typer.Option("--prompts", "-p", help="JSONL of prompts")] = None,
    model: ModelOpt = None,
    limit: Annotated[int | None, typer.Option(help="first N rows of the task")] = None,
    max_new_tokens: Annotated[int | None, typer.Option(help="default: the task's, else 32")] = None,
    batch_size: Annotated[int, typer.Option(help="prompts per batch")] = 16,
    top_logprobs: Annotated[int, typer.Option(help="keep top-k alternatives per step")] = 0,
    jsonl: Annotated[Path | None, typer.Option(help="also export the traces as JSONL")] = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Generate answers and record their traces (one decoding pass each) → Parquet."""
    if (task is None) == (prompts is None):
        fail("give exactly one of --task or --prompts")
    stop: tuple[str, ...] = ()
    try:
        import tracecal

        if prompts is not None:
            plist, ids = _read_prompt_file(prompts)
            mnt = max_new_tokens or 32
            with console.status("loading model…"):
                lm = tracecal.load_model(model, batch_size=batch_size)
        else:
            from tracecal.tasks import get_task

            tk = get_task(task)  # type: ignore[arg-type]
            examples = tk.load(limit=limit, data_dir=data_dir)
            with console.status("loading model…"):
                lm = tracecal.load_model(model, batch_size=batch_size)
            plist = [tk.prompt(ex, chat=lm.chat) for ex in examples]
            ids = [ex.id for ex in examples]
            stop = tuple(tk.stop_strings(lm.chat))
            mnt = max_new_tokens or tk.max_new_tokens
        if limit is not None and prompts is not None:
            plist, ids = plist[:limit], ids[:limit]
        with progress_bar() as pb:
            job = pb.add_task("generating", total=len(plist))
            traces = lm.generate(
                plist,
                max_new_tokens=mnt,
                ids=ids,
                stop_strings=stop,
                top_logprobs=top_logprobs,
                progress=lambda n: pb.advance(job, n),
            )
        tracecal.save_traces(traces, out)
        if jsonl is not None:
            tracecal.export_jsonl(traces, jsonl)
    except (ValueError, FileNotFoundError, RuntimeError) as e:
        fail(str(e))
    n_tok = sum(t.length for t in traces)
    console.print(f"wrote {len(traces)} traces ({n_tok} answer tokens) to [bold]{out}[/]")


@app.command()
def score(
    traces_path: Annotated[Path, typer.Argument(help="traces Parquet file (or folder of shards)")],
    calibrator: Annotated[Path | None, typer.Option("--calibrator", "-c", help="TRACE+ calibrator JSON")] = None,
    csv: Annotated[Path | None, typer.Option("--csv", help="write all rows as CSV here")] = None,
    show: Annotated[int, typer.Option(help="rows to print in the table")] = 20,
) -> None:
    """Score traces: TRACE confidence and, with a calibrator, the TRACE+ probability."""
    import tracecal
    from tracecal.trace import TraceFileError
    from tracecal.traceplus import CalibratorFileError

    try:
        traces = tracecal.load_traces(traces_path)
        conf = tracecal.trace_confidence(traces)
        prob = tracecal.TracePlus.load(calibrator).predict_proba(traces) if calibrator else None
    except (TraceFileError, CalibratorFileError, FileNotFoundError, ValueError) as e:
        fail(str(e))
    rows = []
    for i, t in enumerate(traces):
        r = {"id": t.id, "tokens": t.length, "stop": t.stop_reason, "c_trace": float(conf[i])}
        if prob is not None:
            r["p_trace_plus"] = float(prob[i])
        r["answer"] = t.text
        rows.append(r)
    n_empty = sum(t.is_empty for t in traces)
    if csv is not None:
        import csv as csvmod

        with open(csv, "w", newline="", encoding="utf-8") as f:
            w = csvmod.DictWriter(f, fieldnames=list(rows[0].keys()) if rows else ["id"])
            w.writeheader()
            w.writerows(rows)
        console.print(f"wrote {len(rows)} rows to [bold]{csv}[/]")
    table = Table(title=f"{traces_path} — {len(traces)} answers (entropy: {traces[0].entropy_kind if traces else '-'})")
    for col in rows[0].keys() if rows else ["id"]:
        table.add_column(col, overflow="fold", max_width=60 if col == "answer" else None)
    for r in rows[:show]:
        table.add_row(*[f"{v:.4f}" if isinstance(v, float) else str(v) for v in r.values()])
    out_console.print(table)
    if n_empty:
        console.print(f"[yellow]{n_empty} zero-token answers have no trace: their confidence is NaN[/]")


@app.command("fit-calibrator")
def fit_calibrator(
    traces_path: Annotated[Path, typer.Argument(help="traces of the calibration split")],
    labels: Annotated[Path, typer.Option(help="CSV or JSONL with columns id,label (0/1)")],
    out: Annotated[Path, typer.Option("--out", "-o", help="calibrator JSON to write")],
    C: Annotated[float, typer.Option("--C", help="inverse L2 strength")] = 1.0,
) -> None:
    """Fit a TRACE+ calibrator on labelled traces and save it as JSON."""
    import tracecal

    try:
        traces = tracecal.load_traces(traces_path)
        lab = _read_labels(labels)
        missing = [t.id for t in traces if t.id not in lab]
        if missing:
            raise ValueError(f"{len(missing)} traces have no label in {labels} (first: {missing[:3]})")
        y = np.array([lab[t.id] for t in traces])
        cal = tracecal.TracePlus(C=C).fit(traces, y)
        cal.save(out)
    except (ValueError, FileNotFoundError) as e:
        fail(str(e))
    console.print(f"fitted TRACE+ on {len(traces)} answers (base rate {y.mean():.3f}); wrote [bold]{out}[/]")


def _read_labels(path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    if path.suffix == ".csv":
        import csv as csvmod

        with open(path, encoding="utf-8") as f:
            for lineno, row in enumerate(csvmod.DictReader(f), 2):
                if row.get("label") not in ("0", "1"):
                    raise ValueError(f"{path}:{lineno}: label must be 0 or 1, got {row.get('label')!r}")
                out[str(row["id"])] = int(row["label"])
    else:
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if line.strip():
                    obj = json.loads(line)
                    if obj.get("label") not in (0, 1, True, False):
                        raise ValueError(f"{path}:{lineno}: label must be 0 or 1")
                    out[str(obj["id"])] = int(obj["label"])
    return out


def _fmt(mean: float, sd: float) -> str:
    if mean != mean:  # NaN
        return "n/a"
    return f"{mean:.3f}" if sd != sd else f"{mean:.3f}±{sd:.3f}"


def print_results(res: Any, metrics: list[str]) -> None:
    """Terminal tables: estimators × tasks (+ average), one table per metric, best per column in bold."""
    tasks = list(res.metrics)
    info = res.tasks
    head = Table(title="tasks", show_lines=False)
    for c in ("task", "n", "accuracy", "correct (cal/eval per split)", "zero-token", "hit length limit", "label rule"):
        head.add_column(c, overflow="fold", max_width=60 if c == "label rule" else None)
    for t, d in info.items():
        head.add_row(t, str(d["n"]), f"{d['accuracy']:.3f}", f"{d['n_correct_cal']}/{d['n_correct_eval']}",
                     str(d["zero_token_answers"]), str(d["stopped_at_length"]), d["label_rule"])  # fmt: skip
    out_console.print(head)
    lower_better = {"brier", "ece", "aece", "aurc", "risk@10", "risk@50", "risk@90"}
    for metric in metrics:
        table = Table(title=f"{metric.upper()} ({'lower' if metric in lower_better else 'higher'} is better; "
                            f"mean±sd over {res.config['n_seeds']} splits)")  # fmt: skip
        table.add_column("estimator", style="bold")
        for t in tasks:
            table.add_column(t, justify="right")
        best: dict[str, float] = {}
        for t in tasks:
            vals = [res.metrics[t][e][metric]["mean"] for e in res.estimators if e in res.metrics[t]]
            vals = [v for v in vals if v == v]
            if vals:
                best[t] = min(vals) if metric in lower_better else max(vals)
        for e in res.estimators:
            cells = []
            for t in tasks:
                m = res.metrics[t][e][metric]
                s = _fmt(m["mean"], m["sd"])
                cells.append(f"[bold green]{s}[/]" if best.get(t) == m["mean"] else s)
            table.add_row(e, *cells)
        out_console.print(table)
    if res.substitutes:
        console.print("[dim]substitutes: " + "; ".join(res.substitutes) + "[/]")


@app.command()
def evaluate(
    tasks: Annotated[str, typer.Option(help="comma-separated task names")] = "triviaqa,svamp,truthfulqa,mlqa",
    limit: Annotated[int | None, typer.Option(help="first N questions per task")] = 1000,
    run_dir: Annotated[Path, typer.Option("--run-dir", "-r", help="run directory (resumable)")] = Path("runs/main"),
    model: ModelOpt = None,
    estimators: Annotated[str, typer.Option(help="'all', names, or groups trace-only,beam,semantic,extra")] = "all",
    seeds: Annotated[int, typer.Option(help="random calibration/evaluation splits")] = 20,
    cal_frac: Annotated[float, typer.Option(help="share of each task used for calibration")] = 0.35,
    calibrator: Annotated[str, typer.Option(help="platt | isotonic | temperature")] = "platt",
    batch_size: Annotated[int, typer.Option(help="prompts per generation batch")] = 16,
    max_new_tokens: Annotated[int | None, typer.Option(help="default: each task's own")] = None,
    shard_size: Annotated[int, typer.Option(help="questions per resumable shard")] = 64,
    on_error: Annotated[str, typer.Option(help="malformed data rows: skip (warn) | raise")] = "skip",
    metrics: Annotated[str, typer.Option(help="metrics to print")] = "auroc,brier,ece",
    report: Annotated[bool, typer.Option("--report/--no-report", help="write RUN/report.html")] = True,
    threads: Annotated[int | None, typer.Option(help="torch CPU threads (default: torch's choice)")] = None,
    dtype: Annotated[
        str, typer.Option(help="model weights: auto (fp32 on CPU, bf16 on GPU) | float32 | bfloat16 | float16")
    ] = "auto",
    data_dir: DataDirOpt = None,
    score_only: Annotated[
        bool, typer.Option("--score-only", help="compute nothing; score what RUN holds (incomplete passes: not run)")
    ] = False,
) -> None:
    """Generate once (resumable), score every estimator under the paper's protocol, print the comparison."""
    if threads:
        import torch

        torch.set_num_threads(threads)
    from tracecal.evaluate import ConfigMismatchError, EvalConfig
    from tracecal.evaluate import evaluate as run_eval

    cfg = EvalConfig(
        tasks=[t.strip() for t in tasks.split(",") if t.strip()],
        limit=limit,
        model=model,
        dtype=dtype,
        estimators=estimators,  # type: ignore[arg-type]
        n_seeds=seeds,
        cal_frac=cal_frac,
        calibrator=calibrator,
        batch_size=batch_size,
        max_new_tokens=max_new_tokens,
        shard_size=shard_size,
        on_error=on_error,
        data_dir=str(data_dir) if data_dir else None,
    )
    t0 = __import__("time").perf_counter()
    try:
        with progress_bar() as pb:
            jobs: dict[str, Any] = {}

            def prog(desc: str, done: int, total: int) -> None:
                if desc not in jobs:
                    jobs[desc] = pb.add_task(desc, total=total)
                pb.update(jobs[desc], completed=done, total=total)

            res = run_eval(run_dir, cfg, progress=prog, score_only=score_only)
    except (ValueError, FileNotFoundError, RuntimeError, ConfigMismatchError) as e:
        fail(str(e))
    assert res is not None
    print_results(res, [m.strip() for m in metrics.split(",") if m.strip()])
    console.print(f"results: [bold]{run_dir}/results.json[/], {run_dir}/results.csv "
                  f"({__import__('time').perf_counter() - t0:.0f} s this invocation)")  # fmt: skip
    if report:
        try:
            from tracecal.report import write_report
        except ImportError:
            console.print("[yellow]report module not available[/]")
        else:
            path = write_report(run_dir)
            console.print(f"report: [bold]{path}[/]")


@app.command("tasks")
def list_tasks() -> None:
    """List the built-in tasks with their default answer length and labelling rule."""
    from tracecal.tasks import TASK_NAMES, get_task

    table = Table(title="tasks")
    for c in ("task", "max new tokens", "label rule"):
        table.add_column(c, overflow="fold")
    for name in TASK_NAMES:
        t = get_task(name)
        table.add_row(name, str(t.max_new_tokens), t.label_rule)
    out_console.print(table)


@app.command("estimators")
def list_estimators() -> None:
    """List the registered estimators, their family and what each needs."""
    from tracecal.estimators import REGISTRY

    table = Table(title="estimators")
    for c in ("name", "family", "needs", "description"):
        table.add_column(c, overflow="fold")
    for name, cls in REGISTRY.items():
        table.add_row(name, cls.family, ",".join(sorted(cls.needs)), cls.description)
    out_console.print(table)


@app.command()
def serve(
    model: ModelOpt = None,
    calibrator: Annotated[Path | None, typer.Option("--calibrator", "-c", help="TRACE+ calibrator JSON")] = None,
    host: Annotated[str, typer.Option(help="bind address")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port")] = 8000,
    no_model: Annotated[bool, typer.Option("--no-model", help="serve /score only (no /generate)")] = False,
) -> None:
    """Run the confidence service (FastAPI): /generate, /score, /health."""
    import uvicorn

    import tracecal
    from tracecal.serve import create_app

    try:
        cal = tracecal.TracePlus.load(calibrator) if calibrator else None
    except (ValueError, FileNotFoundError) as e:
        fail(str(e))
    lm = None if no_model else tracecal.load_model(model)
    uvicorn.run(create_app(lm, cal), host=host, port=port)


def _register_subcommands() -> None:
    from tracecal.report.cli import report_command
    from tracecal.secl.cli import secl_command

    app.command("report")(report_command)
    app.command("secl")(secl_command)


_register_subcommands()


def main() -> None:  # pragma: no cover
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
