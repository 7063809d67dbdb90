"""Throughput of TRACE and the TRACE+ features over synthetic traces (one core).

    python benchmarks/bench_operators.py [--n 1000000] [--max-len 64] [--repeats 3]

Prints traces/s for TRACE alone and for TRACE + the 8 TRACE+ features, computed on one ragged batch.
Target (issue 2): ≥ 1,000,000 traces/s on one core.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import time  # noqa: E402

import numpy as np  # noqa: E402

from tracecal.signals.features import trace_plus_features  # noqa: E402
from tracecal.signals.operators import trace_confidence  # noqa: E402
from tracecal.traces.trace import TraceBatch  # noqa: E402


def make_batch(n: int, max_len: int, seed: int = 0) -> TraceBatch:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, max_len + 1, n)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    N = int(offsets[-1])
    return TraceBatch(rng.gamma(1.0, 0.7, N), rng.gamma(1.0, 1.2, N), offsets)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--max-len", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    b = make_batch(a.n, a.max_len)
    print(f"{a.n:,} traces, lengths 1-{a.max_len}, {len(b.surprisal):,} tokens; best of {a.repeats}")
    res = {}
    for name, fn in (
        ("TRACE", lambda bb: trace_confidence(bb)),
        ("TRACE + TRACE+ features", lambda bb: (trace_confidence(bb), trace_plus_features(bb))),
    ):
        best = float("inf")
        for _ in range(a.repeats):
            fresh = TraceBatch(b.surprisal, b.entropy, b.offsets)  # no cached layout between repeats
            t0 = time.perf_counter()
            fn(fresh)
            best = min(best, time.perf_counter() - t0)
        res[name] = a.n / best
        print(f"{name:<26s} {best:7.3f} s   {a.n / best:>12,.0f} traces/s")
    print(f"ratio TRACE+features / TRACE throughput: {res['TRACE + TRACE+ features'] / res['TRACE']:.2f}")


if __name__ == "__main__":
    main()
