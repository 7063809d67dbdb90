"""Benchmark: peak memory of the verbalised-confidence and P(True) passes on long prompts (MLQA-like contexts),
with the batches bounded by `tracecal.backends.base.PREFILL_TOKENS` and logits kept at the last position only
(``new``), against one batch of ``--batch-size`` rows with logits at every position as before (``old``).

    python benchmarks/bench_selfeval_memory.py [--model M] [--dtype bfloat16] [--rows 32] [--context-words 450]

Each mode runs in a fresh process (its peak RSS, `resource.getrusage`, is the process's own); the numbers of the
two modes are compared (P(True) and v per answer, max |Δ|).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def child(mode: str, a: argparse.Namespace) -> dict[str, object]:
    import torch

    import tracecal.backends.base as base
    import tracecal.backends.hf_passes as hfp
    import tracecal.passes.selfeval as se
    from tracecal.backends import load_model

    torch.set_num_threads(1)
    if mode == "old":  # one batch of --batch-size rows, logits at every position
        for mod in (hfp, se):
            mod.last_logits_only = lambda model: {}  # type: ignore[attr-defined]
            mod.length_batches = lambda n, bs, max_tokens=0: base.length_batches(n, bs, 10**12)  # type: ignore
    lm = load_model(a.model, dtype=a.dtype) if a.model else load_model(dtype=a.dtype)
    words = ("the river flows north past the old mill and the village school " * 60).split()
    qs = [
        f"Context: {' '.join(words[i : i + a.context_words])}\nQuestion: where does the river flow, {i}?"
        for i in range(a.rows)
    ]
    ans = [f"north {i}" for i in range(a.rows)]
    t0 = time.perf_counter()
    pt = se.p_true(lm, qs, ans, batch_size=a.batch_size)
    v, _, _ = se.verbalized_confidence(lm, qs, ans, batch_size=a.batch_size)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB → GiB
    return {"mode": mode, "s": time.perf_counter() - t0, "peak_rss_gib": peak, "p_true": pt.tolist(), "v": v.tolist()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--context-words", type=int, default=450)
    ap.add_argument("--child")
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.child, a)))
        return
    res = {}
    for mode in ("old", "new"):
        argv = [sys.executable, __file__, "--child", mode, *sys.argv[1:]]
        out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
        res[mode] = json.loads(out)
        print(f"{mode}: {res[mode]['s']:.1f} s, peak RSS {res[mode]['peak_rss_gib']:.2f} GiB")
    for k in ("p_true", "v"):
        d = max(abs(x - y) for x, y in zip(res["old"][k], res["new"][k], strict=True))
        print(f"max |Δ {k}| old vs new: {d:.2e}")


if __name__ == "__main__":
    main()
