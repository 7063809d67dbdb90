"""torch threads: the default rule (`tracecal.backends.runtime.auto_threads`) against 1 and 2 threads, idle and
beside a CPU hog, for what ``tracecal generate`` and ``tracecal score-answers`` compute.

    python benchmarks/bench_threads.py [--n 8] [--repeats 3] [--conditions idle,hog] [--arm-budget 60] [--json F]

One process loads the offline default model (SmolLM2-135M-Instruct, the dtype ``auto`` resolves to) once. Per
condition (``idle``: nothing started; ``hog``: a busy-looping Python process started 1 s before and killed after)
and per repeat, each setting runs in turn (the order rotates per repeat): ``default`` (the thread count the rule
picks at that moment, as `load_model` does when no ``--threads`` is given), ``1`` and ``2``. Each times the
generation of ``--n`` TriviaQA answers (chat prompts, the task's stop strings and length limit: ``generate
--task triviaqa --limit N``) and the teacher-forced trace of ``--n`` answers (``score-answers``: the answers the
warm-up generated). Prints the medians and default / min(1 thread, 2 threads) per condition and command; a
setting whose generation once took over ``--arm-budget`` seconds (2 threads on a busy machine) is not repeated.
``OMP_NUM_THREADS`` must be unset (the rule would follow it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

import tracecal  # noqa: E402
from tracecal.backends.runtime import apply_threads, auto_threads, busy_cpus, usable_cpus  # noqa: E402
from tracecal.tasks import get_task  # noqa: E402

SETTINGS = ("default", "1", "2")
HOG = "while True: pass"


def timed(f):  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


def run_condition(lm, work, repeats: int, arm_budget: float) -> dict:  # type: ignore[no-untyped-def]
    """{setting: {"threads": [...], "generate": [s...], "score_answers": [s...]}} over ``repeats`` rounds; a setting
    whose generation took over ``arm_budget`` seconds once is not repeated (its one sample stands)."""
    prompts, answers, mnt, stops = work
    out: dict = {s: {"threads": [], "generate": [], "score_answers": []} for s in SETTINGS}
    for r in range(repeats):
        for s in SETTINGS[r % 3 :] + SETTINGS[: r % 3]:
            if out[s]["generate"] and max(out[s]["generate"]) > arm_budget:
                continue
            n = apply_threads(auto_threads() if s == "default" else int(s))  # default: a fresh process's choice
            out[s]["threads"].append(n)
            out[s]["generate"].append(
                timed(lambda: lm.generate(prompts, max_new_tokens=mnt, stop_strings=stops))  # noqa: B023
            )
            out[s]["score_answers"].append(timed(lambda: lm.trace_answers(prompts, answers)))  # noqa: B023
            print(
                f"  {s:>7}: {n} threads, generate {out[s]['generate'][-1]:.2f} s, "
                f"score-answers {out[s]['score_answers'][-1]:.2f} s",
                flush=True,
            )
    return out


def summary(cond: str, res: dict) -> list[dict]:  # type: ignore[type-arg]
    rows = []
    for cmd in ("generate", "score_answers"):
        med = {s: statistics.median(res[s][cmd]) for s in SETTINGS}
        best = min(med["1"], med["2"])
        rows.append(
            {
                "condition": cond,
                "command": cmd.replace("_", "-"),
                "default_threads": sorted(set(res["default"]["threads"])),
                "samples": [len(res[s][cmd]) for s in SETTINGS],
                **{f"median_s_{s}": round(med[s], 3) for s in SETTINGS},
                "default_over_best": round(med["default"] / best, 3),
                # default and 1 thread run side by side in every round: their per-round ratio is what drift spares
                "paired_default_over_1": round(
                    statistics.median(d / o for d, o in zip(res["default"][cmd], res["1"][cmd], strict=False)), 3
                ),
                "two_over_one": round(med["2"] / med["1"], 3),
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--conditions", default="idle,hog")
    ap.add_argument("--json", default=None)
    ap.add_argument("--arm-budget", type=float, default=60.0, help="s: a setting slower than this runs once")
    a = ap.parse_args()
    if os.environ.get("OMP_NUM_THREADS"):
        sys.exit("unset OMP_NUM_THREADS: the default rule follows it, so the benchmark would not measure the rule")
    lm = tracecal.load_model(batch_size=16)
    task = get_task("triviaqa")
    prompts = [task.prompt(ex, chat=lm.chat) for ex in task.load(limit=a.n)]
    mnt, stops = task.max_new_tokens, tuple(task.stop_strings(lm.chat))
    answers = [t.text for t in lm.generate(prompts, max_new_tokens=mnt, stop_strings=stops)]  # warm-up
    lm.trace_answers(prompts, answers)
    dtype = str(lm.model.dtype).removeprefix("torch.")
    print(
        f"model {lm.model_id} ({dtype}), {a.n} TriviaQA questions, {usable_cpus()} usable CPUs, "
        f"torch {torch.__version__}, load average {os.getloadavg()}",
        flush=True,
    )
    rows, raw = [], {}
    for cond in a.conditions.split(","):
        hog = subprocess.Popen([sys.executable, "-c", HOG]) if cond == "hog" else None
        try:
            time.sleep(1.0)
            print(f"{cond}: other processes keep {busy_cpus(window_s=1.0):.2f} CPUs busy", flush=True)
            raw[cond] = run_condition(lm, (prompts, answers, mnt, stops), a.repeats, a.arm_budget)
        finally:
            if hog is not None:
                hog.kill()
                hog.wait()
        rows += summary(cond, raw[cond])
    print(
        "\n| condition | command | default threads | default s | 1 thread s | 2 threads s | default / best "
        "| default / 1, paired | 2 / 1 |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['condition']} | {r['command']} | {','.join(map(str, r['default_threads']))} | "
            f"{r['median_s_default']:.2f} | {r['median_s_1']:.2f} | {r['median_s_2']:.2f} | "
            f"{r['default_over_best']:.2f}× | {r['paired_default_over_1']:.2f}× | {r['two_over_one']:.2f}× |"
        )
    worst = max(r["default_over_best"] for r in rows)
    print(f"\nworst default / best: {worst:.2f}× ({'within' if worst <= 1.2 else 'OVER'} the 1.2× bound)")
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump({"rows": rows, "raw": raw, "n": a.n, "repeats": a.repeats, "dtype": dtype}, f, indent=1)


if __name__ == "__main__":
    main()
