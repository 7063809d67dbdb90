"""Bootstrap AUROC: all resamples at once (`tracecal.stats.bootstrap.weighted_auroc`) against a loop of per-resample
calls.

    python benchmarks/bench_bootstrap.py [--n 1950] [--boot 1000] [--rate 0.1] [--task 3000]

1. One evaluation split of n answers (1,950 = 65 % of a 3,000-question task) and B resamples of the task's
   questions: the vectorised weighted AUROC of all B rows, against B calls of `tracecal.stats.metrics.auroc` and of
   ``sklearn.metrics.roc_auc_score`` on the resampled (expanded) arrays. Checks that all three agree.
2. What the statistics add to scoring one synthetic task of ``--task`` answers (20 splits; TRACE, two baselines,
   TRACE+ and TRACE+ with a prior): `score_tasks` with ``n_boot=0`` against ``n_boot=B``, and the time of each
   fitted estimator. Prints seconds and ratios side by side (one core).
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import time  # noqa: E402

import numpy as np  # noqa: E402
from sklearn.metrics import roc_auc_score  # noqa: E402

from tracecal.estimators import Inputs  # noqa: E402
from tracecal.evaluation.protocol import ScoreConfig, TaskStats, score_tasks  # noqa: E402
from tracecal.stats.bootstrap import bootstrap_counts, weighted_auroc  # noqa: E402
from tracecal.stats.metrics import auroc  # noqa: E402
from tracecal.traces.trace import TraceBatch  # noqa: E402


def scoring(n: int, boot: int) -> None:
    """Part 2: the protocol on one synthetic task, without and with the bootstrap, and per fitted estimator."""
    rng = np.random.default_rng(2)
    y = (rng.random(n) < 0.1).astype(np.int64)
    lengths = rng.integers(2, 24, n)
    off = np.concatenate([[0], np.cumsum(lengths)])
    scale = np.repeat(np.where(y == 1, 0.6, 1.0), lengths)
    b = TraceBatch(rng.gamma(1.0, 0.5, off[-1]) * scale, rng.gamma(1.0, 1.0, off[-1]) * scale, off)
    data = [TaskStats("t", [str(i) for i in range(n)], y, Inputs(b), "synthetic")]
    label_free = ["trace", "mean_prob", "neg_entropy_var"]
    rows = {}
    for name, ests, nb in (
        ("3 label-free, n_boot=0", label_free, 0),
        (f"3 label-free, n_boot={boot}", label_free, boot),
        ("trace_plus alone, n_boot=0", ["trace_plus"], 0),
        ("trace_plus_prior alone, n_boot=0", ["trace_plus_prior"], 0),
    ):
        t0 = time.perf_counter()
        score_tasks(data, ScoreConfig(ests, n_seeds=20, n_boot=nb))
        rows[name] = time.perf_counter() - t0
    print(f"\nscore_tasks on one task of {n} answers ({int(y.sum())} correct), 20 splits:")
    base = rows["3 label-free, n_boot=0"]
    for name, t in rows.items():
        print(f"{name:<34s} {t:8.2f} s   {t / base:7.1f}× the first row")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1950)
    ap.add_argument("--boot", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=0.1)
    ap.add_argument("--task", type=int, default=3000)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    y = (rng.random(a.n) < a.rate).astype(int)
    s = rng.normal(size=a.n) + 0.8 * y
    W = bootstrap_counts(y, a.boot, seed=1)
    idx = [np.repeat(np.arange(a.n), w) for w in W]  # the resamples written out, for the loops
    times, out = {}, {}
    for name, fn in (
        ("vectorised weighted AUROC", lambda: weighted_auroc(y, s, W)),
        ("loop of tracecal.stats.metrics.auroc", lambda: np.array([auroc(y[i], s[i]) for i in idx])),
        ("loop of sklearn roc_auc_score", lambda: np.array([roc_auc_score(y[i], s[i]) for i in idx])),
    ):
        t0 = time.perf_counter()
        out[name] = fn()
        times[name] = time.perf_counter() - t0
    ref = out["vectorised weighted AUROC"]
    assert all(np.allclose(v, ref, atol=1e-12) for v in out.values()), "the three disagree"
    print(f"n = {a.n} answers ({int(y.sum())} correct), B = {a.boot} resamples; all three agree to 1e-12")
    base = times["vectorised weighted AUROC"]
    for name, t in times.items():
        print(f"{name:<32s} {t:8.3f} s   {t / base:7.1f}× the vectorised time")
    scoring(a.task, a.boot)


if __name__ == "__main__":
    main()
