"""How much a server's top-k log-probs lose: top-k entropy estimators against the exact H_t (issue 10).

    python benchmarks/bench_topk_entropy.py [--tasks triviaqa,truthfulqa] [--n 400] [--ks 5,10,20]
        [--store-k 1000] [--cache-dir artifacts] [--threads 1] [--bootstrap 1000]

The Hugging Face backend (the offline default model, fp32, CPU, greedy, chat prompts) records, in the same
decoding step, the exact full-vocabulary entropy H_t and the top-``store-k`` log-probs. Every top-k estimator
of `tracecal.backends.topk` (k = 5, 10, 20: what servers return) is computed from the first k of those, on the same
tokens and answers. Printed (markdown): per-token error |Ĥ − H| (median over tokens, median over answers of
the answer's largest error, the largest), the estimator's cost, and the AUROC (all answers, the task's
labeller) of TRACE and the entropy baselines with each estimate (exact H first), with a 95% paired-bootstrap
interval of TRACE's ΔAUROC against exact H. The generation is cached per task under ``--cache-dir``
(``topk_entropy_<task>_<n>.npz``); a second run only recomputes the table.
``--store-k`` only matters for the tail-shape section (how the mass beyond rank 20 really decays).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402

from tracecal.backends.topk import TOPK_ESTIMATORS, topk_entropy  # noqa: E402
from tracecal.estimators import Inputs, get_estimator  # noqa: E402
from tracecal.estimators.baselines import PAPER_BASELINES  # noqa: E402
from tracecal.stats.metrics import auroc  # noqa: E402
from tracecal.traces.trace import TraceBatch  # noqa: E402

# TRACE and the entropy baselines of the paper's list (METHOD §4, 7-13): the scores a top-k entropy estimate changes
SCORES = ("trace", *[n for n in PAPER_BASELINES if n.startswith("neg_") and "entropy" in n])


def collect(task_name: str, n: int, store_k: int, batch_size: int, cache: Path) -> dict[str, np.ndarray]:
    """Generate (or read from ``cache``) the answers, labels, exact H_t and top-``store_k`` log-probs."""
    if cache.exists():
        with np.load(cache) as z:
            return {k: z[k] for k in z.files}
    from tracecal.backends import load_model
    from tracecal.tasks import get_task

    task = get_task(task_name)
    examples = task.load(limit=n)
    lm = load_model(batch_size=batch_size)
    t0 = time.perf_counter()
    traces = lm.generate(
        [task.prompt(ex, chat=True) for ex in examples],
        max_new_tokens=task.max_new_tokens,
        top_logprobs=store_k,
        stop_strings=task.stop_strings(chat=True),
        ids=[ex.id for ex in examples],
    )
    secs = time.perf_counter() - t0
    lengths = np.array([t.length for t in traces])
    empty = np.zeros((0, store_k))
    out = {
        "offsets": np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        "surprisal": np.concatenate([t.surprisal for t in traces]),
        "entropy": np.concatenate([t.entropy for t in traces]),
        "topk": np.concatenate([t.topk_logprobs if t.length else empty for t in traces]).astype(np.float32),
        "label": np.array([task.label(ex, t.text) for ex, t in zip(examples, traces, strict=True)]),
        "vocab_size": np.array(lm.vocab_size),
        "seconds": np.array(secs),
    }
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(cache, **out)
    print(f"[{task_name}] generated {len(traces)} answers, {len(out['entropy'])} tokens in {secs:.0f} s")
    return out


def _scores(data: dict[str, np.ndarray], entropy: np.ndarray) -> dict[str, np.ndarray]:
    inputs = Inputs(TraceBatch(data["surprisal"], entropy, data["offsets"]))
    return {name: get_estimator(name).score(inputs) for name in SCORES}


def _errors(data: dict[str, np.ndarray], est: np.ndarray) -> dict[str, float]:
    err = np.abs(est - data["entropy"])
    off = data["offsets"]
    per_answer = np.array([err[a:b].max() for a, b in zip(off[:-1], off[1:], strict=True) if b > a])
    return {
        "median": float(np.median(err)),
        "median_answer_max": float(np.median(per_answer)),
        "max": float(err.max()),
        "mean_bias": float(np.mean(est - data["entropy"])),
    }


def _delta_ci(y: np.ndarray, exact: np.ndarray, est: np.ndarray, n_boot: int, seed: int = 0) -> tuple[float, float]:
    """95% paired-bootstrap interval of AUROC(est) − AUROC(exact) over answers."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_boot):
        i = rng.integers(0, len(y), len(y))
        if 0 < y[i].sum() < len(i):
            out.append(auroc(y[i], est[i]) - auroc(y[i], exact[i]))
    lo, hi = np.percentile(out, [2.5, 97.5])
    return float(lo), float(hi)


