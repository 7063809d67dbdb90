"""Wall time and peak memory of a SECL stream run (frozen pass + SECL pass) on this machine's CPUs.

    python benchmarks/bench_secl.py [--stream triviaqa,svamp,arc_easy,truthfulqa] [--per-domain 150]
        [--threads 2] [--cache runs/frozen.json] [--out runs/secl.json] [--set key=value ...]

Loads the offline default model, builds the stream, runs the frozen pass (answers, τ, v of the base model;
skipped when ``--cache`` holds a matching one) and the SECL pass with `SECLConfig` defaults (or ``--set``
overrides), and prints one JSON object: seconds per stage (model load, frozen pass with its generate/τ/v
split, SECL pass with its update/v split), seconds per question, peak resident memory (``ru_maxrss`` of this
process, which includes the model), torch threads, the 1-minute load average before and after (other
processes share the CPUs), and SECL's headline numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

import tracecal  # noqa: E402
from tracecal.cli.secl import parse_overrides  # noqa: E402
from tracecal.secl import FrozenPass, SECLConfig, build_stream, frozen_pass, run_secl  # noqa: E402


def peak_rss_mib() -> float:
    """Peak resident set size of this process in MiB (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stream", default="triviaqa,svamp,arc_easy,truthfulqa")
    ap.add_argument("--per-domain", type=int, default=150)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--cache", default=None, help="frozen-pass cache JSON (reused when it matches)")
    ap.add_argument("--out", default=None, help="write the SECL result JSON here")
    ap.add_argument("--save-adapter", default=None)
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="SECLConfig key=value")
    ap.add_argument("--progress", action="store_true", help="log progress to stderr")
    a = ap.parse_args()
    t_begin = time.perf_counter()

    last: dict[str, int] = {}

    def progress(stage: str, done: int, total: int) -> None:
        if a.progress and (done == total or done - last.get(stage, 0) >= 25):
            last[stage] = done
            print(f"[{time.perf_counter() - t_begin:7.0f}s] {stage} {done}/{total}", file=sys.stderr, flush=True)

    torch.set_num_threads(a.threads)
    load0 = os.getloadavg()[0]
    rss0 = peak_rss_mib()
    t0 = time.perf_counter()
    lm = tracecal.load_model(batch_size=a.batch_size)
    t_load = time.perf_counter() - t0
    rss_model = peak_rss_mib()
    items = build_stream(a.stream, a.per_domain)
    frozen = None
    if a.cache and os.path.isfile(a.cache):
        frozen = FrozenPass.load(a.cache).select(items)  # the cached stream or a sub-stream of it
    reused = frozen is not None
    t1 = time.perf_counter()
    if frozen is None:
        frozen = frozen_pass(lm, items, a.batch_size, progress)
        if a.cache:
            frozen.save(a.cache)
    t_frozen = time.perf_counter() - t1
    rss_frozen = peak_rss_mib()
    cfg = SECLConfig(batch_size=a.batch_size, **parse_overrides(a.overrides))
    t2 = time.perf_counter()
    res = run_secl(lm, items, cfg, frozen=frozen, progress=progress, save_adapter=a.save_adapter)
    t_secl = time.perf_counter() - t2
    if a.out:
        res.to_json(a.out)
    s = res.summary()
    n = len(items)
    report = {
        "stream": a.stream,
        "per_domain": a.per_domain,
        "questions": n,
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "loadavg_1min_before_after": [round(load0, 2), round(os.getloadavg()[0], 2)],
        "seconds": {
            "model_load": round(t_load, 1),
            "frozen_pass": round(t_frozen if not reused else frozen.cost.time(), 1),
            "frozen_pass_reused_from_cache": reused,
            "frozen_split": {k: round(v, 1) for k, v in frozen.cost.seconds.items()},
            "secl_pass": round(t_secl, 1),
            "secl_split": {k: round(v, 1) for k, v in res.secl_cost.seconds.items()},
        },
        "seconds_per_question": {
            "frozen_pass": round((frozen.cost.time()) / n, 3),
            "secl_pass": round(t_secl / n, 3),
        },
        "peak_rss_mib": {
            "start": round(rss0, 1),
            "after_model_load": round(rss_model, 1),
            "after_frozen_pass": round(rss_frozen, 1),
            "after_secl_pass": round(peak_rss_mib(), 1),
        },
        "secl": {
            k: (round(v, 4) if isinstance(v, float) else v)
            for k, v in s.items()
            if k in ("ece_frozen_v", "ece_tau", "ece_secl_v", "ece_reduction", "trained_share", "updates")
        },
        "overhead_vs_tau_all": round(s["overhead_vs_tau_all"], 3),
        "config": {k: v for k, v in cfg.to_dict().items() if k in ("gate", "accumulate", "loss", "scope", "lr")},
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
