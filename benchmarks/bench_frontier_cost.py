"""What one pass costs against K samples, in CPU-seconds of one process: the frontier's CPU axis measured side by side.

    python benchmarks/bench_frontier_cost.py [--model qwen2.5-coder-1.5b] [--backend llamacpp] [--n 16] [--k 10]

`tracecal frontier` charges the greedy pass the seconds its run's ``timings.json`` recorded (wall clock of a worker,
inflated where the machine was shared) and the samples the process CPU time the samples pass measured per question.
This benchmark measures both the same way in one process: the process CPU time (`time.process_time`, every thread)
of the greedy pass (`GenerationPass`: the task's prompts, stop strings and token budget) over the first ``n``
TriviaQA questions, then of the samples pass (`SamplesPass`, K samples at T = 1, the frontier run's settings) over
the same questions and answers, alternated over ``--rounds`` (greedy first on even rounds). Prints CPU-s per
question of each, their ratio, and the decode tokens of each (greedy: its answer tokens; samples: the pass's own
count).
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

import tracecal  # noqa: E402
from tracecal.passes.builtin import GenerationPass  # noqa: E402
from tracecal.passes.sampling import SamplesPass  # noqa: E402
from tracecal.tasks import get_task  # noqa: E402


def cpu(fn):  # type: ignore[no-untyped-def]
    t0 = time.process_time()
    out = fn()
    return out, time.process_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--backend", default="llamacpp")
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    lm = tracecal.load_model(a.model, backend=a.backend, threads=1)
    task = get_task("triviaqa")
    exs = task.load(limit=a.n)
    greedy_pass, samples_pass = GenerationPass(), SamplesPass(num_samples=a.k)
    traces = greedy_pass.compute(lm, task, exs, [])  # the answers the samples are compared with (and a warm-up)
    g_s: list[float] = []
    s_s: list[float] = []
    g_tok = s_tok = 0.0
    for r in range(a.rounds):
        for which in ("greedy", "samples") if r % 2 == 0 else ("samples", "greedy"):
            if which == "greedy":
                got, sec = cpu(lambda: greedy_pass.compute(lm, task, exs, []))
                g_s.append(sec / len(exs))
                g_tok = float(np.mean([len(t.token_ids) for t in got]))
            else:
                cols, sec = cpu(lambda: samples_pass.compute(lm, task, exs, traces))
                s_s.append(sec / len(exs))
                s_tok = float(np.mean(cols["sample_decode_tokens"]))
    g, s = float(np.median(g_s)), float(np.median(s_s))
    print(f"{a.model} ({a.backend}), {a.n} TriviaQA questions, {a.rounds} rounds, one thread")
    rounds = lambda xs: ", ".join(f"{x:.2f}" for x in xs)  # noqa: E731
    print(f"greedy:     {g:.2f} CPU-s / question (rounds: {rounds(g_s)}), {g_tok:.1f} tokens")
    print(f"K = {a.k} samples: {s:.2f} CPU-s / question (rounds: {rounds(s_s)}), {s_tok:.1f} tokens")
    print(f"samples / greedy: {s / g:.1f}× CPU, {s_tok / max(g_tok, 1e-9):.1f}× decode tokens")


if __name__ == "__main__":
    main()
