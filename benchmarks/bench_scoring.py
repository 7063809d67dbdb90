"""Scoring a synthetic run (issue 21): `score_tasks` before and after, its peak memory, and a lower bound.

    python benchmarks/bench_scoring.py --sizes 100000 --before REF [--n-boot 0] [--source run|memory] [--json out]

For each size N: 4 tasks × N/4 answers of 1–64 tokens with every stat the 24 estimators read (P(True), verbalised,
TokenSAR / MARS token weights, 5 beam scores), scored with all 24 estimators × 20 splits, Platt, every metric
(`ScoreConfig` defaults, ``--n-boot`` resamples: 0 = no bootstrap). The data come from

* ``--source run``: a synthetic run directory (`tracecal.testing.write_synthetic_run` plus the other passes'
  shards, `bench_scale.stage_build`), read back with `tracecal.evaluation.run.load_task_stats` (with the
  answers' `Trace` objects, as `score_run` reads them);
* ``--source memory``: the same distributions drawn straight into `TaskStats` (no run directory, no `Trace`
  objects): how a million answers fit in this machine's 4 GB (building the 1 M run directory alone took 611 s and
  3.8 GiB, docs/benchmarks.md).

Each measurement runs in its own process (`before.in_child`): the data are loaded / drawn, then `score_tasks` is
timed (wall and CPU seconds); peak RSS is the process's (data included) and the RSS after loading is printed beside
it. ``--before REF`` runs the same on the tracecal of git commit ``REF`` (its `score_tasks`, same data) and
prints the largest difference of every metric between the two. The lower bound (timed in the "after" process,
after scoring, on the same data) is the bare NumPy arithmetic the metrics need, per task and estimator: one
stable sort of the task's scores; for all 20 splits the split's answers in that order (a boolean gather), the
cumulative sum of their labels (ranks, curves), 5 Newton steps of a 1-D Platt fit on the calibration answers, one
Brier pass and one ECE ``bincount`` — no estimator is computed (TRACE's score stands for all 24).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

TASKS = ("qa1", "qa2", "qa3", "qa4")
METRIC_KEYS = ("auroc", "auprc", "aurc", "risk@10", "risk@50", "risk@90", "brier", "ece", "aece", "sel_coverage")


def memory_task(name: str, n: int, seed: int) -> Any:
    """One synthetic task drawn as `tracecal.testing` draws a run's answers, straight into `TaskStats`."""
    from tracecal.estimators import Inputs
    from tracecal.evaluation.protocol import TaskStats
    from tracecal.traces.trace import TraceBatch

    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.2 + 0.6 * rng.random()).astype(np.int64)
    lengths = rng.integers(1, 65, n)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    wrong = np.repeat(1 - y, lengths)
    s = rng.exponential(1.0, offsets[-1]) * (0.6 + 0.8 * wrong)
    h = s + rng.exponential(1.0, offsets[-1])
    stats = {
        "p_true": rng.random(n),
        "verbalized": rng.random(n),
        "digit_mass": rng.random(n),
        "tokensar_rel": rng.random(offsets[-1]),
        "mars_u": rng.random(offsets[-1]),
        "beam": np.sort(-rng.exponential(1.0, (n, 5)), axis=1)[:, ::-1],
    }
    batch = TraceBatch(s, h, offsets).checked()
    return TaskStats(name, [f"{name}-{i}" for i in range(n)], y, Inputs(batch, None, stats), "synthetic")


