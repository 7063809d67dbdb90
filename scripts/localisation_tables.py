"""The localisation evidence of docs/localisation.md, generated from the committed runs in docs/runs/ (issue 38).

    python scripts/localisation_tables.py [--write docs/localisation.md] [--runs smollm1000 gemma1000 qwen1000]

Scoring only: reads each run's ``predictions.parquet`` (label, split and every estimator's score per answer) and
its traces (``traces/<task>/*.parquet``, answers kept, prompts blanked); no question or gold is read (the labels
say which answers are wrong, and the rules below pin a wrong answer's error without the gold). Three tables:

1. **AUROC by error type** on the evaluation split: numeric (SVAMP), entity (TriviaQA + MLQA), factual
   (TruthfulQA); TRACE, TRACE+, ``trace_plus_cv`` and the best baseline (highest AUROC among the estimators whose
   name has no "trace"), 95 % percentile intervals from 1,000 stratified bootstrap resamples shared by all
   estimators (paired); the difference TRACE+ − best baseline with its paired interval. The same on the
   "localised" subset: every correct answer plus the wrong answers whose error rule 2 pins.
2. **Localisation hit rate** of the riskiest span (`tracecal.risk_spans`, k = 1, threshold 0.5) over wrong
   answers (both splits) whose error is pinned to characters by rule: SVAMP - the last number in the answer (the
   labeller reads the last number; the answer is wrong, so that number differs from the gold); TriviaQA / MLQA -
   the answer's content words (``\\w+`` runs not in a short English stop-word list); TruthfulQA has no rule (a
   false claim is not a span). A hit: the span's characters overlap the erroneous characters. Baselines: a span
   of the same number of tokens at a uniformly random position (its exact expectation over all positions), and
   the last such span of the answer; ``covered`` is the share of the answer's characters that are erroneous.
3. **Ablation**: per task, logistic regression (TRACE+'s: standardised features, C = 1) on the calibration split
   with TRACE+'s features φ, against φ plus the riskiest span's own statistics (its risk, mean risk, length in
   tokens, relative position, share of the answer); AUROC and Brier on the evaluation split, paired intervals.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from tracecal.evaluation.docblocks import write_block
from tracecal.signals.features import trace_plus_features
from tracecal.signals.spans import char_bounds, span_table
from tracecal.stats.bootstrap import bootstrap_counts, percentile_interval, weighted_auroc
from tracecal.stats.metrics import auroc
from tracecal.traces.io import load_traces
from tracecal.traces.trace import TraceBatch

ROOT = Path(__file__).resolve().parents[1]
RUNS = ("smollm1000", "gemma1000", "qwen1000")
TYPES = {"numeric": ("svamp",), "entity": ("triviaqa", "mlqa"), "factual": ("truthfulqa",)}
MAIN = ("trace", "trace_plus", "trace_plus_cv")
N_BOOT = 1000
NUMBER = re.compile(r"-?\$?\d[\d,]*(?:\.\d+)?")
WORD = re.compile(r"\w+")
STOP = frozenset(
    "a an the is are was were be been of in on at to for by with and or but it its this that these those as from "
    "which who whom what when where why how i you he she we they his her their our my your answer so then there "
    "not no yes".split()
)


def _scores(pred: pd.DataFrame, est: str) -> np.ndarray:
    s = pred[f"raw:{est}"].to_numpy(dtype=float)
    return np.where(np.isfinite(s), s, np.nanmin(s) - 1.0 if np.isfinite(s).any() else 0.0)


def _auroc_row(pred: pd.DataFrame) -> dict[str, Any]:
    """AUROC with paired intervals of the main estimators and the best baseline on ``pred`` (one error type)."""
    y = pred["correct"].to_numpy(dtype=int)
    ests = [c[4:] for c in pred.columns if c.startswith("raw:") and pred[c].notna().any()]
    point = {e: auroc(y, _scores(pred, e)) for e in ests}
    base = [e for e in ests if "trace" not in e and np.isfinite(point[e])]
    best = max(base, key=lambda e: point[e]) if base else None
    W = bootstrap_counts(y, N_BOOT, seed=0)
    names = [e for e in (*MAIN, best) if e in point and e is not None]
    draws = {e: weighted_auroc(y, _scores(pred, e), W) for e in names}
    row: dict[str, Any] = {"n": len(y), "wrong": int((y == 0).sum()), "best": best}
    for e in names:
        row[e] = (point[e], *percentile_interval(draws[e]))
    if best is not None and "trace_plus" in draws:
        row["diff"] = (point["trace_plus"] - point[best], *percentile_interval(draws["trace_plus"] - draws[best]))
    return row


def error_mask(task: str, text: str) -> np.ndarray | None:
    """Erroneous characters of a wrong answer by the rule of the module docstring (None: no rule / nothing to pin)."""
    mask = np.zeros(len(text), bool)
    if task == "svamp":
        found = list(NUMBER.finditer(text))
        if not found:
            return None
        mask[found[-1].start() : found[-1].end()] = True
    elif task in ("triviaqa", "mlqa"):
        for m in WORD.finditer(text):
            if m.group().lower() not in STOP:
                mask[m.start() : m.end()] = True
    else:
        return None
    return mask if mask.any() else None


def _overlaps(cum: np.ndarray, a: np.ndarray, z: np.ndarray) -> np.ndarray:
    return (cum[z] - cum[a]) > 0


def hit_rates(traces: list[Any], tasks: list[str]) -> dict[str, Any]:
    """Hit rate of the riskiest span, of a random span of its length (expected) and of the last one."""
    tab = span_table(TraceBatch.from_traces(traces), k=1)
    first = {int(i): j for j, i in enumerate(tab["answer"]) if tab["rank"][j] == 0}
    cs, ce = char_bounds(traces)
    off = np.concatenate([[0], np.cumsum([t.length for t in traces])])
    hit, rand, last, cover = [], [], [], []
    for i, (t, task) in enumerate(zip(traces, tasks, strict=True)):
        mask = error_mask(task, t.text)
        if mask is None or i not in first:
            continue
        j, T = first[i], t.length
        a, z = int(tab["token_start"][j]), int(tab["token_end"][j])
        s, e = cs[off[i] : off[i + 1]], ce[off[i] : off[i + 1]]
        cum = np.concatenate([[0], np.cumsum(mask)])
        L = z - a
        starts = np.arange(T - L + 1)
        every = _overlaps(cum, s[starts], e[starts + L - 1])
        hit.append(bool(_overlaps(cum, s[a : a + 1], e[z - 1 : z])[0]))
        rand.append(float(every.mean()))
        last.append(bool(every[-1]))
        cover.append(float(mask.mean()))
    n = len(hit)
    return {
        "n": n,
        "hit": np.mean(hit) if n else np.nan,
        "random": np.mean(rand) if n else np.nan,
        "last": np.mean(last) if n else np.nan,
        "covered": np.mean(cover) if n else np.nan,
    }


def span_features(traces: list[Any]) -> np.ndarray:
    """Per answer: the riskiest span's risk, mean risk, length (tokens), relative start, share of the answer."""
    b = TraceBatch.from_traces(traces)
    tab = span_table(b, k=1)
    out = np.zeros((len(traces), 5))
    T = np.maximum(b.lengths, 1).astype(float)
    i = tab["answer"]
    L = tab["token_end"] - tab["token_start"]
    out[i] = np.column_stack([tab["risk"], tab["mean_risk"], L, tab["token_start"] / T[i], L / T[i]])
    return out


