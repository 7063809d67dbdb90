"""The SECL evidence grid: the default configuration and the SECL paper's seven ablations as named variants, where
each run goes, what is left to run and about how long it takes (``scripts/secl_grid.py`` runs it,
`tracecal_papers.secl_tables` reads the results).

A variant is a set of `SECLConfig` overrides and, for the domain-ordering ablation, a permutation of the stream
``DEFAULT_STREAM`` (TriviaQA → SVAMP → ARC-Easy → TruthfulQA). Each changes one thing against the default:

    signal quality       target: raw P(True), c_TRACE = exp(−R), c_TRACE's online rank, labels (oracle)
    gating               gate: always, never                     (default: the Page-Hinkley detector)
    weight accumulation  reset at each detected shift; reset after every update   (default: accumulate)
    loss                 MSE on E[confidence]                    (default: directional)
    domain ordering      three other orders of the four domains
    hyperparameters      lr 1e-3, 1e-2 (3e-3) · update threshold 0.05, 0.2 (0.1) · burst 16, 64 (32) ·
                         Page-Hinkley λ 5, 20 (10) · LoRA rank 4, 16 (8; lora_alpha = 2r keeps α/r = 2)
    layer selection      LoRA on the top 1, 2, 8, 16 layers and on all of them   (default: top 4)

One run = (model, variant, seed) at n questions per domain: the result without its per-question records in
``RUNS/secl-<model>-<variant>-s<seed>/secl.json``. A run is done when that file holds a result; the driver writes
it last (atomically), so an interrupted run is simply run again.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracecal._inputs import read_json
from tracecal.errors import ValidationError
from tracecal.secl.config import SECLConfig
from tracecal.secl.stream import order_domains

__all__ = [
    "DEFAULT_STREAM",
    "GROUPS",
    "VARIANTS",
    "Variant",
    "PlannedRun",
    "select_variants",
    "model_slug",
    "run_dir",
    "is_done",
    "plan",
    "secl_args",
    "finish_run",
    "estimate_seconds",
]

DEFAULT_STREAM = ("triviaqa", "svamp", "arc_easy", "truthfulqa")
RESULT_FILE = "secl.json"

#: group key → the ablation's name in tables, in table order.
GROUPS = {
    "default": "default configuration",
    "signal": "signal quality (target τ)",
    "gating": "gating",
    "accumulation": "weight accumulation",
    "loss": "loss",
    "order": "domain ordering",
    "hyper": "hyperparameter sensitivity",
    "layers": "layer selection",
}


@dataclass(frozen=True)
class Variant:
    """One configuration of the grid: ``overrides`` of `SECLConfig` and an optional ``order`` (`order_domains`)."""

    name: str
    group: str
    label: str
    overrides: tuple[tuple[str, Any], ...] = ()
    order: str | None = None

    def config(self, seed: int = 0) -> SECLConfig:
        return SECLConfig(**dict(self.overrides), seed=seed)

    def domains(self) -> list[str]:
        return order_domains(DEFAULT_STREAM, self.order)

    def args(self) -> list[str]:
        """The ``tracecal secl`` arguments that select this variant (``--set`` per override)."""
        out: list[str] = []
        for key, value in self.overrides:
            text = str(value).lower() if isinstance(value, bool) else str(value)
            out += ["--set", f"{key}={text}"]
        return out + (["--domain-order", self.order] if self.order else [])


def _v(name: str, group: str, label: str, order: str | None = None, **overrides: Any) -> Variant:
    return Variant(name, group, label, tuple(overrides.items()), order)


VARIANTS: tuple[Variant, ...] = (
    _v("default", "default", "detector · NormPTrue · accumulate · directional · top-4 layers"),
    _v("target-ptrue", "signal", "τ = raw P(True)", target="ptrue"),
    _v("target-trace", "signal", "τ = c_TRACE = exp(−R)", target="trace"),
    _v("target-trace-rank", "signal", "τ = online rank of c_TRACE", target="trace_rank"),
    _v("target-oracle", "signal", "τ = labels (oracle)", target="oracle"),
    _v("gate-always", "gating", "gate: always", gate="always"),
    _v("gate-never", "gating", "gate: never (= frozen v)", gate="never"),
    _v("reset-shift", "accumulation", "reset at each detected shift", accumulate=False, reset_at="shift"),
    _v("reset-update", "accumulation", "reset after every update", accumulate=False),
    _v("loss-mse", "loss", "loss: MSE on E[confidence]", loss="mse"),
    _v("order-reverse", "order", "TruthfulQA → ARC-Easy → SVAMP → TriviaQA", order="4,3,2,1"),
    _v("order-2413", "order", "SVAMP → TruthfulQA → TriviaQA → ARC-Easy", order="2,4,1,3"),
    _v("order-3142", "order", "ARC-Easy → TriviaQA → TruthfulQA → SVAMP", order="3,1,4,2"),
    _v("lr-1e-3", "hyper", "learning rate 1e-3", lr=1e-3),
    _v("lr-1e-2", "hyper", "learning rate 1e-2", lr=1e-2),
    _v("threshold-0.05", "hyper", "update threshold 0.05", update_threshold=0.05),
    _v("threshold-0.2", "hyper", "update threshold 0.2", update_threshold=0.2),
    _v("burst-16", "hyper", "burst size 16", burst_size=16),
    _v("burst-64", "hyper", "burst size 64", burst_size=64),
    _v("ph-lambda-5", "hyper", "Page-Hinkley λ 5", ph_lambda=5.0),
    _v("ph-lambda-20", "hyper", "Page-Hinkley λ 20", ph_lambda=20.0),
    _v("rank-4", "hyper", "LoRA rank 4 (α 8)", lora_r=4, lora_alpha=8),
    _v("rank-16", "hyper", "LoRA rank 16 (α 32)", lora_r=16, lora_alpha=32),
    _v("layers-1", "layers", "top 1 layer", lora_layers=1),
    _v("layers-2", "layers", "top 2 layers", lora_layers=2),
    _v("layers-8", "layers", "top 8 layers", lora_layers=8),
    _v("layers-16", "layers", "top 16 layers", lora_layers=16),
    _v("layers-all", "layers", "all layers", lora_layers=0),
)
"""The grid, in table order: the default first, then each ablation's variants."""


