"""docs/secl.md's SECL tables from the run JSONs under docs/runs/secl*/ (`tracecal_papers.secl_tables`): the
three-family table (default configuration, every seed found) and the seven-ablation table of each model named; a
(model, variant) without a run is a "not run" row.

    python scripts/secl_tables.py                                   # print the markdown
    python scripts/secl_tables.py --write docs/secl.md              # replace the block between the markers
    python scripts/secl_tables.py --ablation-models qwen2.5-coder-1.5b,smollm2-135m-instruct --per-domain 150
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tracecal.errors import TracecalError
from tracecal_papers.secl_tables import load_runs, render, write_between_markers


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=Path, default=Path("docs/runs"), help="the folder holding secl*/ runs")
    p.add_argument(
        "--ablation-models",
        default="qwen2.5-coder-1.5b,smollm2-135m-instruct",
        help="models of the ablation tables, comma-separated",
    )
    p.add_argument(
        "--per-domain",
        type=int,
        default=None,
        help="questions per domain (default: per model, the largest size with a default-configuration run)",
    )
    p.add_argument("--write", type=Path, default=None, help="a markdown file with the secl-tables markers")
    a = p.parse_args()
    runs, notes = load_runs(a.runs)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    block = render(runs, [m.strip() for m in a.ablation_models.split(",") if m.strip()], a.per_domain)
    if a.write is None:
        print(block)
        return 0
    try:
        write_between_markers(a.write, block)
    except (TracecalError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote the SECL tables ({len(runs)} runs) into {a.write}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
