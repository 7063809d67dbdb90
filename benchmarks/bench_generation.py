"""Throughput of the evaluation's model passes: fp32 versus bf16 weights, plain versus shared-prefill beam search.

    python benchmarks/bench_generation.py [--task triviaqa] [--n 32] [--batch-size 16] [--beam-n 8]
        [--beam-task mlqa] [--rounds 2] [--threads 1]

Two models are loaded side by side (the offline default in float32 and in bfloat16). Recording generation
(`HFModel.generate`) runs on the same prompts alternately, fp32 first on even rounds and bf16 first on odd
ones, and prints seconds, answer tokens/s, the bf16/fp32 speed ratio, how many greedy answers are identical
and the largest |ΔH_t| on the tokens where the two agree. Then the 5-beam pass (`beam_scores`) of the fp32
model with ``shared_prefill=False`` (transformers expands every prompt 5× before prefilling) against
``shared_prefill=True`` (one prefill, the KV cache repeated), alternated the same way, with the largest
difference in beam scores. bf16 matmuls are fast on CPUs with AMX/AVX-512-BF16 and slow elsewhere: the
ratio is this machine's, not a constant.
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import tracecal  # noqa: E402
from tracecal.tasks import get_task  # noqa: E402


def timed(f):  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    out = f()
    return out, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="triviaqa")
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--beam-task", default="mlqa")
    ap.add_argument("--beam-n", type=int, default=8)
    ap.add_argument("--beam-tokens", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    fp32 = tracecal.load_model(dtype="float32", batch_size=a.batch_size)
    bf16 = tracecal.load_model(dtype="bfloat16", batch_size=a.batch_size)
    task = get_task(a.task)
    exs = task.load(limit=a.n)
    prompts = [task.prompt(ex, chat=True) for ex in exs]
    mnt = task.max_new_tokens
    stops = tuple(task.stop_strings(True))
    fp32.generate(prompts[:2], max_new_tokens=2)  # warm-up
    bf16.generate(prompts[:2], max_new_tokens=2)
    sec = {"float32": 0.0, "bfloat16": 0.0}
    toks = {"float32": 0, "bfloat16": 0}
    outs: dict[str, list] = {}
    for r in range(a.rounds):
        for name in ("float32", "bfloat16") if r % 2 == 0 else ("bfloat16", "float32"):
            lm = fp32 if name == "float32" else bf16
            tr, dt = timed(lambda lm=lm: lm.generate(prompts, max_new_tokens=mnt, stop_strings=stops))
            sec[name] += dt
            toks[name] += sum(t.length for t in tr)
            outs[name] = tr
    same = [a_.text == b_.text for a_, b_ in zip(outs["float32"], outs["bfloat16"], strict=True)]
    dh = [
        float(np.abs(x.entropy - y.entropy).max())
        for x, y in zip(outs["float32"], outs["bfloat16"], strict=True)
        if x.text == y.text and x.length
    ]
    bexs = get_task(a.beam_task).load(limit=a.beam_n)
    bprompts = [get_task(a.beam_task).prompt(ex, chat=True) for ex in bexs]
    bsec = {"plain": 0.0, "shared_prefill": 0.0}
    bout: dict[str, np.ndarray] = {}
    for r in range(a.rounds):
        for name in ("plain", "shared_prefill") if r % 2 == 0 else ("shared_prefill", "plain"):
            sc, dt = timed(
                lambda name=name: fp32.beam_scores(
                    bprompts, 5, a.beam_tokens, batch_size=a.batch_size, shared_prefill=name == "shared_prefill"
                )
            )
            bsec[name] += dt
            bout[name] = sc
    report = {
        "task": a.task,
        "prompts": a.n,
        "rounds": a.rounds,
        "torch_threads": torch.get_num_threads(),
        "loadavg_1min": round(os.getloadavg()[0], 2),
        "generate_seconds": {k: round(v, 1) for k, v in sec.items()},
        "answer_tokens_per_s": {k: round(toks[k] / sec[k], 1) for k in sec},
        "bf16_speedup": round(sec["float32"] / sec["bfloat16"], 2),
        "identical_answers": f"{sum(same)}/{len(same)}",
        "max_abs_dH_where_identical_nats": round(max(dh), 4) if dh else None,
        "beam": {
            "task": a.beam_task,
            "prompts": a.beam_n,
            "beams": 5,
            "max_new_tokens": a.beam_tokens,
            "seconds": {k: round(v, 1) for k, v in bsec.items()},
            "shared_prefill_speedup": round(bsec["plain"] / bsec["shared_prefill"], 2),
            "max_abs_score_diff": float(np.nanmax(np.abs(bout["plain"] - bout["shared_prefill"]))),
        },
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
