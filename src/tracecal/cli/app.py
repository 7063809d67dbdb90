"""The `tracecal` command line (typer + rich). Each command wraps library calls and nothing more."""

from __future__ import annotations

import json
import os
import sys
import time
from contextlib import nullcontext
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
out_console = Console(width=None if sys.stdout.isatty() else 160)  # a log file gets whole tables

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


def out_path(path: Path, what: str) -> Path:
    """A file path to write ``what`` to: not a folder; its parent folder is created."""
    if path.is_dir():
        example = path / ("out" + what_suffix(what))
        raise ValueError(f"{path} is a folder: give a file path for the {what} (e.g. {example})")
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def what_suffix(what: str) -> str:
    return {"traces": ".parquet", "CSV": ".csv", "calibrator": ".json", "JSONL": ".jsonl"}.get(what, "")


def jsonl_lines(path: Path) -> Any:
    """``(line number, parsed JSON)`` for each non-blank line of a JSONL file; a clear error on bad JSON."""
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({e.msg})") from e


def _read_prompt_file(path: Path) -> tuple[list[Any], list[str]]:
    """A JSONL of prompts: each line a JSON string, or an object with `prompt` (or `messages`) and `id`."""
    prompts: list[Any] = []
    ids: list[str] = []
    for lineno, obj in jsonl_lines(path):
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
        from tracecal.backends.hf import load_model
        from tracecal.traces.trace import export_jsonl, save_traces

        out_path(out, "traces")
        if jsonl is not None:
            out_path(jsonl, "JSONL")
        if limit is not None and limit < 1:
            raise ValueError(f"--limit must be ≥ 1, got {limit}")
        if prompts is not None:
            plist, ids = _read_prompt_file(prompts)
            mnt = max_new_tokens or 32
            with console.status("loading model…"):
                lm = load_model(model, batch_size=batch_size)
        else:
            from tracecal.tasks import get_task

            tk = get_task(task)  # type: ignore[arg-type]
            examples = tk.load(limit=limit, data_dir=data_dir)
            with console.status("loading model…"):
                lm = load_model(model, batch_size=batch_size)
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
        save_traces(traces, out)
        if jsonl is not None:
            export_jsonl(traces, jsonl)
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
    from tracecal.calibrators.traceplus import TracePlus
    from tracecal.signals.operators import trace_confidence
    from tracecal.traces.trace import load_traces

    try:
        if csv is not None:
            out_path(csv, "CSV")
        traces = load_traces(traces_path)
        conf = trace_confidence(traces)
        prob = TracePlus.load(calibrator).predict_proba(traces) if calibrator else None
    except (FileNotFoundError, ValueError) as e:
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
    from tracecal.calibrators.traceplus import TracePlus
    from tracecal.traces.trace import load_traces

    try:
        out_path(out, "calibrator")
        traces = load_traces(traces_path)
        lab = _read_labels(labels)
        missing = [t.id for t in traces if t.id not in lab]
        if missing:
            raise ValueError(f"{len(missing)} traces have no label in {labels} (first: {missing[:3]})")
        y = np.array([lab[t.id] for t in traces])
        cal = TracePlus(C=C).fit(traces, y)
        cal.save(out)
    except (ValueError, FileNotFoundError) as e:
        fail(str(e))
    console.print(f"fitted TRACE+ on {len(traces)} answers (base rate {y.mean():.3f}); wrote [bold]{out}[/]")


def _label(value: Any, where: str) -> int:
    if isinstance(value, bool) or value in (0, 1, "0", "1"):
        return int(value)
    raise ValueError(f"{where}: label must be 0 or 1, got {value!r}")


def _read_labels(path: Path) -> dict[str, int]:
    """Labels by answer id from a CSV (header with ``id`` and ``label``) or a JSONL of ``{"id", "label"}`` objects."""
    if not path.is_file():
        raise FileNotFoundError(f"labels file not found: {path}")
    out: dict[str, int] = {}
    if path.suffix.lower() == ".csv":
        import csv as csvmod

        with open(path, encoding="utf-8", newline="") as f:
            reader = csvmod.DictReader(f)
            missing = [c for c in ("id", "label") if c not in (reader.fieldnames or [])]
            if missing:
                raise ValueError(
                    f"{path}: the CSV needs the columns id and label; missing: {', '.join(missing)} "
                    f"(found: {', '.join(reader.fieldnames or []) or 'no header'})"
                )
            for lineno, row in enumerate(reader, 2):
                out[str(row["id"])] = _label(row["label"], f"{path}:{lineno}")
    else:
        for lineno, obj in jsonl_lines(path):
            if not isinstance(obj, dict) or "id" not in obj or "label" not in obj:
                raise ValueError(f'{path}:{lineno}: each line must be an object {{"id": ..., "label": 0 or 1}}')
            out[str(obj["id"])] = _label(obj["label"], f"{path}:{lineno}")
    if not out:
        raise ValueError(f"{path}: no labels found")
    return out


