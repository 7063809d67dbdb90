"""`tracecal evaluate`: generate once (resumable), score every estimator under the paper's protocol, print the
comparison and write the report. The work is `tracecal.evaluation.run.evaluate`; this module turns the options
into a validated `EvalConfig` (`evaluate_config`) and shows the progress (`RunView`).
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.progress import Progress

from tracecal._validation import Interval
from tracecal.cli.common import (
    DataDirOpt,
    ModelOpt,
    check_option,
    console,
    out_console,
    progress_bar,
    split_names,
    user_errors,
)
from tracecal.errors import ValidationError

__all__ = ["DEFAULT_TASKS", "RunView", "STORED_WITH_SCORE_ONLY", "evaluate", "evaluate_config"]

DEFAULT_TASKS = "triviaqa,svamp,truthfulqa,mlqa"

#: Settings that ``--score-only`` takes from the run's config.json unless given on the command line.
STORED_WITH_SCORE_ONLY = (
    "tasks",
    "limit",
    "model",
    "dtype",
    "backend",
    "embedder_dtype",
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
#: Options passed to `EvalConfig` under their own name: the stored ones (``--data-dir`` goes as a string) and the
#: scoring choices (``--seeds`` is its ``n_seeds``).
CONFIG_OPTIONS = tuple(k for k in STORED_WITH_SCORE_ONLY if k != "data_dir") + (
    "estimators",
    "cal_frac",
    "calibrator",
    "batch_size",
    "num_samples",
    "sample_temperature",
    "sample_seed",
)

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
DtypeOpt = Annotated[
    str, typer.Option(help="model weights: auto (fp32 on CPU, bf16 on GPU) | float32 | bfloat16 | float16")
]
EmbedderDtypeOpt = Annotated[
    str,
    typer.Option(
        help="TokenSAR/MARS sentence embedder: auto (the run's own; a new run: bfloat16 on a CPU with bf16 matrix "
        "units, else float32) | float32 | bfloat16 (bf16 matrix products, float32 weights)"
    ),
]
BackendOpt = Annotated[
    str,
    typer.Option(
        help="auto (HF; a .gguf dequantised into an HF checkpoint; a URL: its server) | hf | llamacpp (a .gguf or "
        "named model in llama.cpp, in-process; no beam pass)"
    ),
]
ScoreOnlyOpt = Annotated[
    bool, typer.Option("--score-only", help="compute nothing; score what RUN holds (incomplete passes: not run)")
]
NoScoreOpt = Annotated[
    bool, typer.Option("--no-score", help="compute the missing shards only (a helper worker); do not score")
]


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
        self.pb.console.print(f"[{time.monotonic() - self.t0:6.0f} s] {msg}", highlight=False, markup=False)

    def _run_progress(self, done: int, total: int) -> None:
        if not self.pb.tasks[self.run].started:
            self.pb.start_task(self.run)
            self.pb.update(self.run, completed=done, total=max(total, 1))  # already on disk: no speed sample
        self.pb.update(self.run, completed=done, total=max(total, 1))
        decile = int(10 * done / max(total, 1))
        if not self.live and decile != self.decile:
            self.decile = decile
            eta = self.pb.tasks[self.run].time_remaining
            self._log(f"whole run {100 * done / max(total, 1):3.0f} %" + (f", ETA {eta:.0f} s" if eta else ""))

    def __call__(self, desc: str, done: int, total: int) -> None:
        if desc == "run":
            self._run_progress(done, total)
            return
        self.pb.update(self.stage, description=escape(desc), completed=done, total=max(total, 1), visible=True)
        if not self.live and desc != self.stage_name:
            self.stage_name = desc
            self._log(desc)


def evaluate_config(run_dir: Path | None = None, **kw: Any) -> Any:
    """The EvalConfig of the command's options, validated (a clear error before anything is written).

    ``run_dir`` (``--score-only``): the settings that say *what* the run holds (tasks, limit, model, dtype, ...)
    and the statistics settings (--n-boot, --level, --sel-*) default to the run's own, read from its config.json;
    an option given on the command line still wins.
    """
    import click
    from click.core import ParameterSource

    from tracecal.evaluation.config import EvalConfig
    from tracecal.evaluation.runstore import RunStore

    kw["tasks"] = split_names(kw["tasks"])
    if run_dir is not None:
        stored = RunStore(run_dir).config()["config"]
        ctx = click.get_current_context(silent=True)
        for key in STORED_WITH_SCORE_ONLY:
            if key in stored and (ctx is None or ctx.get_parameter_source(key) == ParameterSource.DEFAULT):
                kw[key] = stored[key]
    return EvalConfig(**kw).validate()


@user_errors
def evaluate(
    tasks: Annotated[str, typer.Option(help="comma-separated task names or data files")] = DEFAULT_TASKS,
    limit: Annotated[int | None, typer.Option(help="first N questions per task")] = 1000,
    run_dir: Annotated[Path, typer.Option("--run-dir", "-r", help="run directory (resumable)")] = Path("runs/main"),
    model: ModelOpt = None,
    estimators: Annotated[
        str, typer.Option(help="'all', names, or groups trace-only,beam,semantic,extra,sampling (opt-in: K samples)")
    ] = "all",
    seeds: Annotated[int, typer.Option(help="random calibration/evaluation splits")] = 20,
    cal_frac: Annotated[float, typer.Option(help="share of each task used for calibration")] = 0.35,
    calibrator: Annotated[str, typer.Option(help="platt | isotonic | temperature")] = "platt",
    batch_size: Annotated[int, typer.Option(help="prompts per generation batch")] = 16,
    max_new_tokens: Annotated[int | None, typer.Option(help="default: each task's own")] = None,
    shard_size: Annotated[int, typer.Option(help="questions per resumable shard")] = 64,
    num_samples: Annotated[int, typer.Option(help="sampling estimators: answers sampled per question (K)")] = 10,
    sample_temperature: Annotated[float, typer.Option(help="sampling estimators: their temperature T")] = 1.0,
    sample_seed: Annotated[int, typer.Option(help="sampling estimators: seed (with each question's id)")] = 0,
    on_error: Annotated[str, typer.Option(help="malformed data rows: skip (warn) | raise")] = "skip",
    metrics: Annotated[str, typer.Option(help="metrics to print")] = "auroc,brier,ece",
    report: Annotated[bool, typer.Option("--report/--no-report", help="write RUN/report.html")] = True,
    threads: Annotated[
        int | None, typer.Option(help="torch (and llama.cpp) CPU threads (default: torch's; --ray: per actor)")
    ] = None,
    dtype: DtypeOpt = "auto",
    backend: BackendOpt = "auto",
    embedder_dtype: EmbedderDtypeOpt = "auto",
    data_dir: DataDirOpt = None,
    score_only: ScoreOnlyOpt = False,
    no_score: NoScoreOpt = False,
    ray: Annotated[
        bool,
        typer.Option("--ray", help="compute the shards on Ray actors; --score-only: score on Ray (docs/scaling.md)"),
    ] = False,
    ray_address: Annotated[str | None, typer.Option(help="Ray cluster: auto | HOST:PORT (default: local)")] = None,
    ray_actors: Annotated[
        int | None, typer.Option(help="Ray model actors; --score-only: blocks scored at once (default: CPUs or GPUs)")
    ] = None,
    ray_gpus: Annotated[float, typer.Option(help="GPUs per Ray actor (1: an actor per GPU)")] = 0.0,
    n_boot: NBootOpt = 1000,
    level: LevelOpt = 0.95,
    sel_alpha: SelAlphaOpt = 0.1,
    sel_delta: SelDeltaOpt = 0.1,
    sel_holdout: SelHoldoutOpt = 0.5,
) -> None:
    """Generate once (resumable), score every estimator under the paper's protocol, print the comparison."""
    run_evaluate(dict(locals()))