def _fit_predict(X: np.ndarray, y: np.ndarray, cal: np.ndarray) -> np.ndarray:
    sc = StandardScaler().fit(X[cal])
    lr = LogisticRegression(C=1.0, max_iter=2000).fit(sc.transform(X[cal]), y[cal])
    return lr.predict_proba(sc.transform(X[~cal]))[:, 1]


def ablation(traces: list[Any], pred: pd.DataFrame) -> dict[str, Any] | None:
    """AUROC / Brier on the evaluation split of φ against φ + the span's statistics (one task)."""
    y = pred["correct"].to_numpy(dtype=int)
    cal = (pred["split"] == "cal").to_numpy()
    if min(y[cal].sum(), (1 - y[cal]).sum(), y[~cal].sum(), (1 - y[~cal]).sum()) < 5:
        return None
    phi = np.nan_to_num(trace_plus_features(TraceBatch.from_traces(traces)))
    both = np.column_stack([phi, span_features(traces)])
    p0, p1 = _fit_predict(phi, y, cal), _fit_predict(both, y, cal)
    ye = y[~cal]
    W = bootstrap_counts(ye, N_BOOT, seed=0)
    d0, d1 = weighted_auroc(ye, p0, W), weighted_auroc(ye, p1, W)
    b0, b1 = float(np.mean((p0 - ye) ** 2)), float(np.mean((p1 - ye) ** 2))
    return {
        "n": len(ye),
        "auroc": (auroc(ye, p0), auroc(ye, p1)),
        "diff": percentile_interval(d1 - d0),
        "brier": (b0, b1),
    }


BLOCK = "localisation-tables"


def load_run(run: Path) -> tuple[pd.DataFrame, dict[str, list[Any]]]:
    """The run's predictions and, per task, its traces in the predictions' row order (joined by id)."""
    pred = pd.read_parquet(run / "predictions.parquet")
    traces: dict[str, list[Any]] = {}
    for task in pred["task"].unique():
        by_id = {t.id: t for t in load_traces(run / "traces" / task)}
        traces[task] = [by_id[i] for i in pred.loc[pred["task"] == task, "id"]]
    return pred, traces


