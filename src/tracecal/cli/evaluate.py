"""`tracecal evaluate`: generate once (resumable), score every estimator under the paper's protocol, print the
comparison and write the report. The work is `tracecal.evaluation.run.evaluate`; this module turns the options
into a validated `EvalConfig` (`evaluate_config`) and shows the progress (`RunView`).
"""

from __future__ import annotations

import time
from collections.abc import Collection
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated, Any

import typer

from tracecal.backends.registry import IN_PROCESS, backend_names, get_backend
from tracecal.cli.common import (
    THREADS,
    DataDirOpt,
    DtypeOpt,
    ModelOpt,
    ThreadsOpt,
    check_option,
    console,
    given_options,
    out_console,
    progress_bar,
    shown,
    split_names,
    user_errors,
)
from tracecal.cli.progress import RunView
from tracecal.errors import ValidationError

__all__ = ["DEFAULT_TASKS", "STORED_WITH_SCORE_ONLY", "evaluate", "evaluate_config", "print_verdict"]

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
    "min_per_class",
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
        help="auto (HF; a .gguf dequantised into an HF checkpoint; a URL: its server) | "
        + " | ".join(f"{n} ({get_backend(n).help})" if get_backend(n).help else n for n in backend_names(IN_PROCESS))
    ),
]
ScoreOnlyOpt = Annotated[
    bool, typer.Option("--score-only", help="compute nothing; score what RUN holds (incomplete passes: not run)")
]
NoScoreOpt = Annotated[
    bool, typer.Option("--no-score", help="compute the missing shards only (a helper worker); do not score")
]


#: Stored settings an explicit option replaces under ``--score-only``: how the held answers are read and scored.
#: ``--tasks`` may name a subset of the run's tasks; every other stored setting says what the run holds, and an
#: explicit value that differs is refused (the run holds answers made with the stored one).
SCORED_AS_GIVEN = ("tasks", "data_dir", "on_error", "n_boot", "level", "sel_alpha", "sel_delta", "sel_holdout")


def evaluate_config(run_dir: Path | None = None, given: Collection[str] | None = None, **kw: Any) -> Any:
    """The EvalConfig of the command's options, validated (a clear error before anything is written).

    ``run_dir`` (``--score-only``): the settings that say *what* the run holds (tasks, limit, model, dtype, ...)
    and the statistics settings (--n-boot, --level, --sel-*) default to the run's own, read from its config.json
    (a bad value there is refused naming the file). ``given``: the options the user typed (by parameter name;
    None: none, as from Python): a given scoring setting (`SCORED_AS_GIVEN`) wins, a given setting of what the
    run holds must equal the stored one (or it is refused with both values named).
    """
    from tracecal.evaluation.config import EvalConfig

    kw["tasks"] = split_names(kw["tasks"])
    if run_dir is not None:
        kw = stored_settings(run_dir, kw, set(given or ()))
    return EvalConfig(**kw).validate()


def stored_settings(run_dir: Path, kw: dict[str, Any], given: set[str]) -> dict[str, Any]:
    """``kw`` with each `STORED_WITH_SCORE_ONLY` setting not in ``given`` taken from ``run_dir``'s config.json
    (checked against its constraint, the file named on a bad value); a given one checked by `_check_given`."""
    from tracecal.evaluation.config import ConfigError, cli_name, stored_setting
    from tracecal.evaluation.runstore import RunStore

    store = RunStore(run_dir)
    doc = store.config()
    stored, where = doc.get("config") or {}, store.artefact_path("config.json")
    out = dict(kw)
    for key in STORED_WITH_SCORE_ONLY:
        if key not in stored:
            continue
        if key in given:
            _check_given(key, kw[key], stored[key], doc.get("identity") or {}, where)
            continue
        try:
            out[key] = stored_setting(stored, key, run_dir)
        except ValidationError as e:
            raise ConfigError(
                f"{e} (--score-only uses the run's config.json where the option is not given: give "
                f"--{cli_name(key)}, or repair the file)"
            ) from None
    return out


def _check_given(key: str, value: Any, stored: Any, identity: dict[str, Any], where: Path) -> None:
    """Refuse (`ConfigError`, both values named) an option given with ``--score-only`` that would change what the
    run holds: ``--tasks`` beyond the stored tasks, or another value of a setting outside `SCORED_AS_GIVEN`
    (compared as resolved: ``--dtype auto`` against the dtype the run's identity records)."""
    from tracecal.evaluation.config import DEFAULT_MODEL_NAME, ConfigError, cli_name, resolve_dtype

    option = f"--{cli_name(key)}"
    hint = "--score-only scores what the run holds: leave the option out, or evaluate into a new --run-dir"
    if key == "tasks":
        extra = [t for t in value if t not in stored]
        if extra:
            raise ConfigError(f"{option} {','.join(value)}: {where} holds only {','.join(map(str, stored))}; {hint}")
        return
    if key in SCORED_AS_GIVEN or (key == "embedder_dtype" and value == "auto"):  # auto: the run's own
        return
    mine, theirs = value, stored
    if key == "model":
        mine, theirs = value or DEFAULT_MODEL_NAME, identity.get("model", stored or DEFAULT_MODEL_NAME)
    elif key == "dtype" and identity.get("dtype") is not None and value in ("auto", "float32", "bfloat16", "float16"):
        mine, theirs = resolve_dtype(value), identity["dtype"]
    if mine != theirs:
        raise ConfigError(f"{option} {value} conflicts with {key}={stored!r} in {where}; {hint}")