def _checked_config(o: dict[str, Any]) -> tuple[Any, list[str]]:
    """The validated `EvalConfig` of the options ``o`` and the metrics to show (refused before anything runs)."""
    from tracecal.evaluation.results import METRICS
    from tracecal.evaluation.runstore import RunStore

    show = split_names(o["metrics"])
    bad = [m for m in show if m not in METRICS]
    if bad:
        raise ValidationError(f"unknown metric {bad[0]!r}; known: {', '.join(METRICS)}")
    check_option("--threads", o["threads"], Interval(int, 1, None))
    kw = {k: o[k] for k in CONFIG_OPTIONS}
    kw |= {"n_seeds": o["seeds"], "data_dir": str(o["data_dir"]) if o["data_dir"] else None}
    cfg = evaluate_config(o["run_dir"] if o["score_only"] else None, **kw)
    RunStore(o["run_dir"])  # a file where the run directory should be: a clear error now
    return cfg, show


def run_evaluate(o: dict[str, Any]) -> None:
    """The `evaluate` command on its options ``o`` (by parameter name): check them, run, print the results."""
    from tracecal.evaluation.run import evaluate as run_eval

    cfg, show = _checked_config(o)
    threads, use_ray = o["threads"], bool(o["ray"] or o["ray_address"])
    executor = None
    if use_ray:  # --threads: each actor's CPUs and torch threads
        from tracecal.evaluation.ray import ray_executor

        executor = ray_executor(o["ray_address"], o["ray_actors"], float(threads or 1), o["ray_gpus"])
    if threads and not use_ray:
        import torch

        torch.set_num_threads(threads)
    t0 = time.perf_counter()
    with progress_bar() as pb, executor or nullcontext():  # Ray: its actors (and a local Ray) stop after
        res = run_eval(o["run_dir"], cfg, RunView(pb), o["no_score"], score_only=o["score_only"], executor=executor)
    _print_evaluation(res, o["run_dir"], show, o["report"], t0)


def _print_evaluation(res: Any, run_dir: Path, show: list[str], report: bool, t0: float) -> None:
    """The end of `evaluate`: the result tables (or a --no-score note when ``res`` is None) and the report."""
    from tracecal.evaluation.results import results_tables

    where = escape(str(run_dir))
    if res is None:
        secs = time.perf_counter() - t0
        console.print(f"every shard of {where} is computed ({secs:.0f} s); not scored (--no-score)")
        return
    from tracecal.report.selective import certified_tables

    for table in results_tables(res, show) + certified_tables(run_dir, list(res.estimators)):
        out_console.print(table)
    if res.substitutes:
        console.print("[dim]substitutes: " + escape("; ".join(res.substitutes)) + "[/]")
    why: dict[str, dict[str, None]] = {}  # reason → the estimators not run for it (on some task), in order
    for info in res.tasks.values():
        for est, reason in info.get("not_run_reasons", {}).items():
            why.setdefault(reason, {})[est] = None
    for reason, ests in why.items():
        console.print(f"[dim]not run: {escape(', '.join(ests))}: {escape(reason)}[/]")
    console.print(
        f"results: [bold]{where}/results.json[/], results.csv, results.md "
        f"({time.perf_counter() - t0:.0f} s this invocation)"
    )
    if report:
        from tracecal.report import write_report

        console.print(f"report: [bold]{escape(str(write_report(run_dir)))}[/]")
