"""Redraw the committed figures of docs/runs from their JSON documents (after a change to the drawing code).

    python scripts/redraw_figures.py [docs/runs]

Every ``learning_curve.json`` gets its ``learning_curve_<task>.svg`` files and every ``frontier.json`` its
``frontier_<task>.svg`` files, drawn by the report's own functions; nothing is recomputed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tracecal.report import frontier, learning_curve

DRAW = {
    "learning_curve.json": (learning_curve.figure_file, learning_curve.learning_curve_svg),
    "frontier.json": (frontier.figure_file, frontier.frontier_svg),
}


def main(argv: list[str]) -> int:
    root = Path(argv[0] if argv else "docs/runs")
    n = 0
    for doc_name, (name, draw) in DRAW.items():
        for path in sorted(root.rglob(doc_name)):
            for task, d in json.loads(path.read_text(encoding="utf-8"))["tasks"].items():
                (path.parent / name(task)).write_text(draw(d), encoding="utf-8")
                n += 1
    print(f"{n} figures redrawn under {root}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