def table(task_name: str, data: dict[str, np.ndarray], ks: list[int], n_boot: int) -> list[str]:
    """Markdown rows for one task: exact first, then each (k, estimator)."""
    V = int(data["vocab_size"])
    y = data["label"]
    exact = _scores(data, data["entropy"])
    ex_auc = {s: auroc(y, exact[s]) for s in SCORES}
    T = np.diff(data["offsets"])
    head = [
        "k",
        "estimator",
        "median abs err",
        "median answer max",
        "max err",
        "mean bias",
        "µs/token",
        "TRACE Δ [95% CI]",
        "max abs Δ (8 scores)",
    ] + list(SCORES)
    rows = [
        f"### {task_name}: {len(y)} answers, {int(T.sum())} tokens, accuracy {y.mean():.3f}, |V| = {V}",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
        "| – | exact | 0 | 0 | 0 | 0 | – | – | – | " + " | ".join(f"{ex_auc[s]:.4f}" for s in SCORES) + " |",
    ]
    for k in ks:
        top = data["topk"][:, :k].astype(np.float64)
        for name in TOPK_ESTIMATORS:
            t0 = time.perf_counter()
            est = topk_entropy(top, V, estimator=name)
            us = 1e6 * (time.perf_counter() - t0) / max(len(est), 1)
            e = _errors(data, est)
            sc = _scores(data, est)
            d = {s: auroc(y, sc[s]) - ex_auc[s] for s in SCORES}
            lo, hi = _delta_ci(y, exact["trace"], sc["trace"], n_boot)
            cells = [
                str(k),
                name,
                f"{e['median']:.3f}",
                f"{e['median_answer_max']:.3f}",
                f"{e['max']:.2f}",
                f"{e['mean_bias']:+.3f}",
                f"{us:.1f}",
                f"{d['trace']:+.4f} [{lo:+.4f}, {hi:+.4f}]",
                f"{max(abs(v) for v in d.values()):.4f}",
            ]
            cells += [f"{ex_auc[s] + d[s]:.4f}" for s in SCORES]
            rows.append("| " + " | ".join(cells) + " |")
    return rows


def tail_shape(data: dict[str, np.ndarray]) -> list[str]:
    """How the mass beyond rank 20 decays: median log-prob at ranks 1, 5, 10, 20, 50, 100, ... (store-k)."""
    top = data["topk"].astype(np.float64)
    ranks = [r for r in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000) if r <= top.shape[1]]
    med = [float(np.median(top[:, r - 1])) for r in ranks]
    out = ["| rank | " + " | ".join(map(str, ranks)) + " |", "|---|" + "---:|" * len(ranks)]
    out.append("| median log p | " + " | ".join(f"{m:.2f}" for m in med) + " |")
    return out


def main(argv: list[str] | None = None) -> Any:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", default="triviaqa,truthfulqa")
    ap.add_argument("--n", type=int, default=400)
    ap.add_argument("--ks", default="5,10,20")
    ap.add_argument("--store-k", type=int, default=1000)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--cache-dir", default="artifacts")
    ap.add_argument("--threads", type=int, default=1, help="torch threads for the generation")
    ap.add_argument("--bootstrap", type=int, default=1000, help="resamples for the ΔAUROC interval")
    a = ap.parse_args(argv)
    import torch

    torch.set_num_threads(a.threads)
    ks = [int(k) for k in a.ks.split(",")]
    for task_name in a.tasks.split(","):
        cache = Path(a.cache_dir) / f"topk_entropy_{task_name}_{a.n}.npz"
        data = collect(task_name, a.n, a.store_k, a.batch_size, cache)
        print("\n".join(table(task_name, data, ks, a.bootstrap)))
        print()
        print("\n".join(tail_shape(data)))
        print()


if __name__ == "__main__":
    main()
