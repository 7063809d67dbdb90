"""Benchmark: one evaluation on 1 and 2 Ray workers against today's two processes sharing a run through claims.

    python benchmarks/bench_ray.py [--limit 64] [--shard-size 16] [--rounds 1] [--modes ray1,ray2,claims2]
        [--json out.json]

The same evaluation in each mode (the real default model, TriviaQA, ``--limit`` questions in shards of
``--shard-size``, the trace-only estimators, 20 splits, no report), each in a fresh run directory, timed from
the command's start to its end (model loading, Ray start-up and scoring included — what a user waits for):

* ``ray1`` / ``ray2``: ``tracecal evaluate … --ray --ray-actors N --threads 1`` (a local Ray instance, N model
  actors of one CPU and one torch thread each);
* ``claims2``: two ``tracecal evaluate … --threads 1`` processes on one run directory, as ``scripts/run.sh``
  starts them (a helper with ``--no-score``, the foreground one scores), splitting the shards through claims;
* ``local1``: one process, ``--threads 1`` (the reference for the speed-ups).

Ray runs its workers at nice 15 by default; on a machine shared with other jobs that alone slows the actors
against the plain processes (nice 0), so this benchmark starts Ray with ``RAY_worker_niceness=0``
(``--ray-niceness 15``: Ray's default). Modes run one after another (``--rounds`` times, in the order given);
the ratios are to ``ray1`` and to ``local1`` where those ran. The load average before and after each run is
printed: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TRACECAL = [sys.executable, "-m", "tracecal.cli.app"]


def base_args(run: Path, args: argparse.Namespace) -> list[str]:
    return [
        "evaluate",
        "--run-dir",
        str(run),
        "--tasks",
        args.tasks,
        "--limit",
        str(args.limit),
        "--shard-size",
        str(args.shard_size),
        "--batch-size",
        str(args.batch_size),
        "--estimators",
        "trace-only",
        "--seeds",
        "20",
        "--no-report",
        "--threads",
        "1",
    ]


def run_mode(mode: str, run: Path, args: argparse.Namespace, log: Path) -> dict[str, Any]:
    """Run one mode to completion; its wall seconds and what the run directory recorded."""
    cmd = [*TRACECAL, *base_args(run, args)]
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    with open(log, "w") as out:
        helper = None
        if mode.startswith("ray"):
            cmd += ["--ray", "--ray-actors", mode.removeprefix("ray")]
        elif mode == "claims2":
            helper = subprocess.Popen([*cmd, "--no-score"], stdout=out, stderr=subprocess.STDOUT)
        rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT).returncode
        if helper is not None:
            helper.wait(timeout=600)
    wall = time.perf_counter() - t0
    if rc:
        raise SystemExit(f"{mode} failed (exit {rc}); see {log}:\n{log.read_text()[-3000:]}")
    timings = json.loads((run / "timings.json").read_text())
    results = json.loads((run / "results.json").read_text())
    gen = sum(v for k, v in timings.items() if k.startswith("generate/"))
    tokens = results["tasks"][args.tasks.split(",")[0]].get("mean_answer_tokens", float("nan")) * args.limit
    return {
        "mode": mode,
        "wall_s": wall,
        "generate_compute_s": gen,
        "answer_tokens": tokens,
        "load_before": load0,
        "load_after": os.getloadavg()[0],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default="triviaqa")
    ap.add_argument("--limit", type=int, default=64)
    ap.add_argument("--shard-size", type=int, default=16)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--modes", default="ray1,ray2,claims2,local1")
    ap.add_argument("--ray-niceness", default="0", help="nice of Ray's workers (Ray's own default: 15)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    os.environ["RAY_worker_niceness"] = args.ray_niceness  # read by the raylet the driver starts
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    rows = []
    tmp = Path(tempfile.mkdtemp(prefix="bench_ray."))
    try:
        for r in range(args.rounds):
            for mode in modes:
                row = run_mode(mode, tmp / f"{mode}-{r}", args, tmp / f"{mode}-{r}.log") | {"round": r}
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    best = {m: min(x["wall_s"] for x in rows if x["mode"] == m) for m in modes}
    for ref in ("ray1", "local1"):
        if ref in best:
            print(f"wall-time speed-up vs {ref}: " + ", ".join(f"{m} {best[ref] / s:.2f}x" for m, s in best.items()))
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "best_wall_s": best}, indent=1))


if __name__ == "__main__":
    main()