@user_errors
def evaluate(
    ctx: typer.Context,
    tasks: Annotated[
        str, typer.Option(help="comma-separated task names or task files (docs/formats.md)")
    ] = DEFAULT_TASKS,
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
    threads: ThreadsOpt = None,
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
    min_per_class: Annotated[
        int,
        typer.Option(
            help="a task ranks estimators (average, marks, verdict) only with this many correct and this many "
            "wrong answers"
        ),
    ] = 50,
) -> None:
    """Generate once (resumable), score every estimator under the paper's protocol, print the comparison.
    With --ray, --threads is each actor's CPUs and threads (default 1); a resumed run keeps its weights' dtype
    unless --dtype names another (refused)."""
    run_evaluate(dict(locals()))


def _checked_config(o: dict[str, Any]) -> tuple[Any, list[str]]:
    """The validated `EvalConfig` of the options ``o`` and the metrics to show (refused before anything runs)."""
    from tracecal.evaluation.results import METRICS
    from tracecal.evaluation.runstore import RunStore

    show = split_names(o["metrics"])
    bad = [m for m in show if m not in METRICS]
    if bad:
        raise ValidationError(f"unknown metric {bad[0]!r}; known: {', '.join(METRICS)}")
    check_option("--threads", o["threads"], THREADS)
    kw = {k: o[k] for k in CONFIG_OPTIONS}
    kw |= {"n_seeds": o["seeds"], "data_dir": str(o["data_dir"]) if o["data_dir"] else None}
    given = given_options(o.get("ctx"))  # typed on the command line: never replaced by config.json's value
    cfg = evaluate_config(o["run_dir"] if o["score_only"] else None, given, **kw)
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
    if not use_ray:  # every model and embedder of the run: --threads, else the rule (tracecal.backends.runtime)
        from tracecal.backends.runtime import apply_threads

        apply_threads(threads or "auto")
    t0 = time.perf_counter()
    with progress_bar() as pb, RunView(pb) as view, executor or nullcontext():  # Ray: its actors stop after
        res = run_eval(o["run_dir"], cfg, view, o["no_score"], score_only=o["score_only"], executor=executor)
    _print_evaluation(res, o["run_dir"], show, o["report"], t0)


def _print_evaluation(res: Any, run_dir: Path, show: list[str], report: bool, t0: float) -> None:
    """The end of `evaluate`: the result tables (or a --no-score note when ``res`` is None) and the report."""
    from tracecal.evaluation.results import results_tables

    where = shown(run_dir)
    if res is None:
        secs = time.perf_counter() - t0
        console.print(f"every shard of {where} is computed ({secs:.0f} s); not scored (--no-score)")
        return
    from tracecal.report.selective import certified_tables

    for table in results_tables(res, show) + certified_tables(run_dir, list(res.estimators)):
        out_console.print(table)
    if res.substitutes:
        console.print("[dim]substitutes: " + shown("; ".join(res.substitutes)) + "[/]")
    why: dict[str, dict[str, None]] = {}  # reason → the estimators not run for it (on some task), in order
    for info in res.tasks.values():
        for est, reason in info.get("not_run_reasons", {}).items():
            why.setdefault(reason, {})[est] = None
    for reason, ests in why.items():
        console.print(f"[dim]not run: {shown(', '.join(ests))}: {shown(reason)}[/]")
    console.print(
        f"results: [bold]{where}/results.json[/], results.csv, results.md "
        f"({time.perf_counter() - t0:.0f} s this invocation)"
    )
    verdict = print_verdict(run_dir)
    if report:
        from tracecal.report import write_report

        console.print(f"report: [bold]{shown(write_report(run_dir, verdict=verdict.to_json()))}[/]")  # computed once


def print_verdict(run_dir: Path) -> Any:
    """The run's verdict (`tracecal.report.verdict`) as a panel on standard output: what to use, how calibrated,
    what a threshold buys, the commands to serve it; returned, so that the report shows the same one."""
    from rich.panel import Panel
    from rich.table import Table

    from tracecal.report.verdict import run_verdict

    v = run_verdict(run_dir)
    t = Table(box=None, show_header=True, pad_edge=False)
    for c in ("estimator", "AUROC", "Δ vs leader [95 % CI]", "Brier", "ECE"):
        t.add_column(c, justify="left" if c == "estimator" else "right")
    for r in v.table:
        ci = "leader" if r["estimator"] == v.leader else f"{r['delta']:+.3f} [{r['lo']:+.3f}, {r['hi']:+.3f}]"
        name = shown(r["estimator"]) + (" ✓" if r["estimator"] == v.recommended else "")
        style = "bold green" if r["estimator"] == v.recommended else ("" if r["level"] else "dim")
        t.add_row(name, f"{r['auroc']:.3f}", ci, f"{r['brier']:.3f}", f"{r['ece']:.3f}", style=style)
    body: list[Any] = [f"[bold]{shown(v.headline)}[/]", ""]
    body += [f"• {shown(line)}" for line in v.lines]
    if v.commands:
        body += ["", "To serve it:"] + [f"  [cyan]{shown(c)}[/]" for c in v.commands]
    from rich.console import Group

    parts: list[Any] = ["\n".join(body)] + ([t] if v.table else [])
    out_console.print(Panel(Group(*parts), title="verdict", border_style="green" if v.recommended else "yellow"))
    return v
