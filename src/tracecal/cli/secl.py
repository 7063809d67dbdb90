"""``tracecal secl``: run SECL over a stream of domains and print frozen v / τ / SECL v metrics.

Register in the main CLI with ``app.command("secl")(secl_command)``. Example::

    tracecal secl --stream triviaqa,svamp,arc_easy,truthfulqa --per-domain 150 --cache runs/frozen.json \\
        --out runs/secl.json --save-adapter runs/secl-adapter
    tracecal secl ... --gate always|never|detector --reset --loss mse --lora-targets q_proj,k_proj,v_proj,o_proj
    tracecal secl ... --target norm_ptrue|ptrue|trace|trace_rank|oracle --reset --reset-at shift \\
        --domain-order reverse --lr 1e-2 --update-threshold 0.2 --burst-size 64 --ph-lambda 5 --lora-rank 16

``--cache`` stores the frozen pass (answers, τ, v of the base model) so that ablations on the same stream
and model skip it. ``--set key=value`` overrides any other `SECLConfig` field (e.g. ``--set ph_lambda=8``).
"""

from __future__ import annotations

import sys
from dataclasses import fields
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from tracecal.cli.common import (
    THREADS,
    DataDirOpt,
    DtypeOpt,
    ModelOpt,
    ThreadsOpt,
    check_option,
    console,
    fmt_num,
    note,
    out_console,
    safe_text,
    shown,
    split_names,
    user_errors,
)
from tracecal.errors import ValidationError

__all__ = ["secl_command", "print_result", "parse_overrides"]

_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")


def _typed(key: str, raw: str, default: Any) -> Any:
    """``raw`` as the type of the field's ``default`` (bool, int, float, a comma-separated tuple, str)."""
    if isinstance(default, bool):
        if raw.lower() not in _TRUE + _FALSE:
            raise ValidationError(f"{key} expects true/false, got {raw!r}")
        return raw.lower() in _TRUE
    try:
        if isinstance(default, int):
            return int(raw)
        if isinstance(default, float):
            return float(raw)
    except ValueError:
        kind = "a whole number" if isinstance(default, int) else "a number"
        raise ValidationError(f"{key} expects {kind}, got {raw!r}") from None
    if isinstance(default, list):
        return tuple(split_names(raw))
    return raw


def parse_overrides(pairs: list[str] | None) -> dict[str, Any]:
    """``["ph_lambda=8", "start_burst=false"]`` → typed `SECLConfig` fields (bool, int, float, str, tuple)."""
    from tracecal.secl.config import SECLConfig

    defaults = SECLConfig().to_dict()
    known = {f.name for f in fields(SECLConfig)}
    out: dict[str, Any] = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise ValidationError(f"--set expects key=value, got {pair!r}")
        key, raw = (s.strip() for s in pair.split("=", 1))
        if key not in known:
            raise ValidationError(f"unknown SECLConfig field {key!r}; known: {', '.join(sorted(known))}")
        out[key] = _typed(key, raw, defaults[key])
    return out


#: The options that are `SECLConfig` fields of the same name.
CONFIG_OPTIONS = (
    "gate",
    "target",
    "accumulate",
    "reset_at",
    "loss",
    "lora_targets",
    "lora_layers",
    "seed",
    "scope",
    "lr",
    "burst_size",
    "batch_size",
    "update_threshold",
    "ph_lambda",
    "lora_r",
)

METHOD_NAMES = {"frozen_v": "frozen v", "tau": "τ", "secl_v": "SECL v"}

