"""docs/secl.md's tables from the SECL run JSONs under ``docs/runs/secl*/``: the three-family table and the
ablation table (`tracecal_papers.secl_grid`'s variants), every number read from a run file, never typed.

A run is any JSON file in a ``secl*`` folder with a SECL result's keys (``model_id``, ``config``, ``summary``,
``metrics``, ``stream``); it is matched to the grid variant whose configuration equals its own (all `SECLConfig`
fields but ``seed`` and ``batch_size``, missing fields read as their defaults) and whose domain order equals its
stream's; a run that matches none is left out. Per (model, variant, questions per domain) the columns are over
the seeds found: ECE of v frozen → SECL, the ECE reduction 1 − ECE(SECL v)/ECE(frozen v), the share of the stream
trained on, SECL's overhead in token-forwards relative to τ on every question, AUROC of v frozen → SECL, and the
ECE of the target τ, each as mean ± sample sd over seeds. A (model, variant) without a run is a "not run" row.
The family table names the weights dtype of each model's runs (a run saved before it was recorded: float32).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracecal._inputs import read_json
from tracecal.evaluation.docblocks import write_block
from tracecal.secl.config import SECLConfig
from tracecal_papers.secl_grid import GROUPS, VARIANTS, Variant

__all__ = [
    "FAMILIES",
    "PUBLISHED",
    "SeclRun",
    "load_runs",
    "classify",
    "family_table",
    "ablation_table",
    "render",
    "write_between_markers",
    "measured_rates",
]

#: The three families of the evidence, model id → name in tables.
FAMILIES = {
    "smollm2-135m-instruct": "SmolLM2-135M-Instruct",
    "gemma3-270m": "Gemma-3-270M",
    "qwen2.5-coder-1.5b": "Qwen2.5-Coder-1.5B-Instruct",
}
PUBLISHED = "56–78 %", "6–26 %"
"""The SECL paper's ECE reduction and trained share."""
IGNORED = ("seed", "batch_size")  # not part of a variant: the seed is the replicate, the batch size only execution
MARKER_NAME = "secl-tables"  # the block between <!-- secl-tables:start --> and <!-- secl-tables:end -->
KEYS = ("model_id", "config", "summary", "metrics", "stream")


@dataclass
class SeclRun:
    """One SECL result file, matched to its variant."""

    path: Path
    model: str
    variant: str
    seed: int
    per_domain: int
    values: dict[str, float | None] = field(default_factory=dict)
    dtype: str = "float32"


def classify(config: dict[str, Any], domains: Sequence[str]) -> Variant | None:
    """The grid variant of a run's ``config`` (a `SECLConfig` dict) and stream ``domains`` order, or None."""
    try:
        got = SECLConfig.from_dict(config).to_dict()
    except (TypeError, ValueError):
        return None
    for v in VARIANTS:
        want = v.config().to_dict()
        if all(got[k] == want[k] for k in want if k not in IGNORED) and list(domains) == v.domains():
            return v
    return None


def _values(d: dict[str, Any]) -> dict[str, float | None]:
    s, m = d["summary"], d["metrics"]["overall"]
    return {
        "ece_frozen": s.get("ece_frozen_v"),
        "ece_secl": s.get("ece_secl_v"),
        "ece_reduction": s.get("ece_reduction"),
        "trained_share": s.get("trained_share"),
        "overhead": s.get("overhead_vs_tau_all"),
        "auroc_frozen": m["frozen_v"].get("auroc"),
        "auroc_secl": m["secl_v"].get("auroc"),
        "ece_tau": s.get("ece_tau"),
        "secl_seconds": (s.get("seconds") or {}).get("secl_pass"),
        "frozen_seconds": (s.get("seconds") or {}).get("frozen_pass"),
        "n": s.get("n"),
    }


def _read(path: Path) -> dict[str, Any] | None:
    try:
        d = read_json(path, "SECL result file")
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) and all(k in d for k in KEYS) else None


def load_runs(runs: Path) -> tuple[list[SeclRun], list[str]]:
    """The SECL runs under ``runs/secl*/`` matched to a variant, and notes on the files left out (unmatched,
    or a duplicate of a (model, variant, n, seed) already read: the first path in sorted order is kept)."""
    out: list[SeclRun] = []
    notes: list[str] = []
    seen: set[tuple[str, str, int, int]] = set()
    for path in sorted(p for d in sorted(Path(runs).glob("secl*")) if d.is_dir() for p in d.rglob("*.json")):
        d = _read(path)
        if d is None:
            continue
        stream = d["stream"]
        variant = classify(d["config"], list(stream))
        if variant is None:
            notes.append(f"{path}: matches no grid variant")
            continue
        seed, n = int(d["config"].get("seed", 0)), min(int(x) for x in stream.values())
        key = (d["model_id"], variant.name, n, seed)
        if key in seen:
            notes.append(f"{path}: a second run of {variant.name}, seed {seed}, {n} per domain (left out)")
            continue
        seen.add(key)
        dtype = str(d.get("dtype", "float32"))  # a result saved before the dtype was recorded: fp32
        out.append(SeclRun(path, d["model_id"], variant.name, seed, n, _values(d), dtype))
    return out, notes


def _mean_sd(xs: list[float | None]) -> tuple[float, float] | None:
    vals = [float(x) for x in xs if x is not None and math.isfinite(float(x))]
    if not vals:
        return None
    return statistics.fmean(vals), (statistics.stdev(vals) if len(vals) > 1 else float("nan"))


