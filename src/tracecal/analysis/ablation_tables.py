"""The TRACE ablations as Markdown (`ablation_markdown`): one table per group of `tracecal.analysis.ablations`
(means over the ranked tasks, AUROC per task, the paper's numbers beside them), the sweep band and the transfer
matrix; reads only the document `run_ablations` returns."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["GROUP_TITLES", "ablation_markdown"]


def _num(x: Any, digits: int = 3) -> str:
    return "—" if x is None or not np.isfinite(x) else f"{x:.{digits}f}"


def _group_table(doc: dict[str, Any], group: str) -> list[str]:
    tasks = doc["tasks"]
    head = ["variant", "AUROC", "Brier", "ECE", *[f"AUROC {t}" for t in tasks], "paper AUROC / Brier / ECE"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, row in doc["variants"].items():
        if row["group"] != group:
            continue
        m = row["mean"] or {}
        per = [_num((row["tasks"].get(t) or {}).get("auroc")) for t in tasks]
        paper = doc["paper"].get(name)
        ref = " / ".join(_num(paper[k]) for k in ("auroc", "brier", "ece")) if paper else ""
        cells = [name, _num(m.get("auroc")), _num(m.get("brier")), _num(m.get("ece")), *per, ref]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _sweep_band(doc: dict[str, Any]) -> str:
    rows = [r["mean"] for r in doc["variants"].values() if r["group"] == "sweep" and r["mean"]]
    if not rows:
        return ""
    a = [r["auroc"] for r in rows]
    b = [r["brier"] for r in rows]
    pb, pa = doc["paper_sweep_band"]["brier"], doc["paper_sweep_band"]["auroc"]
    return (
        f"Sweep band over {len(rows)} settings: AUROC {min(a):.3f}–{max(a):.3f}, Brier {min(b):.3f}–{max(b):.3f} "
        f"(paper: AUROC {pa[0]:.3f}–{pa[1]:.3f}, Brier {pb[0]:.3f}–{pb[1]:.3f})."
    )


def _transfer_table(doc: dict[str, Any]) -> list[str]:
    tasks = doc["tasks"]
    lines = ["| fitted on \\ evaluated on | " + " | ".join(tasks) + " |", "|" + "---|" * (len(tasks) + 1)]
    for a in tasks:
        cells = [f"{_num(doc['transfer'][a][b]['auroc'])} / {_num(doc['transfer'][a][b]['brier'])}" for b in tasks]
        lines.append(f"| {a} | " + " | ".join(cells) + " |")
    return lines


GROUP_TITLES = {
    "ladder": "From TRACE to TRACE+",
    "operators": "Each operator alone",
    "features": "TRACE+ feature removals",
    "shuffle": "Positions shuffled within each trace",
    "sweep": "Operator hyperparameters (one setting changed at a time)",
    "fusion": "MARS fused with TRACE",
}


def ablation_markdown(doc: dict[str, Any]) -> str:
    """The ablation tables as Markdown: one per group (means over tasks, AUROC per task, the paper's numbers
    beside them), the sweep band, and the transfer matrix (AUROC / Brier)."""
    n = ", ".join(f"{t} {doc['n'][t]} ({doc['n_correct'][t]} correct)" for t in doc["tasks"])
    out = [
        f"# TRACE ablations — {doc.get('model')} ({doc.get('dtype')})",
        "",
        f"Run `{doc['run']}`: {n}; {doc['n_seeds']} splits, {doc['cal_frac']:.0%} calibration. Means over the "
        "ranked tasks; Brier/ECE of scores through Platt on the calibration split; paper: Qwen2.5-7B-Instruct.",
    ]
    out += [f"Not ranked (left out of the means): {t}: {why}." for t, why in (doc.get("not_ranked") or {}).items()]
    present = {r["group"] for r in doc["variants"].values()}
    for group, title in GROUP_TITLES.items():
        if group in present:
            out += ["", f"## {title}", "", *_group_table(doc, group)]
            if group == "sweep":
                out += ["", _sweep_band(doc)]
    if "transfer" in doc:
        out += ["", "## Cross-task transfer of TRACE+ (AUROC / Brier)", "", *_transfer_table(doc)]
    return "\n".join(out) + "\n"
