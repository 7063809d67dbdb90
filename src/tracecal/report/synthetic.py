"""A synthetic scored run directory in the exact on-disk format of `tracecal.evaluate` (no model needed).

For the report's tests, its benchmark and demos: ``results.json``, ``rows.parquet``, ``predictions.parquet``
and ``traces/<task>/<shard>.parquet`` (written with `tracecal.save_traces`). Scores carry a real signal
(correct answers score higher on average), probabilities come from a logistic map of the scores, and
the metrics in ``results.json`` are computed from them with `tracecal.metrics.compute_all`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["write_synthetic_run", "SYNTHETIC_ESTIMATORS"]

SYNTHETIC_ESTIMATORS = (
    "trace", "trace_plus", "trace_plus_seqlik", "first_token_prob", "mean_prob", "norm_seq_prob", "seq_likelihood",
    "min_prob", "high_prob_rate", "neg_mean_entropy", "neg_max_entropy", "neg_first3_entropy", "neg_last3_entropy",
    "neg_window_entropy", "neg_entropy_var", "neg_entropy_slope", "prob_slope", "beam_ratio", "beam_tail_thinness",
    "beam_neg_entropy", "tokensar", "mars", "p_true", "verbalized",
)  # fmt: skip

_WORDS = (
    "the", "answer", "is", "a", "of", "Paris", "river", "king", "1942", "seven", "apples", "in", "total", "onion",
    "antelope", "mammal", "because", "first", "then", "so", "he", "has", "left", "Dieppe", "Edward", "III", "&",
    "it", "was", "not", "\n", "=", "+", "42", "Answer:", "approximately", "famous", "painter", "Rome", "gold",
)  # fmt: skip


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def write_synthetic_run(
    path: str | Path,
    tasks: Sequence[str] = ("triviaqa", "svamp", "truthfulqa", "mlqa"),
    n_per_task: int = 100,
    estimators: Sequence[str] = SYNTHETIC_ESTIMATORS,
    max_tokens: int = 64,
    shard_size: int = 64,
    n_seeds: int = 20,
    seed: int = 0,
    overrides: dict[tuple[str, int], dict[str, Any]] | None = None,
) -> Path:
    """Write a synthetic scored run directory and return its path.

    Args:
        path: the run directory to create.
        tasks: task names.
        n_per_task: answers per task.
        estimators: estimator names (any strings; the built-in 24 by default).
        max_tokens: answers get 1 … ``max_tokens`` tokens (uniform).
        shard_size: answers per traces shard.
        n_seeds: recorded in the config (the metrics are computed once, their sd is synthetic).
        seed: random seed.
        overrides: ``{(task, row index): {"question": ..., "answer": ..., "tokens": [...], "golds": [...]}}``
            to plant specific content (e.g. markup for escaping tests); ``tokens`` sets the answer's tokens.
    """
    from tracecal.metrics import compute_all
    from tracecal.trace import Trace, save_traces

    rng = np.random.default_rng(seed)
    run = Path(path)
    run.mkdir(parents=True, exist_ok=True)
    overrides = overrides or {}
    rows: dict[str, list[Any]] = {k: [] for k in ("task", "id", "question", "golds", "answer", "correct",
                                                  "n_tokens", "stop_reason")}  # fmt: skip
    preds: dict[str, list[Any]] = {"task": [], "id": [], "split": [], "correct": []}
    for est in estimators:
        preds[f"raw:{est}"] = []
        preds[f"prob:{est}"] = []
    task_info: dict[str, Any] = {}
    metrics: dict[str, Any] = {}
    for task in tasks:
        n = n_per_task
        acc = 0.2 + 0.6 * rng.random()
        y = (rng.random(n) < acc).astype(np.int64)
        traces = []
        for i in range(n):
            ov = overrides.get((task, i), {})
            toks = list(ov.get("tokens") or [])
            if not toks:
                t_len = int(rng.integers(1, max_tokens + 1))
                toks = [(" " if j else "") + str(_WORDS[k]) for j, k in enumerate(rng.integers(0, len(_WORDS), t_len))]
            t_len = len(toks)
            s = rng.exponential(0.6 + 0.8 * (1 - y[i]), t_len)
            h = s + rng.exponential(1.0, t_len)
            text = "".join(toks)
            offs = np.concatenate([[0], np.cumsum([len(t) for t in toks])[:-1]]).astype(np.int64)
            qid = f"{task}-{i}"
            traces.append(Trace(text=ov.get("answer", text), token_ids=np.arange(t_len), surprisal=s, entropy=h,
                                token_strings=toks, offsets=offs, stop_reason="eos", id=qid,
                                meta={"task": task}))  # fmt: skip
            golds = ov.get("golds") or [f"gold {i}"] + [f"alias {k} of {i}" for k in range(int(rng.integers(0, 12)))]
            rows["task"].append(task)
            rows["id"].append(qid)
            rows["question"].append(ov.get("question", f"Synthetic question {i} of {task}: what is item {i}?"))
            rows["golds"].append(json.dumps(golds, ensure_ascii=False))
            rows["answer"].append(ov.get("answer", text))
            rows["correct"].append(int(y[i]))
            rows["n_tokens"].append(t_len)
            rows["stop_reason"].append("eos")
        for k in range(0, n, shard_size):
            save_traces(traces[k : k + shard_size], run / "traces" / task / f"{k // shard_size:05d}.parquet")
        cal = np.zeros(n, dtype=bool)
        cal[rng.permutation(n)[: int(round(0.35 * n))]] = True
        preds["task"] += [task] * n
        preds["id"] += [f"{task}-{i}" for i in range(n)]
        preds["split"] += np.where(cal, "cal", "eval").tolist()
        preds["correct"] += y.tolist()
        metrics[task] = {}
        for ei, est in enumerate(estimators):
            strength = 0.3 + 2.0 * rng.random()
            raw = strength * y + rng.normal(0, 1, n) + 0.01 * ei
            prob = np.clip(_sigmoid(1.2 * raw - 1.0 + 0.3 * rng.normal()), 0.0, 1.0)
            raw_c, prob_c = np.where(cal, np.nan, raw), np.where(cal, np.nan, prob)
            preds[f"raw:{est}"] += raw_c.tolist()
            preds[f"prob:{est}"] += prob_c.tolist()
            ev = ~cal
            m = compute_all(y[ev], raw[ev], prob[ev]) if len(np.unique(y[ev])) == 2 else {}
            m |= {"n": float(ev.sum()), "n_correct": float(y[ev].sum()), "n_cal": float(cal.sum()),
                  "n_correct_cal": float(y[cal].sum())}  # fmt: skip
            metrics[task][est] = {
                k: {"mean": float(v), "sd": float(0.02 * rng.random()), "n_seeds": n_seeds} for k, v in m.items()
            }
        task_info[task] = {
            "n": n, "n_correct": int(y.sum()), "accuracy": float(y.mean()), "n_correct_cal": int(y[cal].sum()),
            "n_correct_eval": int(y[~cal].sum()), "label_rule": f"synthetic labels for {task}",
            "zero_token_answers": 0, "stopped_at_length": 0,
            "mean_answer_tokens": float(np.mean(rows["n_tokens"][-n:])), "entropy_kind": ["exact"], "nan_mapped": {},
        }  # fmt: skip
    if len(tasks) > 1:
        metrics["average"] = {
            est: {
                k: {"mean": float(np.mean([metrics[t][est][k]["mean"] for t in tasks if k in metrics[t][est]])),
                    "sd": float("nan"), "n_seeds": len(tasks)}
                for k in metrics[tasks[0]][est]
            }
            for est in estimators
        }  # fmt: skip
    pq.write_table(pa.table(rows), run / "rows.parquet")
    pq.write_table(pa.table(preds), run / "predictions.parquet")
    results = {
        "config": {"tasks": list(tasks), "limit": n_per_task, "model": None, "estimators": list(estimators),
                   "n_seeds": n_seeds, "cal_frac": 0.35, "calibrator": "platt", "n_bins": 10},
        "tasks": task_info,
        "metrics": metrics,
        "estimators": {e: {"family": "synthetic", "needs": ["trace"], "description": f"synthetic {e}",
                           "self_calibrated": False} for e in estimators},
        "substitutes": [],
        "timings": {"generate": 1.0, "score": 0.5},
    }  # fmt: skip
    (run / "results.json").write_text(json.dumps(results, indent=1, allow_nan=True))
    return run
