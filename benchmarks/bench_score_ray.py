"""Benchmark: scoring a stored run block by block, locally and on 1 and 2 Ray workers (issue 21 item 2).

    python benchmarks/bench_score_ray.py --n 200000 [--modes memory,local,ray1,ray2] [--before REF] [--n-boot 0]
        [--shard-size 64] [--json out.json] [--tmp DIR] [--keep DIR]

One synthetic run of ``--n`` answers (4 tasks, 1–64 tokens, every pass the 24 estimators read: `bench_scale`'s
build), then `tracecal.evaluation.run.score_run` on it — what ``tracecal evaluate --score-only [--ray]`` runs once
the tasks are loaded (24 estimators × 20 splits, Platt, every metric, ``--n-boot`` resamples, the tables and
results written) — each mode in a fresh process, one after another:

* ``local``: the blocks in this process (`tracecal.evaluation.blockscore.LocalBlocks`);
* ``memory``: this tree's `load_task_stats` (every column of every pass, a `Trace` per answer) and `score_tasks`,
  as `score_run` scored before the blocks (its results.json lacks what `score_run` adds: ``not_run_reasons``);
* ``ray1`` / ``ray2``: a local Ray instance (``ray.init`` with this machine's CPUs, workers at nice 0 like the
  other modes: ``RAY_worker_niceness=0``) and `tracecal.evaluation.rayscore.RayBlocks` with 1 or 2 blocks in flight
  (``--ray-actors 1|2``); Ray's start-up is timed apart (``start_s``) and not in ``score_s``;
* ``before`` (with ``--before REF``): `score_run` of git commit REF (`before.source_of`), every column of every
  pass read into memory before scoring.

Printed per mode: seconds of `score_run` (wall), Ray start-up, the driver's peak RSS (a Ray worker's memory is its
own process's, not in it), and how its results.json (`scripts/compare_results.py`: every number to 1e-12, timings
aside) and answer tables (byte for byte) compare with the first mode's. The load average before and after each
mode is printed: the machine may be shared.
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("RAY_worker_niceness", "0")

TABLES = ("rows", "scores", "predictions")


def child(mode: str, run: Path, n: int, n_boot: int, out: Path) -> dict[str, Any]:
    """One mode in this (fresh) process; its results are copied under ``out``."""
    from bench_scale import config, synthetic_tasks

    from tracecal.evaluation.run import score_run
    from tracecal.evaluation.runstore import RunStore

    shutil.copy(run.parent / "rows0.parquet", run / "rows.parquet")  # the labels as built (scoring rewrites them)
    store = RunStore(run)
    cfg = config(n // 4, 64)
    cfg.n_boot = n_boot
    tasks = synthetic_tasks(store, n // 4)
    kw: dict[str, Any] = {}
    ex, start = None, 0.0
    if mode.startswith("ray"):
        from tracecal.evaluation.ray import RayExecutor, RayOptions
        from tracecal.evaluation.rayscore import RayBlocks

        ex = RayExecutor(RayOptions(actors=int(mode[3:]), local_cpus=os.cpu_count()))
        t0 = time.perf_counter()
        ex.connect()
        start = time.perf_counter() - t0
        kw["runner"] = runner = RayBlocks(ex)
    t0 = time.perf_counter()
    if mode == "memory":  # every column of every pass into memory, then `score_tasks` (score_run before blocks)
        from tracecal.estimators import needs_of
        from tracecal.evaluation.protocol import score_tasks
        from tracecal.evaluation.run import load_task_stats, write_results

        data = [load_task_stats(store, t, exs, needs_of(cfg.estimators)) for t, exs in tasks]
        res = score_tasks(data, cfg.score)
        res.config = cfg.to_dict()
        write_results(store, res)
    else:
        score_run(store, cfg, tasks=tasks, **kw)
    secs = time.perf_counter() - t0
    nodes = dict(runner.nodes) if ex is not None else {}
    if ex is not None:
        ex.close()
    out.mkdir(parents=True, exist_ok=True)
    for name in ("results.json", *(f"{t}.parquet" for t in TABLES)):
        shutil.copy(run / name, out / name)
    return {"score_s": secs, "start_s": start, "blocks_per_node": sorted(nodes.values())}


def same_as(a: Path, b: Path) -> dict[str, Any]:
    """How two modes' outputs compare: `scripts/compare_results.py` on their results.json (every number to 1e-12,
    timings aside: its differences) and whether each answer table is the same file byte for byte."""
    cmp = [
        sys.executable,
        str(ROOT / "scripts" / "compare_results.py"),
        str(a / "results.json"),
        str(b / "results.json"),
    ]
    lines = subprocess.run(cmp, capture_output=True, text=True).stdout.splitlines()
    tables = {t: (a / f"{t}.parquet").read_bytes() == (b / f"{t}.parquet").read_bytes() for t in TABLES}
    return {"results_json": lines[:6], "tables_identical": tables}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=200_000, help="answers in the run (4 tasks)")
    ap.add_argument("--modes", default="local,ray1,ray2")
    ap.add_argument("--before", help="also score with the tracecal of this git commit (mode 'before', first)")
    ap.add_argument("--n-boot", type=int, default=0)
    ap.add_argument("--shard-size", type=int, default=64)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--tmp", type=Path)
    ap.add_argument("--keep", type=Path, help="copy each mode's results.json and tables to KEEP/<mode>")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--run", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.child, a.run, a.n, a.n_boot, a.out)))
        return
    from before import in_child, source_of
    from bench_scale import stage_build

    modes = (["before"] if a.before else []) + a.modes.split(",")
    rows = []
    with tempfile.TemporaryDirectory(dir=a.tmp) as tmp:
        run = Path(tmp) / "run"
        t0 = time.perf_counter()
        stage_build(run, a.n, a.shard_size)
        print(f"built {a.n} answers in {time.perf_counter() - t0:.0f} s", flush=True)
        shutil.copy(run / "rows.parquet", Path(tmp) / "rows0.parquet")
        old = source_of(a.before, Path(tmp) / "before") if a.before else None
        for mode in modes:
            out = Path(tmp) / mode
            args = ["--child", mode if mode != "before" else "local", "--run", str(run), "--n", str(a.n)]
            args += ["--n-boot", str(a.n_boot), "--out", str(out)]
            load = os.getloadavg()[0]
            r = in_child(__file__, args, old if mode == "before" else None)
            r |= {"mode": mode, "load_before": load, "load_after": os.getloadavg()[0]}
            r["vs_first"] = same_as(Path(tmp) / modes[0], out) if "failed" not in r else None
            rows.append(r)
            print(json.dumps(r), flush=True)
            if a.keep and out.is_dir():
                shutil.copytree(out, a.keep / mode, dirs_exist_ok=True)
    ref = next((r["score_s"] for r in rows if r["mode"] == "ray1" and "score_s" in r), None)
    if ref:
        print(
            "score_s speed-up vs ray1: "
            + ", ".join(f"{r['mode']} {ref / r['score_s']:.2f}x" for r in rows if "score_s" in r)
        )
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