TargetOpt = Annotated[
    str, typer.Option(help="what v is pulled toward: norm_ptrue | ptrue | trace | trace_rank | oracle")
]
ResetAtOpt = Annotated[str, typer.Option(help="with --reset: reset after every update, or at every detected shift")]
OrderOpt = Annotated[
    str | None, typer.Option(help="the stream's domains reordered: reverse, or names / 1-based positions (2,1,4,3)")
]
ThresholdOpt = Annotated[float | None, typer.Option(help="train only when |v − τ| exceeds this [0.1]")]
LambdaOpt = Annotated[float | None, typer.Option("--ph-lambda", help="Page-Hinkley alarm threshold λ, sd units [10]")]
RankOpt = Annotated[int | None, typer.Option("--lora-rank", "--lora-r", help="LoRA rank r [8]; lora_alpha stays")]
StreamOpt = Annotated[str, typer.Option("--stream", "-s", help="comma-separated task names, in stream order")]
LossOpt = Annotated[str, typer.Option(help="directional (CE to bins around τ) | mse (on E[confidence])")]
AccumulateOpt = Annotated[
    bool, typer.Option("--accumulate/--reset", help="LoRA weights accumulate, or are reset (see --reset-at)")
]
SaveAdapterOpt = Annotated[
    Path | None, typer.Option("--save-adapter", help="save the final LoRA adapter (safetensors) to this folder")
]
CacheOpt = Annotated[
    Path | None, typer.Option("--cache", help="frozen-pass cache (JSON): reused if it matches, else written")
]
SampleSeedOpt = Annotated[
    int | None, typer.Option(help="take a seeded random subset of each task (default: first rows)")
]
SetOpt = Annotated[
    list[str] | None, typer.Option("--set", help="override any SECLConfig field: key=value (repeatable)")
]


def _result_table(result: Any) -> Table:
    """Per domain (and overall) and per confidence (frozen v, τ, SECL v): n, ECE, Brier, AUROC, accuracy, mean
    confidence, and the share of the domain SECL trained on."""
    from tracecal.secl.targets import TARGET_NAMES

    cfg = result.config
    names = METHOD_NAMES | {"tau": f"τ ({TARGET_NAMES.get(cfg.target, cfg.target)})"}
    weights = "accumulate" if cfg.accumulate else f"reset at each {cfg.reset_at}"
    table = Table(
        title=shown(
            f"SECL on {result.model_id} — gate={cfg.gate}, target={cfg.target}, {weights}, "
            f"loss={cfg.loss}, LoRA {','.join(cfg.lora_targets)} × top-{cfg.lora_layers or 'all'} layers, "
            f"scope={cfg.scope}, seed={cfg.seed}"
        )
    )
    for col in ("domain", "confidence", "n", "ECE", "Brier", "AUROC", "acc", "mean conf", "trained"):
        table.add_column(col, justify="left" if col in ("domain", "confidence") else "right")
    for dom, per in result.metrics().items():
        for k, (method, m) in enumerate(per.items()):
            table.add_row(
                shown(dom) if k == 0 else "",
                names[method],
                str(m["n"]),
                *[fmt_num(m[key], 4) for key in ("ece", "brier", "auroc", "acc", "mean_conf")],
                fmt_num(result.trained_share(dom), 1, pct=True) if method == "secl_v" else "",
                end_section=k == len(per) - 1,
            )
    return table


def _summary_lines(s: dict[str, Any]) -> tuple[str, str]:
    """The ECE reduction and training share, then the cost of SECL against τ on every question."""

    def pct(x: Any) -> str:
        return fmt_num(x, 1, pct=True)

    ece = (
        f"ECE frozen v {fmt_num(s['ece_frozen_v'], 4)} → SECL v {fmt_num(s['ece_secl_v'], 4)} "
        f"(reduction {pct(s['ece_reduction'])}; τ itself {fmt_num(s['ece_tau'], 4)}); "
        f"trained on {s['updates']}/{s['n']} = {pct(s['trained_share'])} of the stream "
        f"(gate open on {pct(s['gated_share'])}, {s['bursts']} burst(s), alarms at {s['alarms']}). "
        "For reference (not a pass mark): the SECL paper reports a 56–78% ECE reduction training on 6–26% of the "
        "stream, on its own models and streams (docs/secl.md compares)."
    )
    cost = (
        f"cost: SECL overhead (τ in bursts + backward + re-reads) = {s['overhead_vs_tau_all']:.3f}× the cost of "
        f"τ on every question in token-forwards ({s['overhead_vs_base_pipeline']:.3f}× answering + v); "
        f"measured time {s['overhead_seconds']:.1f}s vs {s['tau_all_seconds']:.1f}s for τ on all "
        f"({s['overhead_time_vs_tau_all']:.2f}×; τ-all is batched, updates are sequential). "
        f"Wall: frozen pass {s['seconds']['frozen_pass']:.0f}s, SECL pass {s['seconds']['secl_pass']:.0f}s."
    )
    return ece, cost


