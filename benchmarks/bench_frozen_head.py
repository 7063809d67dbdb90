"""The output projection on the last position, for frozen weights, with and without a contiguous input.

    python benchmarks/bench_frozen_head.py [--vocab 151936] [--hidden 1536] [--batch 8] [--head-batches 1,8]
        [--rounds 3]
        [--model qwen2.5-coder-1.5b --dtype bfloat16]

With ``logits_to_keep=1`` a causal LM's head sees a strided (B, 1, H) slice of the last hidden states. A weight that
does not require grad (a peft model's frozen base, SECL's case) sent that slice down torch's broadcast-and-copy
matmul: the (|V|, H) weight copied once per batch row. `tracecal.backends.prefill.contiguous_head_input` makes
the input contiguous. Side by side, alternating, ``--rounds`` times, one thread:

* ``head``: a random head of the given shape (default: Qwen2.5-1.5B's 151,936 × 1,536, bf16), frozen, for each
  of ``--head-batches``: the strided input as is against a row-major copy; and the trainable weight's time;
* with ``--model``: one batched verbalised-confidence read (`number_distribution`, batch ``--batch``) of the
  model with a SECL adapter attached (after one update), the hook removed against installed.

Prints one JSON object: seconds per round and the median ratio for each.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402


def timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def side_by_side(slow: Callable[[], object], fast: Callable[[], object], rounds: int) -> dict[str, object]:
    """Alternate ``slow`` and ``fast`` ``rounds`` times (after one warm-up each)."""
    slow(), fast()
    s, f = [], []
    for _ in range(rounds):
        s.append(timed(slow))
        f.append(timed(fast))
    return {
        "strided_s": [round(x, 4) for x in s],
        "contiguous_s": [round(x, 4) for x in f],
        "median_ratio": round(statistics.median(a / b for a, b in zip(s, f, strict=True)), 1),
    }


def head_bench(vocab: int, hidden: int, batch: int, rounds: int) -> dict[str, object]:
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(vocab, hidden, generator=gen, dtype=torch.float32).to(torch.bfloat16) * 0.02
    h = torch.randn(batch, 64, hidden, generator=gen).to(torch.bfloat16)[:, -1:, :]
    with torch.no_grad():
        trainable = timed(lambda: torch.nn.functional.linear(h, weight.requires_grad_(True)))
        weight.requires_grad_(False)
        out = side_by_side(
            lambda: torch.nn.functional.linear(h, weight),
            lambda: torch.nn.functional.linear(h.clone(memory_format=torch.contiguous_format), weight),
            rounds,
        )
    return {"shape": [vocab, hidden], "batch": batch, "trainable_weight_strided_s": round(trainable, 4), **out}


def model_bench(model: str, dtype: str, batch: int, rounds: int) -> dict[str, object]:
    from tracecal.backends import load_model
    from tracecal.passes.selfeval import number_distribution
    from tracecal.secl import SECLConfig
    from tracecal.secl.adapter import SECLAdapter

    lm = load_model(model, batch_size=batch, dtype=dtype)
    head = lm.model.get_output_embeddings()
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(100, 20000, (96 + 4 * i,), generator=gen).tolist() for i in range(batch)]
    hooks = dict(head._forward_pre_hooks)
    with SECLAdapter(lm, SECLConfig()) as ad:
        ad.update(prompts[0], 0.2, force=True)

        def read(hooked: bool) -> object:
            head._forward_pre_hooks.clear()
            head._forward_pre_hooks.update(hooks if hooked else {})
            return number_distribution(lm, prompts)

        out = side_by_side(lambda: read(False), lambda: read(True), rounds)
    return {"model": model, "dtype": dtype, "batch": batch, **out}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--hidden", type=int, default=1536)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--head-batches", default="1,8", help="batch sizes of the head alone")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--model", default=None, help="also time a SECL v read of this model")
    ap.add_argument("--dtype", default="bfloat16")
    a = ap.parse_args()
    torch.set_num_threads(1)
    result: dict[str, object] = {
        "threads": 1,
        "load_avg_1min": round(os.getloadavg()[0], 2),
        "head": [head_bench(a.vocab, a.hidden, int(b), a.rounds) for b in a.head_batches.split(",")],
    }
    if a.model:
        result["secl_v_read"] = model_bench(a.model, a.dtype, a.batch, a.rounds)
    result["load_avg_1min_after"] = round(os.getloadavg()[0], 2)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
