"""Markdown table of SECL ablation results: `python scripts/secl_ablation_table.py runs/secl_ablations/*.json`."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def fmt(x: float | None, pct: bool = False) -> str:
    if x is None:
        return "n/a"
    return f"{100 * x:.0f} %" if pct else f"{x:.3f}"


def main(paths: list[str]) -> None:
    print(
        "| run | gate | accumulate | loss | LoRA targets (layers) | ECE frozen v | ECE τ | ECE SECL v | ECE reduction "
        "| Brier frozen → SECL | AUROC frozen → SECL | trained share | updates | overhead vs τ-all | SECL pass s |"
    )
    print("|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for p in paths:
        d = json.loads(Path(p).read_text())
        c, s, m = d["config"], d["summary"], d["metrics"]["overall"]
        layers = c.get("lora_layers")
        print(
            f"| {Path(p).stem} | {c['gate']} | {c['accumulate']} | {c['loss']} | "
            f"{','.join(c['lora_targets'])} ({'all' if not layers else f'top {layers}'}) | "
            f"{fmt(s['ece_frozen_v'])} | {fmt(s['ece_tau'])} | {fmt(s['ece_secl_v'])} | "
            f"{fmt(s['ece_reduction'], pct=True)} | {fmt(m['frozen_v']['brier'])} → {fmt(m['secl_v']['brier'])} | "
            f"{fmt(m['frozen_v']['auroc'])} → {fmt(m['secl_v']['auroc'])} | {fmt(s['trained_share'], pct=True)} | "
            f"{s['updates']} | {s['overhead_vs_tau_all']:.2f}× | {s['seconds'].get('secl_pass', float('nan')):.0f} |"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