def _ci(v: tuple[float, float, float] | None) -> str:
    return "–" if v is None or not np.isfinite(v[0]) else f"{v[0]:.3f} [{v[1]:.3f}, {v[2]:.3f}]"


def run_tables(name: str, run: Path) -> dict[str, list[str]]:
    """Markdown rows of the three tables for one run."""
    pred, traces = load_run(run)
    rows: dict[str, list[str]] = {"auroc": [], "hit": [], "ablation": []}
    for kind, tasks in TYPES.items():
        sub = pred[pred["task"].isin(tasks)]
        ev = sub[sub["split"] == "eval"]
        r = _auroc_row(ev)
        cells = [_ci(r.get(e)) for e in MAIN]
        rows["auroc"].append(
            f"| {name} | {kind} ({' + '.join(tasks)}) | all | {r['n']} | {r['wrong']} | "
            + " | ".join(cells)
            + f" | {r['best']}: {_ci(r.get(r['best']))} | {_ci(r.get('diff'))} |"
        )
        ts = [
            t
            for task in tasks
            for t, sp in zip(traces[task], pred.loc[pred.task == task, "split"], strict=True)
            if sp == "eval"
        ]
        tk = [task for task in tasks for sp in pred.loc[pred.task == task, "split"] if sp == "eval"]
        keep = [
            (y == 1) or error_mask(task, t.text) is not None for y, t, task in zip(ev["correct"], ts, tk, strict=True)
        ]
        if kind != "factual":
            r = _auroc_row(ev[np.asarray(keep)])
            cells = [_ci(r.get(e)) for e in MAIN]
            rows["auroc"].append(
                f"| {name} | {kind} | localised | {r['n']} | {r['wrong']} | "
                + " | ".join(cells)
                + f" | {r['best']}: {_ci(r.get(r['best']))} | {_ci(r.get('diff'))} |"
            )
    for task in ("svamp", "triviaqa", "mlqa"):
        wrong = (pred.loc[pred.task == task, "correct"] == 0).to_numpy()
        ts = [t for t, w in zip(traces[task], wrong, strict=True) if w]
        h = hit_rates(ts, [task] * len(ts))
        rows["hit"].append(
            f"| {name} | {task} | {h['n']} | {h['hit']:.3f} | {h['random']:.3f} | {h['last']:.3f} "
            f"| {h['covered']:.3f} |"
        )
    for task in ("svamp", "triviaqa", "mlqa", "truthfulqa"):
        a = ablation(traces[task], pred[pred.task == task].reset_index(drop=True))
        if a is None:
            rows["ablation"].append(f"| {name} | {task} | – | too few correct or wrong answers | – | – |")
            continue
        rows["ablation"].append(
            f"| {name} | {task} | {a['n']} | {a['auroc'][0]:.3f} → {a['auroc'][1]:.3f} | "
            f"{a['auroc'][1] - a['auroc'][0]:+.3f} [{a['diff'][0]:+.3f}, {a['diff'][1]:+.3f}] | "
            f"{a['brier'][0]:.4f} → {a['brier'][1]:.4f} |"
        )
    return rows


def render(runs: list[str]) -> str:
    """The generated block: three tables over ``runs``."""
    all_rows: dict[str, list[str]] = {"auroc": [], "hit": [], "ablation": []}
    for name in runs:
        for key, rows in run_tables(name, ROOT / "docs" / "runs" / name).items():
            all_rows[key] += rows
    sources = ", ".join(f"`docs/runs/{r}`" for r in runs)
    head = f"*Generated by `python scripts/localisation_tables.py --write docs/localisation.md` from {sources}.*"
    return "\n".join(
        [
            head,
            "",
            "#### AUROC by error type (evaluation split; 95 % paired bootstrap intervals)",
            "",
            "| run | type | answers | n | wrong | TRACE | TRACE+ | trace_plus_cv | best baseline | TRACE+ − best |",
            "|---|---|---|---|---|---|---|---|---|---|",
            *all_rows["auroc"],
            "",
            "#### Localisation: does the riskiest span overlap the error? (wrong answers, both splits)",
            "",
            "| run | task | wrong answers pinned | riskiest span | random span (same length) | last span "
            "| erroneous share of the answer |",
            "|---|---|---|---|---|---|---|",
            *all_rows["hit"],
            "",
            "#### Ablation: the riskiest span's statistics as extra TRACE+ features (fit on cal, scored on eval)",
            "",
            "| run | task | eval answers | AUROC φ → φ + span | difference [95 % paired] | Brier φ → φ + span |",
            "|---|---|---|---|---|---|",
            *all_rows["ablation"],
        ]
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", type=Path, help="the document whose localisation-tables block to replace")
    ap.add_argument("--runs", nargs="+", default=list(RUNS))
    a = ap.parse_args(argv)
    block = render(a.runs)
    if a.write:
        write_block(a.write, block, BLOCK)
    else:
        print(block)


if __name__ == "__main__":
    main()