def select_variants(spec: str | None) -> list[Variant]:
    """``None`` / ``"all"``: every variant; else comma-separated variant names and group keys (`GROUPS`)."""
    if spec is None or spec.strip() in ("", "all"):
        return list(VARIANTS)
    names = [v.name for v in VARIANTS]
    picked: list[Variant] = []
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        if part not in names and part not in GROUPS:
            raise ValidationError(
                f"unknown SECL variant or group {part!r}; groups: {', '.join(GROUPS)}; variants: {', '.join(names)}"
            )
        picked += [v for v in VARIANTS if part in (v.name, v.group) and v not in picked]
    return picked


def model_slug(model: str) -> str:
    """A folder-safe name of the model (a named model's name; a path's file name without its suffix)."""
    name = Path(model).stem if ("/" in model or model.endswith(".gguf")) else model
    return re.sub(r"[^a-z0-9.]+", "-", name.lower()).strip("-") or "model"


def run_dir(runs: Path, model: str, variant: Variant, seed: int) -> Path:
    return Path(runs) / f"secl-{model_slug(model)}-{variant.name}-s{seed}"


def is_done(folder: Path) -> bool:
    """The run folder holds a result (``secl.json`` with a summary)."""
    try:
        return "summary" in read_json(Path(folder) / RESULT_FILE, "SECL result file")
    except (OSError, ValueError):
        return False


@dataclass(frozen=True)
class PlannedRun:
    variant: Variant
    seed: int
    folder: Path
    done: bool


def plan(runs: Path, model: str, variants: Sequence[Variant], seeds: Sequence[int]) -> list[PlannedRun]:
    """Every (variant, seed) run of the grid for ``model``, in order, with whether it is done already."""
    out = []
    for v in variants:
        for s in seeds:
            folder = run_dir(runs, model, v, s)
            out.append(PlannedRun(v, s, folder, is_done(folder)))
    return out


def secl_args(
    model: str,
    per_domain: int,
    run: PlannedRun,
    cache: Path,
    out: Path,
    threads: int | None = None,
    dtype: str | None = None,
) -> list[str]:
    """The ``tracecal`` arguments of one run (the frozen pass shared through ``cache``; the full result to ``out``;
    ``dtype``: the weights', None for `tracecal secl`'s default)."""
    args = ["secl", "--model", model, "--stream", ",".join(DEFAULT_STREAM), "--per-domain", str(per_domain)]
    args += ["--seed", str(run.seed), "--cache", str(cache), "--out", str(out), *run.variant.args()]
    return args + (["--threads", str(threads)] if threads else []) + (["--dtype", dtype] if dtype else [])


def finish_run(full: Path, folder: Path) -> Path:
    """Write ``folder/secl.json``: the full result ``full`` without its per-question records (atomically)."""
    d = read_json(full, "SECL result file")
    d.pop("questions", None)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / (RESULT_FILE + ".tmp")
    tmp.write_text(json.dumps(d, indent=1), encoding="utf-8")
    tmp.replace(folder / RESULT_FILE)
    return folder / RESULT_FILE


def estimate_seconds(
    n_todo: int, per_domain: int, secl_s_per_question: float, frozen_s_per_question: float, frozen_cached: bool
) -> float:
    """Wall time of ``n_todo`` runs of 4 × ``per_domain`` questions: each its SECL pass plus ~25 s to start and load
    the model, and the frozen pass once unless cached (rates in seconds per question, from measured runs)."""
    n_q = len(DEFAULT_STREAM) * per_domain
    once = 0.0 if frozen_cached or n_todo == 0 else frozen_s_per_question * n_q
    return once + n_todo * (25.0 + secl_s_per_question * n_q)
