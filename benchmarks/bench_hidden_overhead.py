"""Cost of recording hidden-state summaries during generation: tracecal's generation with and without them.

    python benchmarks/bench_hidden_overhead.py [--n 32] [--batch-size 16] [--max-new-tokens 32] [--rounds 2]

Same model (the offline default, SmolLM2-135M-Instruct), the same prompts (TriviaQA questions, chat template, stop
strings of the task), the same batches, greedy decoding; ``generate`` without and with ``hidden_layers="auto"``
(3 layers) run alternately batch by batch (without first on even batches, with first on odd ones) and the answers
must be identical. Prints tokens/s of each, the throughput ratio and the bytes a summary keeps per answer. Then the
recorder's own share, which the wall clock of a shared machine cannot resolve: one more generation with hidden
states under cProfile, and the time spent inside `tracecal.backends.hidden` (its layer hooks, the per-step logits
processor, the summaries) over the time of that generation.

The gateway's path is timed in the same loop (third arm): the gateway generates without the recorder (so that
streaming's and early stopping's step hooks stay as they are) and gives each finished answer its summary from one
teacher-forced pass over its prompt and tokens (`tracecal.serve.scoring.record_extra`, ``trace_answers``); printed:
that pass's time over the generation's, and the largest difference between its summaries and the recorder's.
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import tracecal  # noqa: E402
from tracecal.tasks import get_task  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    lm = tracecal.load_model(batch_size=a.batch_size, dtype="float32")
    task = get_task("triviaqa")
    prompts = [task.prompt(ex, chat=True) for ex in task.load(limit=a.n)]
    stops = tuple(task.stop_strings(True))
    kw = {"max_new_tokens": a.max_new_tokens, "stop_strings": stops}
    print(f"model {lm.model_id}, {a.n} prompts, batch {a.batch_size}, max_new_tokens {a.max_new_tokens}")
    lm.generate(prompts[:2], max_new_tokens=2, hidden_layers="auto")  # warm-up (not timed)
    batches = [prompts[i : i + a.batch_size] for i in range(0, len(prompts), a.batch_size)]
    t_off, t_on, t_forced = np.zeros(a.rounds), np.zeros(a.rounds), np.zeros(a.rounds)
    same, tokens, sizes, gap = True, 0, [], 0.0
    for r in range(a.rounds):
        for j, batch in enumerate(batches):
            runs = {}
            for mode in ("off", "on") if j % 2 == 0 else ("on", "off"):
                t0 = time.perf_counter()
                runs[mode] = lm.generate(batch, **kw, **({"hidden_layers": "auto"} if mode == "on" else {}))
                dt = time.perf_counter() - t0
                if mode == "on":
                    t_on[r] += dt
                else:
                    t_off[r] += dt
            same &= all(np.array_equal(x.token_ids, y.token_ids) for x, y in zip(runs["off"], runs["on"], strict=True))
            t0 = time.perf_counter()  # the gateway's second pass over the answers generated without the recorder
            ids = [t.token_ids.tolist() for t in runs["off"]]
            forced = lm.trace_answers(batch, ids, batch_size=len(ids), hidden_layers="auto")
            t_forced[r] += time.perf_counter() - t0
            gaps = [float(np.abs(f.hidden - o.hidden).max()) for f, o in zip(forced, runs["on"], strict=True)]
            gap = max([gap, *gaps])
            if r == 0:
                tokens += sum(t.length for t in runs["off"])
                sizes += [t.hidden.nbytes for t in runs["on"]]
    off, on = float(np.median(t_off)), float(np.median(t_on))
    print(f"identical answers: {same}  ({tokens} answer tokens per run)")
    print(
        f"without hidden states: {tokens / off:.1f} tokens/s (median {off:.2f} s; runs {np.round(t_off, 2).tolist()})"
    )
    print(f"with hidden states:    {tokens / on:.1f} tokens/s (median {on:.2f} s; runs {np.round(t_on, 2).tolist()})")
    print(f"throughput ratio with/without: {off / on:.4f}  (overhead {100 * (on / off - 1):+.2f}%)")
    print(f"summary kept per answer: {sizes[0]} bytes (2 × 3 layers × d float32)")
    forced = float(np.median(t_forced))
    print(
        f"gateway's teacher-forced pass: {100 * forced / off:.1f}% of the generation's time (median {forced:.2f} s; "
        f"runs {np.round(t_forced, 2).tolist()}); largest |summary difference| vs the recorder {gap:.2e}"
    )
    share = recorder_share(lm, batches[0], kw)
    print(f"time inside tracecal.backends.hidden (cProfile, one batch): {100 * share:.2f}% of the generation")
    print(
        json.dumps(
            {
                "ratio": off / on,
                "identical": bool(same),
                "tokens": tokens,
                "bytes_per_answer": sizes[0],
                "recorder_share": share,
                "gateway_pass_share": forced / off,
                "gateway_summary_gap": gap,
            }
        )
    )


def recorder_share(lm: object, batch: list, kw: dict) -> float:
    """The share of one ``generate(..., hidden_layers="auto")`` spent in `tracecal.backends.hidden`'s functions
    (their own time, cProfile): what recording costs, without the machine's noise."""
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    lm.generate(batch, hidden_layers="auto", **kw)  # type: ignore[attr-defined]
    prof.disable()
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in stats.values())  # own times add up to the profiled time

    def ours(key: tuple) -> bool:
        return key[0].endswith("tracecal/backends/hidden.py")

    # cumulative time of the recorder's entry points (called from outside the module: hooks, processor, finish)
    inside = sum(v[3] for k, v in stats.items() if ours(k) and not any(ours(c) for c in v[4]))
    return inside / total


if __name__ == "__main__":
    main()
