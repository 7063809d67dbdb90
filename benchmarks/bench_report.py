"""Benchmark: `tracecal report` on a synthetic 5,000-answer run (4 tasks × 1,250, 24 estimators, 1–64 tokens).

    python benchmarks/bench_report.py [--repeat 3] [--figures]

Builds the run directory in a temporary folder through its `RunStore` (not timed), then times `write_report`
(best and median of ``--repeat`` runs) and prints the HTML size. ``--figures`` also times the export of the
figures (the same SVG documents the page inlines, one file per figure). Targets (issue): under 30 s and
under 20 MB.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from tracecal.report import write_report
from tracecal.testing import SYNTHETIC_ESTIMATORS, write_synthetic_run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--n-per-task", type=int, default=1250)
    ap.add_argument("--figures", action="store_true", help="also time the SVG figure export")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        run = write_synthetic_run(Path(tmp) / "run", n_per_task=args.n_per_task, max_tokens=64, seed=0)
        n = 4 * args.n_per_task
        print(
            f"synthetic run: {n} answers, 4 tasks, {len(SYNTHETIC_ESTIMATORS)} estimators, 1-64 tokens "
            f"(built in {time.perf_counter() - t0:.1f} s)"
        )
        times = []
        out = Path(tmp) / "report.html"
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            write_report(run, out=out)
            times.append(time.perf_counter() - t0)
        size = os.path.getsize(out) / 1e6
        print(
            f"write_report: best {min(times):.2f} s, median {statistics.median(times):.2f} s "
            f"over {args.repeat} runs; HTML {size:.2f} MB"
        )
        print(f"targets: < 30 s -> {'OK' if max(times) < 30 else 'FAIL'}; < 20 MB -> {'OK' if size < 20 else 'FAIL'}")
        if args.figures:
            t0 = time.perf_counter()
            write_report(run, out=out, figures_dir=Path(tmp) / "figs")
            n_files = len(list((Path(tmp) / "figs").iterdir()))
            print(f"write_report with --figures: {time.perf_counter() - t0:.2f} s ({n_files} SVG files)")


if __name__ == "__main__":
    main()
