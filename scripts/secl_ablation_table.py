"""Markdown tables of SECL results.

python scripts/secl_ablation_table.py runs/secl_ablations/*.json        # one row per run (ablations)
python scripts/secl_ablation_table.py --domains runs/secl_main.json     # one run, per domain + overall
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def fmt(x: float | None, pct: bool = False) -> str:
    if x is None:
        return "n/a"
    return f"{100 * x:.0f} %" if pct else f"{x:.3f}"


def ablations(paths: list[str]) -> None:
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


def domains(path: str) -> None:
    d: dict[str, Any] = json.loads(Path(path).read_text())
    print(
        "| domain | n | accuracy | ECE frozen v | ECE τ | ECE SECL v | Brier frozen v | Brier τ | Brier SECL v "
        "| AUROC frozen v | AUROC τ | AUROC SECL v | trained share |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for dom, m in d["metrics"].items():
        f, t, s = m["frozen_v"], m["tau"], m["secl_v"]
        print(
            f"| {dom} | {f['n']} | {fmt(f['acc'])} | {fmt(f['ece'])} | {fmt(t['ece'])} | {fmt(s['ece'])} | "
            f"{fmt(f['brier'])} | {fmt(t['brier'])} | {fmt(s['brier'])} | {fmt(f['auroc'])} | {fmt(t['auroc'])} | "
            f"{fmt(s['auroc'])} | {fmt(d['trained_share'].get(dom), pct=True)} |"
        )


if __name__ == "__main__":
    args = sys.argv[1:]
    if args and args[0] == "--domains":
        domains(args[1])
    else:
        ablations(args)
