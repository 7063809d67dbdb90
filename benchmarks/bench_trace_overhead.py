"""Cost of recording the trace: plain `model.generate` versus tracecal's recording generation.

    python benchmarks/bench_trace_overhead.py [--n 64] [--batch-size 16] [--max-new-tokens 32] [--rounds 3]

Same model (the offline default), the same prompts (TriviaQA questions, chat template), the same left-padded
batches and greedy decoding, both starting from the same token ids; the two are run alternately batch by
batch (plain first on even batches, recording first on odd ones) and the answers must be
identical. Prints tokens/s of each, the throughput ratio, and the memory a trace keeps per answer.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import tracecal  # noqa: E402
from tracecal.tasks import get_task  # noqa: E402


def plain_generate(lm, prompt_ids: list[list[int]], bs: int, max_new_tokens: int) -> list[list[int]]:  # type: ignore[no-untyped-def]
    out: list[list[int]] = [[] for _ in prompt_ids]
    order = np.argsort([-len(p) for p in prompt_ids], kind="stable")
    for s in range(0, len(order), bs):
        idx = order[s : s + bs]
        ids, mask = lm._left_pad([prompt_ids[i] for i in idx])
        with torch.no_grad():
            seqs = lm.model.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                temperature=None,
                top_p=None,
                top_k=None,
                eos_token_id=lm.stop_ids,
                pad_token_id=lm.pad_id,
            )
        new = seqs[:, ids.shape[1] :].numpy()
        for j, i in enumerate(idx):
            row = new[j]
            stop = np.isin(row, lm.stop_ids)
            out[i] = row[: int(np.argmax(stop)) if stop.any() else len(row)].tolist()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    lm = tracecal.load_model(batch_size=a.batch_size)
    task = get_task("triviaqa")
    prompts = [task.prompt(ex, chat=True) for ex in task.load(limit=a.n)]
    prompt_ids = [lm.encode_prompt(p) for p in prompts]
    print(
        f"model {lm.model_id}, {a.n} prompts, batch {a.batch_size}, max_new_tokens {a.max_new_tokens}, "
        f"torch threads {torch.get_num_threads()}"
    )
    # warm-up (not timed)
    plain_generate(lm, prompt_ids[: a.batch_size], a.batch_size, 4)
    lm.generate(prompts[: a.batch_size], max_new_tokens=4)
    # alternate at batch granularity (plain, rec, rec, plain, ...) so drifts in machine load hit both alike
    order = np.argsort([-len(p) for p in prompt_ids], kind="stable")
    batches = [order[i : i + a.batch_size] for i in range(0, len(order), a.batch_size)]
    t_plain, t_rec = [0.0] * a.rounds, [0.0] * a.rounds
    plain: list[list[int]] = [[] for _ in prompts]
    traces: list = [None] * len(prompts)
    for r in range(a.rounds):
        for j, idx in enumerate(batches):
            for kind in ("plain", "rec") if (r + j) % 2 == 0 else ("rec", "plain"):
                t0 = time.perf_counter()
                if kind == "plain":
                    out = plain_generate(lm, [prompt_ids[i] for i in idx], len(idx), a.max_new_tokens)
                    t_plain[r] += time.perf_counter() - t0
                    for i, o in zip(idx, out, strict=True):
                        plain[i] = o
                else:
                    pre = [{"prompt_ids": prompt_ids[i]} for i in idx]  # both sides start from the same ids
                    tr = lm.generate(pre, max_new_tokens=a.max_new_tokens, batch_size=len(idx))
                    t_rec[r] += time.perf_counter() - t0
                    for i, t in zip(idx, tr, strict=True):
                        traces[i] = t
    same = all(p == t.token_ids.tolist() for p, t in zip(plain, traces, strict=True))
    n_tok = sum(len(p) for p in plain)
    tp, tr = float(np.median(t_plain)), float(np.median(t_rec))
    print(f"identical answers: {same}  ({n_tok} answer tokens per run)")
    print(f"plain generate: {n_tok / tp:8.1f} tokens/s  (median {tp:.2f} s; runs {np.round(t_plain, 2).tolist()})")
    print(f"tracecal recording: {n_tok / tr:8.1f} tokens/s  (median {tr:.2f} s; runs {np.round(t_rec, 2).tolist()})")
    print(f"throughput ratio rec/plain: {tp / tr:.4f}  (overhead {100 * (tr / tp - 1):+.2f}%)")
    per = np.array([sum(x.nbytes for x in (t.token_ids, t.surprisal, t.entropy, t.offsets)) for t in traces])
    T = np.array([t.length for t in traces])
    nz = T > 0
    print(
        f"trace arrays kept per answer: mean {per.mean():.0f} bytes, {np.mean(per[nz] / T[nz]):.1f} bytes/token "
        f"(O(T): ids + s + H + offsets, 8 bytes each); T×|V| logits would be {4 * lm.vocab_size} bytes/token"
    )
    print(
        f"transient recorder state: one step of float32 logits per batch row = {4 * lm.vocab_size / 1024:.0f} KiB "
        "(the same tensor transformers already holds), freed after the batch"
    )
    if not same:
        raise SystemExit("answers differ between plain and recording generation")


if __name__ == "__main__":
    main()