def load(source: str, run: Path, n: int) -> list[Any]:
    if source == "memory":
        return [memory_task(t, n // 4, 10 + k) for k, t in enumerate(TASKS)]
    from bench_scale import config, synthetic_tasks

    from tracecal.estimators import needs_of
    from tracecal.evaluation.run import load_task_stats
    from tracecal.evaluation.runstore import RunStore

    store = RunStore(run)
    passes = needs_of(config(n // 4, 64).estimators)
    return [load_task_stats(store, t, exs, passes) for t, exs in synthetic_tasks(store, n // 4)]


def rss_gib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def child_score(a: argparse.Namespace) -> dict[str, Any]:
    from tracecal.evaluation.protocol import ScoreConfig, score_tasks
    from tracecal.testing import SYNTHETIC_ESTIMATORS

    t0 = time.perf_counter()
    data = load(a.source, a.run, a.n)
    load_s, rss_load = time.perf_counter() - t0, rss_gib()
    cfg = ScoreConfig(list(SYNTHETIC_ESTIMATORS), n_seeds=20, n_boot=a.n_boot)
    w0, c0 = time.perf_counter(), time.process_time()
    res = score_tasks(data, cfg)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    if a.out:
        keep = {
            t: {e: {k: v[k]["mean"] for k in METRIC_KEYS if k in v} for e, v in per.items()}
            for t, per in res.metrics.items()
        }
        a.out.write_text(json.dumps(keep))
    out = {"score_s": wall, "score_cpu_s": cpu, "load_s": load_s, "rss_after_load_gib": rss_load}
    out["rss_after_score_gib"] = rss_gib()
    return out | (lower_bound(data) if a.lower_bound else {})


def lower_bound(data: list[Any]) -> dict[str, float]:
    """Seconds (wall, CPU) of the bare NumPy arithmetic of the metrics on ``data`` (module docstring)."""
    from scipy.special import expit

    from tracecal.signals.operators import trace_confidence
    from tracecal.stats.splits import stratified_split

    scores = [trace_confidence(d.inputs.batch) for d in data]
    w0, c0 = time.perf_counter(), time.process_time()
    for d, score in zip(data, scores, strict=True):
        y, n = d.y, len(d)
        score[~np.isfinite(score)] = 0.0
        splits = [stratified_split(y, 0.35, s) for s in range(20)]
        cal = np.stack([c for c, _ in splits])
        in_ev = np.ones((20, n), dtype=bool)
        in_ev[np.arange(20)[:, None], cal] = False
        for _ in range(24):
            order = np.argsort(score, kind="stable")
            keep = in_ev[:, order]
            idx = np.broadcast_to(order, keep.shape)[keep].reshape(20, -1)
            ys, ss = y[idx], score[idx]
            np.cumsum(ys, axis=1)
            zc, yc = score[cal], y[cal]
            a0, w = np.zeros(20), np.zeros(20)
            for _ in range(5):
                p = expit(a0[:, None] + w[:, None] * zc)
                r_, v = p - yc, p * (1 - p)
                a0, w = a0 - r_.sum(1) / v.sum(1), w - (r_ * zc).sum(1) / (v * zc * zc).sum(1)
            prob = expit(a0[:, None] + w[:, None] * ss)
            ((prob - ys) ** 2).mean(axis=1)
            np.bincount((np.arange(20)[:, None] * 10 + np.minimum(prob * 10, 9).astype(int)).ravel(), minlength=200)
    return {"lower_bound_s": time.perf_counter() - w0, "lower_bound_cpu_s": time.process_time() - c0}


def compare(before: Path, after: Path) -> dict[str, float]:
    """The largest |after − before| of each metric's mean over every task and estimator."""
    a, b = json.loads(before.read_text()), json.loads(after.read_text())
    out: dict[str, float] = {}
    for t, per in a.items():
        for e, mm in per.items():
            for k, v in mm.items():
                w = b[t][e].get(k, float("nan"))
                d = 0.0 if (v is None or v != v) and (w is None or w != w) else abs(v - w)
                out[k] = max(out.get(k, 0.0), d)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100000")
    ap.add_argument("--source", choices=("run", "memory"), default="run")
    ap.add_argument("--n-boot", type=int, default=0)
    ap.add_argument("--before", help="a git commit whose score_tasks is measured too (same data)")
    ap.add_argument("--no-lower-bound", action="store_true")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--tmp", type=Path)
    ap.add_argument("--child", choices=("score",), help=argparse.SUPPRESS)
    ap.add_argument("--lower-bound", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--run", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child_score(a)))
        return
    from before import in_child, source_of

    rows = []
    with tempfile.TemporaryDirectory(dir=a.tmp) as tmp:
        old = source_of(a.before, Path(tmp) / "before") if a.before else None
        for n in (int(s) for s in a.sizes.split(",")):
            run, row = Path(tmp) / f"run{n}", {"n": n, "source": a.source, "n_boot": a.n_boot}
            if a.source == "run":
                sys.path.insert(0, str(Path(__file__).parent))
                from bench_scale import in_child as build

                row["build"] = build("build", run, n, 64)
            common = ["--source", a.source, "--run", str(run), "--n", str(n), "--n-boot", str(a.n_boot)]
            sides = [("before", old), ("after", None)] if old else [("after", None)]
            for side, src in sides:
                out = Path(tmp) / f"{side}{n}.json"
                lb = [] if side == "before" or a.no_lower_bound else ["--lower-bound"]
                row[side] = in_child(__file__, ["--child", "score", "--out", str(out), *lb, *common], src)
                print(json.dumps({side: row[side]}), flush=True)
            if old and "failed" not in row["before"] and "failed" not in row["after"]:
                row["max_abs_diff"] = compare(Path(tmp) / f"before{n}.json", Path(tmp) / f"after{n}.json")
            if "lower_bound_cpu_s" in row["after"]:
                row["ratio_to_lower_bound_cpu"] = row["after"]["score_cpu_s"] / row["after"]["lower_bound_cpu_s"]
            row["load_avg"] = os.getloadavg()[0]
            rows.append(row)
            print(json.dumps(row), flush=True)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
