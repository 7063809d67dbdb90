"""The fastest backend for the 1.5 B model on this CPU: HF bf16 (batched) against llama.cpp in-process (issue 21).

    . scripts/env.sh && OMP_NUM_THREADS=1 python benchmarks/bench_backends_1p5b.py [--model qwen2.5-coder-1.5b]
        [--task triviaqa] [--n 64] [--batch-size 16] [--threads 1] [--backends hf-bf16,lcpp,lcpp-extra]
        [--json out.json]

The same ``--n`` prompts of ``--task`` (chat template, greedy, the task's answer budget and stop strings, as
``tracecal evaluate`` sends them) go through

* ``hf-bf16``: the HF backend on the GGUF dequantised into the model cache, bf16 weights, batches of
  ``--batch-size`` (what the evidence runs use);
* ``lcpp``: llama.cpp in-process on the Q4_K_M GGUF itself, default buffers (batch-invariant kernels);
* ``lcpp-extra``: the same with llama.cpp's extra (repacked) buffer types, llama.cpp's own default.

and then the P(True) and verbalised-confidence pass over each backend's own answers (the evaluation's
self-evaluation prompts). One model is loaded at a time, ``--threads`` threads each (torch
``set_num_threads``, llama.cpp ``n_threads``). Reported: answer tokens/s, seconds of each pass, and how many
greedy answers agree with HF's (llama.cpp computes with the Q4_K_M weights, HF with their bf16 dequantisation, so
answers and traces differ; the evaluation's run identity records the backend for that reason).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

from tracecal.backends import load_model  # noqa: E402
from tracecal.backends.catalogue import named_gguf_path  # noqa: E402
from tracecal.backends.llamacpp import LlamaCppModel  # noqa: E402
from tracecal.passes.selfeval import p_true, verbalized_confidence  # noqa: E402
from tracecal.tasks import get_task  # noqa: E402


def timed(fn: Any, *args: Any, **kw: Any) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn(*args, **kw)
    return out, time.perf_counter() - t0


def measure(lm: Any, a: argparse.Namespace, bs: int) -> tuple[list, dict[str, Any]]:
    """Generation, then P(True) and verbalised over the answers, each timed."""
    task, ex = a.task_obj, a.examples
    prompts = [task.prompt(e, chat=True) for e in ex]
    lm.generate(prompts[:1], max_new_tokens=2)  # warm-up
    kw = {"max_new_tokens": task.max_new_tokens, "stop_strings": task.stop_strings(chat=True), "batch_size": bs}
    traces, sec = timed(lm.generate, prompts, **kw)
    qs, ans = [e.question for e in ex], [t.text for t in traces]
    _, s_pt = timed(p_true, lm, qs, ans, batch_size=bs)
    _, s_vb = timed(verbalized_confidence, lm, qs, ans, batch_size=bs)
    n = sum(t.length for t in traces)
    res = {
        "generate_s": round(sec, 1),
        "answer_tokens": n,
        "answer_tokens_per_s": round(n / sec, 2),
        "p_true_s": round(s_pt, 1),
        "verbalized_s": round(s_vb, 1),
        "loadavg_1min": round(os.getloadavg()[0], 2),
    }
    return traces, res


def save(out: dict[str, Any], path: str | None) -> None:
    """Write what has been measured so far (each backend as it finishes), if a path was given."""
    if path:
        Path(path).write_text(json.dumps(out, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--task", default="triviaqa")
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default=None)
    ap.add_argument("--backends", default="hf-bf16,lcpp-extra,lcpp", help="which to run (HF always runs first)")
    a = ap.parse_args()
    wanted = set(a.backends.split(","))
    torch.set_num_threads(a.threads)
    a.task_obj = get_task(a.task)
    a.examples = a.task_obj.load(limit=a.n)
    out: dict[str, Any] = {"model": a.model, "task": a.task, "prompts": len(a.examples), "threads": a.threads}
    hf = load_model(a.model, dtype="bfloat16", batch_size=a.batch_size)
    ref, out["hf-bf16"] = measure(hf, a, a.batch_size)
    save(out, a.json)
    tokenizer = hf.tokenizer
    del hf
    gc.collect()
    for name, extra in (("lcpp-extra", True), ("lcpp", False)):
        if name not in wanted:
            continue
        lm = LlamaCppModel.load(named_gguf_path(a.model), n_threads=a.threads, extra_buffers=extra, tokenizer=tokenizer)
        traces, out[name] = measure(lm, a, 1)
        same = sum(x.text == y.text for x, y in zip(ref, traces, strict=True))
        out[name]["answers_identical_to_hf"] = f"{same}/{len(ref)}"
        for key in ("answer_tokens_per_s", "p_true_s", "verbalized_s"):
            out[name][f"{key}_vs_hf"] = round(out[name][key] / out["hf-bf16"][key], 2)
        del lm
        gc.collect()
        save(out, a.json)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