DEFAULT_TASKS = "triviaqa,svamp,truthfulqa,mlqa"


class RunView:
    """One progress view of a whole evaluation: the run (all passes × tasks × shards, weighted by each pass's
    cost per answer, with the overall ETA) and the stage being computed now. Without a terminal (a log file)
    it prints a line per stage and per 10 % of the run instead of redrawing bars."""

    def __init__(self, pb: Progress) -> None:
        self.pb = pb
        self.live = pb.console.is_terminal
        self.run = pb.add_task("whole run", total=None, start=False)
        self.stage = pb.add_task("", total=None, visible=False)
        self.t0 = time.monotonic()
        self.decile = -1
        self.stage_name = ""

    def _log(self, msg: str) -> None:
        self.pb.console.print(f"[{time.monotonic() - self.t0:6.0f} s] {msg}", highlight=False)

    def __call__(self, desc: str, done: int, total: int) -> None:
        if desc == "run":
            if not self.pb.tasks[self.run].started:
                self.pb.start_task(self.run)
                self.pb.update(self.run, completed=done, total=max(total, 1))  # already on disk: no speed sample
            self.pb.update(self.run, completed=done, total=max(total, 1))
            decile = int(10 * done / max(total, 1))
            if not self.live and decile != self.decile:
                self.decile = decile
                eta = self.pb.tasks[self.run].time_remaining
                self._log(f"whole run {100 * done / max(total, 1):3.0f} %" + (f", ETA {eta:.0f} s" if eta else ""))
            return
        self.pb.update(self.stage, description=desc, completed=done, total=max(total, 1), visible=True)
        if not self.live and desc != self.stage_name:
            self.stage_name = desc
            self._log(desc)


NBootOpt = Annotated[int, typer.Option("--n-boot", help="bootstrap resamples of the paired intervals (0: none)")]
LevelOpt = Annotated[float, typer.Option(help="confidence level of the bootstrap intervals")]
SelAlphaOpt = Annotated[float, typer.Option(help="selective answering: error rate allowed among answered")]
SelDeltaOpt = Annotated[float, typer.Option(help="selective answering: allowed probability of exceeding it")]
SelHoldoutOpt = Annotated[
    float,
    typer.Option(
        help="share of the calibration split a fitted estimator's threshold is chosen on (it is refitted on the rest)"
    ),
]
STORED_WITH_SCORE_ONLY = (
    "tasks",
    "limit",
    "model",
    "dtype",
    "max_new_tokens",
    "shard_size",
    "data_dir",
    "on_error",
    "n_boot",
    "level",
    "sel_alpha",
    "sel_delta",
    "sel_holdout",
)


def _evaluate_config(run_dir: Path | None = None, **kw: Any) -> Any:
    """The EvalConfig of the command's options, validated (a clear error before anything is written).

    ``run_dir`` (``--score-only``): the settings that say *what* the run holds (tasks, limit, model, dtype, ...)
    and the statistics settings (--n-boot, --level, --sel-*) default to the run's own, read from its config.json;
    an option given on the command line still wins.
    """
    import click
    from click.core import ParameterSource

    from tracecal.evaluation.run import EvalConfig
    from tracecal.evaluation.runstore import RunStore

    kw["tasks"] = [t.strip() for t in kw["tasks"].split(",") if t.strip()]
    if run_dir is not None:
        stored = RunStore(run_dir).config()["config"]
        ctx = click.get_current_context(silent=True)
        for key in STORED_WITH_SCORE_ONLY:
            if key in stored and (ctx is None or ctx.get_parameter_source(key) == ParameterSource.DEFAULT):
                kw[key] = stored[key]
    return EvalConfig(**kw).validate()


