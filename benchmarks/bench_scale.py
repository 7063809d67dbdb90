"""Benchmark: scoring (and reporting) a synthetic run of N answers — time, peak memory, run-directory size.

    python benchmarks/bench_scale.py --sizes 100000,300000,1000000 --report-sizes 10000,100000 \
        [--n-boot 0] [--json out.json] [--tmp DIR]

For each size N: 4 tasks × N/4 answers of 1–64 tokens in shards of 64 (the default ``--shard-size``), built by
`tracecal.testing.write_synthetic_run` (traces, through the `RunStore`), plus synthetic shards of the
three other passes every estimator family reads (``extra``: P(True), verbalised; ``semantic``: TokenSAR /
MARS token weights; ``beam``: 5 beam scores), written with the same `RunStore.write_shard`. Then, each in its
own process so that its peak resident memory (``ru_maxrss`` from ``wait4``) is its own:

* ``score``: `tracecal.evaluation.run.score_run` with all 24 estimators and 20 splits — reading every pass back from
  the shards, labelling every answer (the TriviaQA labeller), the protocol (`score_tasks`: calibrators,
  metrics, paired bootstrap, selective threshold) and writing ``rows``/``scores``/``predictions`` + results;
* ``report``: `tracecal.report.write_report` (only for ``--report-sizes``; its example browser embeds every
  answer's tokens, so it grows with N).

``--n-boot B`` sets the protocol's paired-bootstrap resamples (default: the protocol's own; 0 = no intervals),
to separate the bootstrap's share. Building is not timed. Nothing here is asserted: the numbers are printed
(and written to ``--json``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TASKS = ("qa1", "qa2", "qa3", "qa4")
N_BOOT: int | None = None  # --n-boot
WRONG = "qqxqz-never"  # a gold no synthetic answer contains: the answer is labelled incorrect


def synthetic_tasks(store: Any, limit: int) -> list[tuple[Any, list[Any]]]:
    """(task, examples) per synthetic task: TriviaQA's prompts and labeller; golds that reproduce the run's labels."""
    from tracecal.tasks import get_task
    from tracecal.tasks.example import Example

    rows = store.read_table("rows", columns=["task", "id", "answer", "correct"]).to_pydict()
    base = get_task("triviaqa")
    out = []
    for name in TASKS:
        task = dataclasses.replace(base, name=name, ref=name)
        exs = [
            Example(id=i, task=name, question=f"q {i}", golds=[a] if c else [WRONG])
            for t, i, a, c in zip(rows["task"], rows["id"], rows["answer"], rows["correct"], strict=True)
            if t == name
        ]
        out.append((task, exs[:limit]))
    return out


def add_passes(store: Any, shard_size: int, seed: int) -> None:
    """Synthetic shards of the extra, semantic and beam passes (`tracecal.testing.add_synthetic_passes`)."""
    from tracecal.testing import add_synthetic_passes

    add_synthetic_passes(store, TASKS, shard_size, seed)


def config(n_per_task: int, shard_size: int) -> Any:
    from tracecal.evaluation.config import EvalConfig
    from tracecal.testing import SYNTHETIC_ESTIMATORS

    return EvalConfig(
        tasks=list(TASKS),
        limit=n_per_task,
        model="synthetic",
        dtype="float32",
        n_seeds=20,
        estimators=list(SYNTHETIC_ESTIMATORS),
        shard_size=shard_size,
    )


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


# ------------------------------------------------------------------------------------------------ stages
def stage_build(run: Path, n: int, shard_size: int) -> dict[str, Any]:
    from tracecal.evaluation.runstore import RunStore
    from tracecal.testing import write_synthetic_run

    write_synthetic_run(run, tasks=TASKS, n_per_task=n // 4, shard_size=shard_size, n_seeds=20, seed=0)
    add_passes(RunStore(run), shard_size, seed=1)
    sizes = {p: du(run / p) for p in ("traces", "extra", "semantic", "beam")}
    shards = {p: sum(1 for _ in (run / p).rglob("*.parquet")) for p in sizes}
    return {"bytes": sizes, "shards": shards}


def stage_score(run: Path, n: int, shard_size: int) -> dict[str, Any]:
    from tracecal.evaluation.run import score_run
    from tracecal.evaluation.runstore import RunStore

    store = RunStore(run)
    cfg = config(n // 4, shard_size)
    if N_BOOT is not None:  # the protocol's paired bootstrap resamples (its default unless --n-boot is given)
        cfg.n_boot = N_BOOT
    tasks = synthetic_tasks(store, n // 4)
    t0 = time.perf_counter()
    res = score_run(store, cfg, tasks=tasks)
    secs = time.perf_counter() - t0
    auroc = res.metrics["average"]["trace"]["auroc"]["mean"]
    tables = {t: (run / f"{t}.parquet").stat().st_size for t in ("rows", "scores", "predictions")}
    n_boot = cfg.score.n_boot
    return {
        "seconds": secs,
        "n": sum(v["n"] for v in res.tasks.values()),
        "trace_auroc": auroc,
        "tables": tables,
        "n_boot": n_boot,
    }


def stage_report(run: Path, n: int, shard_size: int) -> dict[str, Any]:
    from tracecal.report import write_report

    t0 = time.perf_counter()
    out = write_report(run)
    return {"seconds": time.perf_counter() - t0, "html_bytes": Path(out).stat().st_size}


STAGES = {"build": stage_build, "score": stage_score, "report": stage_report}


def in_child(stage: str, run: Path, n: int, shard_size: int) -> dict[str, Any]:
    """Run one stage in a fresh process; its result plus wall seconds and peak RSS (GiB) of that process."""
    with tempfile.NamedTemporaryFile("r", suffix=".json") as f:
        cmd = [
            sys.executable,
            __file__,
            "--stage",
            stage,
            "--run",
            str(run),
            "--n",
            str(n),
            "--shard-size",
            str(shard_size),
            "--out",
            f.name,
        ]
        cmd += [] if N_BOOT is None else ["--n-boot", str(N_BOOT)]
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd)
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode:
            return {"failed": p.returncode, "wall_s": wall, "peak_rss_gib": usage.ru_maxrss / 2**20}
        return json.loads(Path(f.name).read_text() or "{}") | {"wall_s": wall, "peak_rss_gib": usage.ru_maxrss / 2**20}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100000,300000,1000000", help="answers per run (comma-separated)")
    ap.add_argument("--report-sizes", default="10000,100000", help="sizes whose report is also timed")
    ap.add_argument("--shard-size", type=int, default=64)
    ap.add_argument("--json", type=Path, help="write every measurement here")
    ap.add_argument("--tmp", type=Path, help="build the runs under this folder (default: the system's temp folder)")
    ap.add_argument("--n-boot", type=int, help="bootstrap resamples of the protocol (default: its own, 1000)")
    ap.add_argument("--stage", choices=list(STAGES), help=argparse.SUPPRESS)
    ap.add_argument("--run", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    global N_BOOT
    N_BOOT = args.n_boot
    if args.stage:  # a child process: one stage, its result as JSON
        args.out.write_text(json.dumps(STAGES[args.stage](args.run, args.n, args.shard_size)))
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    report_sizes = {int(s) for s in args.report_sizes.split(",") if s}
    results = []
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        for n in sorted(set(sizes) | report_sizes):
            run = Path(tmp) / f"run{n}"
            row: dict[str, Any] = {"n": n, "load_before": os.getloadavg()[0]}
            row["build"] = in_child("build", run, n, args.shard_size)
            if n in sizes:
                row["score"] = in_child("score", run, n, args.shard_size)
            if n in report_sizes:
                row["report"] = in_child("report", run, n, args.shard_size)
            row["load_after"] = os.getloadavg()[0]
            results.append(row)
            print(json.dumps(row), flush=True)
            subprocess.run(["rm", "-rf", str(run)], check=False)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