def _fmt(xs: list[float | None], kind: str, spread: bool = True) -> str:
    """Mean ± sample sd in the column's unit; ``spread=False`` for a value the seed cannot change (frozen v, τ)."""
    ms = _mean_sd(xs)
    if ms is None:
        return "—"
    m, sd = ms[0], (ms[1] if spread else float("nan"))
    scale, digits, unit = {"pct": (100, 0, " %"), "share": (100, 1, " %"), "x": (1, 2, "×"), "num": (1, 3, "")}[kind]
    text = f"{m * scale:.{digits}f}"
    if math.isfinite(sd):
        text += f" ± {sd * scale:.{digits}f}"
    return text + unit


def _cells(runs: list[SeclRun]) -> list[str]:
    """The value columns of one (model, variant, n) over its seeds."""
    col = {k: [r.values.get(k) for r in runs] for k in runs[0].values}
    return [
        f"{_fmt(col['ece_frozen'], 'num', False)} → {_fmt(col['ece_secl'], 'num')}",
        _fmt(col["ece_reduction"], "pct"),
        _fmt(col["trained_share"], "share"),
        _fmt(col["overhead"], "x"),
        f"{_fmt(col['auroc_frozen'], 'num', False)} → {_fmt(col['auroc_secl'], 'num')}",
        _fmt(col["ece_tau"], "num", False),
    ]


VALUE_HEADERS: tuple[str, ...] = ("ECE of v: frozen → SECL", "ECE reduction", "trained share")
VALUE_HEADERS += ("overhead (× τ on all)", "AUROC of v: frozen → SECL", "ECE of τ")


def _pick_n(runs: list[SeclRun], model: str, per_domain: int | None) -> int | None:
    if per_domain is not None:
        return per_domain
    mine = [r for r in runs if r.model == model]
    default = [r.per_domain for r in mine if r.variant == "default"]
    return max(default or [r.per_domain for r in mine] or [0]) or None


def _row(lead: list[str], runs: list[SeclRun], n: int | None) -> str:
    if not runs:
        return "| " + " | ".join([*lead, "—" if n is None else str(n), "not run", *["—"] * len(VALUE_HEADERS)]) + " |"
    seeds = ",".join(str(s) for s in sorted(r.seed for r in runs))
    return "| " + " | ".join([*lead, str(n), seeds, *_cells(runs)]) + " |"


def _header(lead: list[str]) -> list[str]:
    cols = [*lead, "n per domain", "seeds", *VALUE_HEADERS]
    return ["| " + " | ".join(cols) + " |", "|" + "---|" * len(lead) + "---:|---|" + "---:|" * len(VALUE_HEADERS)]


def family_table(runs: list[SeclRun], models: Sequence[str] = tuple(FAMILIES), per_domain: int | None = None) -> str:
    """Per model, the default configuration over its seeds, then the published row."""
    lines = _header(["model"])
    for model in models:
        n = _pick_n(runs, model, per_domain)
        mine = [r for r in runs if r.model == model and r.variant == "default" and r.per_domain == n]
        dtypes = sorted({r.dtype for r in mine})
        label = FAMILIES.get(model, model) + (f" ({', '.join(dtypes)})" if dtypes else "")
        lines.append(_row([label], mine, n))
    blank = ["—"] * (len(VALUE_HEADERS) - 3)
    lines.append("| " + " | ".join(["published (SECL paper)", "—", "—", "—", *PUBLISHED, *blank]) + " |")
    return "\n".join(lines)


def ablation_table(runs: list[SeclRun], model: str, per_domain: int | None = None) -> str:
    """Every grid variant on ``model``, grouped by ablation (the default first), at one n per domain."""
    n = _pick_n(runs, model, per_domain)
    lines = _header(["ablation", "variant"])
    for v in VARIANTS:
        mine = [r for r in runs if r.model == model and r.variant == v.name and r.per_domain == n]
        lines.append(_row([GROUPS[v.group], f"{v.label} (`{v.name}`)"], mine, n))
    return "\n".join(lines)


def render(runs: list[SeclRun], ablation_models: Sequence[str], per_domain: int | None = None) -> str:
    """The markdown block: the three-family table, then one ablation table per model of ``ablation_models``."""
    parts = [
        "**Three families, default configuration** (mean ± sample sd over the seeds listed; `python "
        "scripts/secl_tables.py --write docs/secl.md` regenerates these tables from `docs/runs/secl*/`):",
        "",
        family_table(runs, per_domain=per_domain),
    ]
    for model in ablation_models:
        parts += ["", f"**The seven ablations on {FAMILIES.get(model, model)}** (one change each):", ""]
        parts.append(ablation_table(runs, model, per_domain))
    return "\n".join(parts)


def write_between_markers(doc: Path, block: str) -> None:
    """Replace the text between ``<!-- secl-tables:start -->`` and ``<!-- secl-tables:end -->`` in ``doc``."""
    write_block(doc, block, MARKER_NAME)


def measured_rates(runs: list[SeclRun], model: str) -> tuple[float, float] | None:
    """Seconds per question of the SECL pass and of the frozen pass over ``model``'s runs (total seconds over
    total questions, so large runs dominate; gate-never runs, which train nothing, left out); None: no run."""
    mine = [r for r in runs if r.model == model and r.variant != "gate-never" and r.values.get("n")]
    if not mine:
        return None
    n = sum(float(r.values["n"] or 0) for r in mine)
    secl = sum(float(r.values["secl_seconds"] or 0) for r in mine)
    frozen = sum(float(r.values["frozen_seconds"] or 0) for r in mine)
    return secl / n, frozen / n
