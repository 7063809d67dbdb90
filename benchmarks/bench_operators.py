"""Throughput of TRACE and the TRACE+ features over synthetic traces (one core), before and after the one sweep.

    python benchmarks/bench_operators.py [--n 1000000] [--max-len 64] [--repeats 3] [--before REF] [--rounds 2]

On one ragged batch of ``--n`` traces (lengths uniform in 1 … ``--max-len``), best of ``--repeats``:

* ``TRACE``: `trace_confidence` alone;
* ``TRACE + 8 features (separate)``: `trace_confidence` then `trace_plus_features` (two passes);
* ``TRACE + 8 features (one sweep)`` and ``TRACE + 11 features (one sweep)``: `trace_and_features` (the 11 add the
  sequence-likelihood ablation's three), only where the code has it.

With ``--before REF`` the same measurements run on the tracecal of git commit ``REF`` too (`before.source_of`), in
alternating child processes for ``--rounds`` rounds (before, after, before, after, …), so that both sides see the
same load; every round's traces/s and the after/before ratio of each round are printed. Target (issue 21): TRACE +
the TRACE+ features ≥ 1,000,000 traces/s on one core.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

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


def measure(n: int, max_len: int, repeats: int) -> dict[str, float]:
    """traces/s of each variant the imported tracecal has (best of ``repeats``, a fresh layout every time), by wall
    time and by CPU time (the process's own: on a shared machine the wall time also counts the others' turns)."""
    b = make_batch(n, max_len)
    variants = {
        "TRACE": trace_confidence,
        "TRACE + 8 features (separate)": lambda bb: (trace_confidence(bb), trace_plus_features(bb)),
    }
    try:
        from tracecal.signals.features import trace_and_features
    except ImportError:  # the code before the sweep
        pass
    else:
        variants["TRACE + 8 features (one sweep)"] = trace_and_features
        variants["TRACE + 11 features (one sweep)"] = lambda bb: trace_and_features(bb, seq_likelihood=True)
    rates = {}
    for name, fn in variants.items():
        best, best_cpu = float("inf"), float("inf")
        for _ in range(repeats):
            fresh = TraceBatch(b.surprisal, b.entropy, b.offsets)  # no cached layout between repeats
            t0, c0 = time.perf_counter(), time.process_time()
            fn(fresh)
            best, best_cpu = min(best, time.perf_counter() - t0), min(best_cpu, time.process_time() - c0)
        rates[name], rates[f"{name} [CPU time]"] = n / best, n / best_cpu
    return rates


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--max-len", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--before", help="a git commit whose tracecal is measured too, in alternating child processes")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    size = ["--n", str(a.n), "--max-len", str(a.max_len), "--repeats", str(a.repeats)]
    if a.child:
        print(json.dumps(measure(a.n, a.max_len, a.repeats)))
        return
    print(f"{a.n:,} traces, lengths 1-{a.max_len}, ≈{a.n * (a.max_len + 1) // 2:,} tokens; best of {a.repeats}")
    if not a.before:
        for name, rate in measure(a.n, a.max_len, a.repeats).items():
            print(f"{name:<45s} {a.n / rate:7.3f} s   {rate:>12,.0f} traces/s")
        return
    from before import in_child, source_of

    with tempfile.TemporaryDirectory() as tmp:
        old = source_of(a.before, Path(tmp))
        for r in range(a.rounds):
            res = {
                side: in_child(__file__, [*size, "--child"], src) for side, src in (("before", old), ("after", None))
            }
            load = os.getloadavg()[0]
            for side, rates in res.items():
                for name, rate in rates.items():
                    if name not in ("wall_s", "peak_rss_gib"):
                        print(f"round {r + 1} {side:<6s} {name:<45s} {rate:>12,.0f} traces/s")
            sep = "TRACE + 8 features (separate)"
            fused = res["after"].get("TRACE + 8 features (one sweep)", float("nan"))
            trace_ratio = res["after"]["TRACE"] / res["before"]["TRACE"]
            print(
                f"round {r + 1} ratio TRACE + 8 features, one sweep (after) / separate (before): "
                f"{fused / res['before'][sep]:.2f}x; TRACE after/before {trace_ratio:.2f}x  (load {load:.1f})",
                flush=True,
            )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