def print_result(result: Any, console: Console | None = None) -> None:
    """The per-domain / overall table of frozen v, τ and SECL v, then trained share and cost."""
    if console is None:  # not a terminal (logs, CliRunner): wide enough for the table on one line per row
        console = out_console if sys.stdout.isatty() else Console(width=160)
    console.print(_result_table(result))
    for line in _summary_lines(result.summary()):
        console.print(safe_text(line), soft_wrap=True, markup=False)


_SHOWN: dict[str, int] = {}
"""The last count `_progress` printed per stage."""


def _progress(stage: str, done: int, total: int) -> None:
    """A line each time a stage passes another 5 % of its items (batches rarely land on round numbers), and at
    its end."""
    step, last = max(1, total // 20), _SHOWN.get(stage, 0)
    if done <= last:  # the stage begins again (another run in this process)
        last = 0
    if done == total or done // step > last // step:
        _SHOWN[stage] = done
        note(f"  {stage}: {done}/{total}")


def check_backend(backend: str) -> None:
    """Refuse a ``--backend`` SECL cannot train on (before the stream is read or a model loaded): one of ``auto`` and
    the in-process backends (as `tracecal evaluate --backend`), and of those one that declares gradients and hidden
    states (`tracecal.backends.registry`); llama.cpp has none (`tracecal.secl.adapter.hf_only_error` says how to get
    the HF checkpoint of the same model)."""
    from tracecal.backends.registry import GRADIENTS, HIDDEN_STATES, IN_PROCESS, backend_choices, get_backend

    choices = backend_choices(IN_PROCESS)
    if backend not in choices:
        raise ValidationError(f"--backend must be one of {', '.join(choices)}, got {backend!r}")
    if backend != "auto" and not get_backend(backend).can(GRADIENTS, HIDDEN_STATES):
        from tracecal.secl.adapter import hf_only_error

        raise hf_only_error(get_backend(backend).label)


def check_outputs(
    out: Path | None, cache: Path | None, save_adapter: Path | None, model: str | None = None, data_dir: Any = None
) -> list[tuple[str, Any, str]]:
    """What ``--out`` must not write over (the ``--cache`` file, the files of ``--save-adapter``), and what the
    ``--save-adapter`` folder must not replace (`tracecal.secl.folders.check_output_dir`: a file, a folder holding
    an input or ``--out``, a non-empty folder that is not a saved SECL adapter), checked before anything is computed;
    `ValidationError` for ``--out`` equal to ``--cache`` (also before the cache is written)."""
    from tracecal._outputs import check_output
    from tracecal.secl.adapter import ADAPTER_FOLDER
    from tracecal.secl.folders import check_output_dir

    inputs = [("--cache file", cache, "*"), ("--save-adapter folder's file", save_adapter, "*")]
    if out is not None:
        if cache is not None and out.resolve() == cache.resolve():
            raise ValidationError(f"--out {out} and --cache {cache} are the same file: give two paths")
        check_output(out, inputs, "--out")
    if save_adapter is not None:
        for option, file in (("--out", out), ("--cache", cache)):
            if file is not None and save_adapter.resolve() in file.resolve().parents:
                raise ValidationError(
                    f"{option} {file} lies inside --save-adapter {save_adapter}, which is written as a whole: give "
                    f"{option} a path outside it"
                )
        read = [("--cache file", cache), ("--out file", out), ("model", model), ("--data-dir folder", data_dir)]
        check_output_dir(save_adapter, ADAPTER_FOLDER, read, "--save-adapter")
    return inputs


def check_dtype(dtype: str) -> str:
    """``dtype`` if it names weights dtype `HFModel.load` takes, else a ValidationError that lists them."""
    from tracecal.backends.defaults import torch_dtype

    try:
        torch_dtype(dtype, "cpu")
    except ValueError as e:
        raise ValidationError(f"--dtype: {e}") from None
    return dtype


def _run(
    model: str | None,
    items: list[Any],
    cfg: Any,
    cache: Path | None,
    run: tuple[int | None, Path | None, str],
) -> Any:
    """Load the model (``run``: torch threads, adapter folder, weights dtype), get the frozen pass (from
    ``cache`` or computed), run SECL."""
    from tracecal.backends import load_model
    from tracecal.secl.adapter import require_hf
    from tracecal.secl.cache import frozen_for
    from tracecal.secl.run import run_secl

    threads, save_adapter, dtype = run
    with console.status("loading model…"):
        lm = require_hf(
            load_model(model, batch_size=cfg.batch_size, dtype=dtype, threads=threads or "auto")
        )  # a server URL: SECL needs the weights here
    frozen = frozen_for(lm, items, cache, cfg.batch_size, _progress, note, need_p_yes=cfg.target == "ptrue")
    note("SECL pass…")
    return run_secl(lm, items, cfg, frozen=frozen, progress=_progress, save_adapter=save_adapter)


@user_errors
def secl_command(
    stream: StreamOpt = "triviaqa,svamp,arc_easy,truthfulqa",
    per_domain: Annotated[int, typer.Option("--per-domain", "-n", help="questions per domain")] = 150,
    domain_order: OrderOpt = None,
    gate: Annotated[str, typer.Option(help="adaptation gate: detector | always | never")] = "detector",
    target: TargetOpt = "norm_ptrue",
    accumulate: AccumulateOpt = True,
    reset_at: ResetAtOpt = "update",
    loss: LossOpt = "directional",
    lora_targets: Annotated[str, typer.Option(help="comma-separated module names to adapt")] = "q_proj,v_proj",
    lora_layers: Annotated[int, typer.Option(help="adapt the top-K decoder layers (0 = all)")] = 4,
    seed: Annotated[int, typer.Option(help="seed of the LoRA initialisation")] = 0,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="write the full result (JSON) here")] = None,
    save_adapter: SaveAdapterOpt = None,
    model: ModelOpt = None,
    data_dir: DataDirOpt = None,
    cache: CacheOpt = None,
    scope: Annotated[str, typer.Option(help="adapter used for: confidence (v only) | all (answers, τ)")] = "confidence",
    lr: Annotated[float, typer.Option(help="LoRA learning rate")] = 3e-3,
    burst_size: Annotated[int, typer.Option(help="questions per adaptation burst")] = 32,
    update_threshold: ThresholdOpt = None,
    ph_lambda: LambdaOpt = None,
    lora_r: RankOpt = None,
    batch_size: Annotated[int, typer.Option(help="questions per forward batch")] = 8,
    sample_seed: SampleSeedOpt = None,
    threads: ThreadsOpt = None,
    dtype: DtypeOpt = "auto",
    backend: Annotated[
        str, typer.Option(help="auto | hf (SECL trains LoRA: HF only; a .gguf or named model is converted to HF)")
    ] = "auto",
    set_: SetOpt = None,
) -> None:
    """SECL: test-time self-calibration of verbalised confidence over a stream of domains (docs/method.md §6)."""
    from tracecal.secl.config import SECLConfig
    from tracecal.secl.stream import build_stream, order_domains

    check_backend(backend)
    check_dtype(dtype)
    check_option("--threads", threads, THREADS)
    inputs = check_outputs(out, cache, save_adapter, model, data_dir)
    options = {k: v for k, v in locals().items() if k in CONFIG_OPTIONS and v is not None}  # None: the default
    options["lora_targets"] = tuple(split_names(lora_targets))
    cfg = SECLConfig(**(options | parse_overrides(set_)))  # --set wins over the option of the same field
    domains = order_domains(stream, domain_order)
    items = build_stream(domains, per_domain, data_dir=data_dir, sample_seed=sample_seed)
    result = _run(model, items, cfg, cache, (threads, save_adapter, dtype))
    print_result(result)
    if out is not None:
        result.to_json(out, inputs)
        note(f"wrote {out}")
    if save_adapter is not None:
        note(f"saved the LoRA adapter to {save_adapter}")


if __name__ == "__main__":  # python -m tracecal.cli.secl --stream ... (until registered as `tracecal secl`)
    typer.run(secl_command)