@app.command()
def evaluate(
    tasks: Annotated[str, typer.Option(help="comma-separated task names or data files")] = DEFAULT_TASKS,
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
    threads: Annotated[int | None, typer.Option(help="torch CPU threads (default: torch's; --ray: per actor)")] = None,
    dtype: Annotated[
        str, typer.Option(help="model weights: auto (fp32 on CPU, bf16 on GPU) | float32 | bfloat16 | float16")
    ] = "auto",
    data_dir: DataDirOpt = None,
    score_only: Annotated[
        bool, typer.Option("--score-only", help="compute nothing; score what RUN holds (incomplete passes: not run)")
    ] = False,
    no_score: Annotated[
        bool, typer.Option("--no-score", help="compute the missing shards only (a helper worker); do not score")
    ] = False,
    ray: Annotated[bool, typer.Option("--ray", help="compute the shards on Ray actors (docs/scaling.md)")] = False,
    ray_address: Annotated[str | None, typer.Option(help="Ray cluster: auto | HOST:PORT (default: local)")] = None,
    ray_actors: Annotated[int | None, typer.Option(help="Ray model actors (default: CPUs or GPUs)")] = None,
    ray_gpus: Annotated[float, typer.Option(help="GPUs per Ray actor (1: an actor per GPU)")] = 0.0,
    n_boot: NBootOpt = 1000,
    level: LevelOpt = 0.95,
    sel_alpha: SelAlphaOpt = 0.1,
    sel_delta: SelDeltaOpt = 0.1,
    sel_holdout: SelHoldoutOpt = 0.5,
) -> None:
    """Generate once (resumable), score every estimator under the paper's protocol, print the comparison."""
    from tracecal.evaluation.results import METRICS
    from tracecal.evaluation.run import evaluate as run_eval
    from tracecal.evaluation.runstore import RunStore

    show, executor = [m.strip() for m in metrics.split(",") if m.strip()], None
    try:
        bad = [m for m in show if m not in METRICS]
        if bad:
            raise ValueError(f"unknown metric {bad[0]!r}; known: {', '.join(METRICS)}")
        if threads is not None and threads < 1:
            raise ValueError(f"--threads must be ≥ 1, got {threads}")
        cfg = _evaluate_config(
            run_dir if score_only else None,
            tasks=tasks,
            limit=limit,
            model=model,
            dtype=dtype,
            estimators=estimators,
            n_seeds=seeds,
            cal_frac=cal_frac,
            calibrator=calibrator,
            batch_size=batch_size,
            max_new_tokens=max_new_tokens,
            shard_size=shard_size,
            on_error=on_error,
            data_dir=str(data_dir) if data_dir else None,
            n_boot=n_boot,
            level=level,
            sel_alpha=sel_alpha,
            sel_delta=sel_delta,
            sel_holdout=sel_holdout,
        )
        RunStore(run_dir)  # a file where the run directory should be: a clear error now
        if ray or ray_address:  # --threads: each actor's CPUs and torch threads
            from tracecal.evaluation.ray import ray_executor

            executor = ray_executor(ray_address, ray_actors, float(threads or 1), ray_gpus)
    except (ValueError, FileNotFoundError) as e:
        fail(str(e))
    if threads and not (ray or ray_address):
        import torch

        torch.set_num_threads(threads)
    t0 = time.perf_counter()
    try:
        with progress_bar() as pb, executor or nullcontext():  # Ray: its actors (and a local Ray) stop after
            res = run_eval(run_dir, cfg, RunView(pb), no_score, score_only=score_only, executor=executor)
    except (ValueError, FileNotFoundError, RuntimeError) as e:
        fail(str(e))
    _print_evaluation(res, run_dir, show, report, t0)


def _print_evaluation(res: Any, run_dir: Path, show: list[str], report: bool, t0: float) -> None:
    """The end of `evaluate`: the result tables (or a --no-score note when ``res`` is None) and the report."""
    from tracecal.evaluation.results import results_tables

    if res is None:
        secs = time.perf_counter() - t0
        console.print(f"every shard of {run_dir} is computed ({secs:.0f} s); not scored (--no-score)")
        return
    for table in results_tables(res, show):
        out_console.print(table)
    if res.substitutes:
        console.print("[dim]substitutes: " + "; ".join(res.substitutes) + "[/]")
    console.print(
        f"results: [bold]{run_dir}/results.json[/], results.csv, results.md "
        f"({time.perf_counter() - t0:.0f} s this invocation)"
    )
    if report:
        from tracecal.report import write_report

        console.print(f"report: [bold]{write_report(run_dir)}[/]")


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
    """List the registered estimators: family, the stats each reads, the passes those come from, the formula."""
    from tracecal.estimators import REGISTRY, passes_of

    table = Table(title="estimators")
    for c in ("name", "family", "reads", "passes", "description"):
        table.add_column(c, overflow="fold")
    for name, cls in REGISTRY.items():
        passes = ",".join(sorted(passes_of(cls)))
        table.add_row(name, cls.family, ",".join(sorted(cls.stats)), passes, cls.description)
    out_console.print(table)


@app.command("passes")
def list_passes() -> None:
    """List the registered passes: the stats each computes, what it depends on, its relative cost."""
    from tracecal.passes import PASSES

    table = Table(title="passes (stat calculators)")
    for c in ("name", "computes", "depends on", "needs", "cost / answer", "description"):
        table.add_column(c, overflow="fold")
    for name, cls in PASSES.items():
        stats = ", ".join(f"{k} ({v})" for k, v in cls.provides.items())
        table.add_row(
            name, stats, ",".join(cls.depends) or "-", cls.resource or "-", f"{cls.cost_weight:g}", cls.description
        )
    out_console.print(table)


def _register_subcommands() -> None:
    from tracecal.cli.report import report_command
    from tracecal.cli.secl import secl_command
    from tracecal.cli.serve import serve_command
    from tracecal.cli.stats import learning_curve_command, selective_command

    app.command("report")(report_command)
    app.command("secl")(secl_command)
    app.command("serve")(serve_command)
    app.command("selective")(selective_command)
    app.command("learning-curve")(learning_curve_command)


_register_subcommands()


def main() -> None:  # pragma: no cover
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
