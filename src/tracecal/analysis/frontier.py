"""The cost–quality frontier of a scored run: AUROC and Brier of each estimator against its compute per answer.

One point per estimator (issue #39): the single pass (TRACE, TRACE+, ``trace_plus_cv`` and the best other
statistic of the greedy trace, picked by mean AUROC on these splits — which flatters it), one extra prompt
(P(True), verbalised), the beam pass, the embedding pass (TokenSAR, MARS) and the K-sample estimators at every K.
Quality: the protocol's split means (`tracecal.evaluation.protocol.score_tasks` with the run's scoring settings:
AUROC on raw scores, Brier after the run's calibrator), with the paired bootstrap against TRACE+
(`tracecal.stats.bootstrap.compare` of the same splits and question resamples; Brier: negative = better).

Cost per answer (`pass_costs`, `estimator_cost`), three axes — LLM decode tokens, LLM forward passes (model
calls) and CPU-seconds — summed over the passes an estimator reads:

* greedy (``traces``): decode tokens = the stored answer tokens; forward passes = answer tokens + 1 for an answer
  that stopped (the call that produced the stop) — the prompt's prefill is the first call; CPU-seconds = the
  pass's process CPU seconds in ``timings.json`` (``cpu/<stage>``, summed over workers) / its answers; a run
  recorded before that clock was kept has only the stage's wall seconds, used instead (an upper bound of CPU time
  where the core was shared; ``clocks`` says which each pass used). Every estimator pays it: each returns the
  greedy answer.
* ``extra`` (P(True) and verbalised from one pass): each its own prompt, 0 decode tokens; P(True) 1 forward pass
  (the prompt), verbalised 2 (the prompt and the digit tree's batched step on HF); half of the pass's seconds each.
* ``beam``: ``num_beams`` × ``beam_max_new_tokens`` decode tokens and ``beam_max_new_tokens`` + 1 forward passes
  (upper bounds: the shards keep the beams' scores, not their lengths); the pass's seconds.
* ``semantic`` (TokenSAR and MARS from one pass): no LLM call (an embedder, all-MiniLM-L6-v2); half of the
  pass's seconds each.
* ``samples``: the pass's measured per-question columns (``sample_decode_tokens``, ``sample_forward_passes``,
  ``sample_cpu_seconds``: process CPU time of drawing the K samples), means over the questions scored; an estimator
  reading k of the K samples pays k / K of them.
* another pass: its CPU (or wall) seconds per answer, no token count.

Only the questions every pass read holds are scored (``n`` of the ``n_run`` answers; a run stopped part-way keeps
its finished shards): with every pass complete this is the protocol of ``results.json`` exactly. The frontier
(`frontier_set`): the points no other point dominates (cost ≤ and AUROC ≥, one strictly), per cost axis.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tracecal.errors import ValidationError
from tracecal.estimators import REGISTRY, Inputs, passes_of, resolve_estimators
from tracecal.evaluation.blockscore import read_columns, stat_array
from tracecal.evaluation.protocol import ScoreConfig, TaskStats, score_tasks
from tracecal.evaluation.result_json import plain_json
from tracecal.evaluation.runstore import CPU_PREFIX, TRACES, RunStore
from tracecal.passes import PASSES
from tracecal.stats.bootstrap import compare
from tracecal.traces.trace import TraceBatch

__all__ = [
    "ARTEFACT",
    "COST_AXES",
    "REFERENCE",
    "frontier",
    "frontier_set",
    "pass_costs",
    "pass_clocks",
    "clock_note",
    "estimator_cost",
    "frontier_markdown",
    "diff_cell",
    "with_nan",
    "stored_labels",
    "candidates",
    "run_frontier",
]

ARTEFACT = "frontier"
COST_AXES = ("decode_tokens", "forward_passes", "cpu_seconds")
REFERENCE = "trace_plus"
SINGLE_PASS = ("trace", "trace_plus", "trace_plus_cv")
SHARED = {"extra": 0.5, "semantic": 0.5}  # two estimators read one pass: each pays half of its seconds
EXTRA_CALLS = {"p_true": 1.0, "verbalized": 2.0}
_K = re.compile(r"_k(\d+)$")


def _timing(timings: Mapping[str, float], name: str, task: str) -> tuple[float, str]:
    """A pass's seconds on a task and the clock they are: process CPU (``cpu``) where recorded, else ``wall``."""
    key = f"{'generate' if name == TRACES else name}/{task}"
    if CPU_PREFIX + key in timings:
        return float(timings[CPU_PREFIX + key]), "cpu"
    return float(timings.get(key, math.nan)), "wall"


def pass_clocks(
    store: RunStore, task: str, passes: Sequence[str], timings: Mapping[str, float] | None = None
) -> dict[str, str]:
    """Per pass, the clock its CPU-seconds cost is read from: ``cpu`` (process CPU time), ``wall`` (a run recorded
    before CPU time was kept: an upper bound) or ``measured`` (the samples pass's own per-question column)."""
    times = {**(timings or {}), **store.timings()}
    return {p: "measured" if p == "samples" else _timing(times, p, task)[1] for p in passes}


def pass_costs(
    store: RunStore, data: TaskStats, passes: Sequence[str], timings: Mapping[str, float] | None = None
) -> dict[str, dict[str, float]]:
    """Per answer, each pass's decode tokens, forward passes and CPU-seconds (module docstring), ``data``: the
    answers scored. ``timings``: seconds per stage where the run's ``timings.json`` lacks one (a pass whose shards
    were copied from another run: that run's timings, divided by the answers of the pass in this run)."""
    own = store.timings()
    times = {**(timings or {}), **own}
    conf = store.config().get("config", {})
    lengths = data.inputs.batch.lengths.astype(np.float64)
    stops = np.array([t.stop_reason != "length" for t in data.inputs.traces or []], dtype=np.float64)
    out: dict[str, dict[str, float]] = {}
    for name in passes:
        got = read_columns(store, name, data.task, ["id"])
        per = _timing(times, name, data.task)[0] / (got.num_rows if got is not None and got.num_rows else math.nan)
        if name == TRACES:
            fwd = float(np.mean(lengths + (stops if stops.size == lengths.size else 1.0)))
            out[name] = {"decode_tokens": float(lengths.mean()), "forward_passes": fwd, "cpu_seconds": per}
        elif name == "samples":
            s = data.inputs.stats
            out[name] = {a: float(np.mean(s[f"sample_{a}"])) for a in COST_AXES}
        elif name == "beam":
            beams, steps = float(conf.get("num_beams") or 5), float(conf.get("beam_max_new_tokens") or 32)
            out[name] = {"decode_tokens": beams * steps, "forward_passes": steps + 1.0, "cpu_seconds": per}
        else:
            out[name] = {"decode_tokens": 0.0, "forward_passes": 0.0, "cpu_seconds": per}
    return out


def estimator_cost(name: str, costs: Mapping[str, Mapping[str, float]], k_max: int) -> dict[str, float]:
    """An estimator's cost per answer: the sum over the passes it reads of its share of each (module docstring)."""
    total = dict.fromkeys(COST_AXES, 0.0)
    m = _K.search(name)
    for p in sorted(passes_of(REGISTRY[name]) | {TRACES}):
        c = costs[p]
        share = SHARED.get(p, 1.0)
        if p == "samples":
            share = (int(m.group(1)) if m else k_max) / k_max
        total["decode_tokens"] += share * c["decode_tokens"]
        total["forward_passes"] += EXTRA_CALLS.get(name, 1.0) if p == "extra" else share * c["forward_passes"]
        total["cpu_seconds"] += share * c["cpu_seconds"]
    return total


def frontier_set(points: Mapping[str, tuple[float, float]]) -> list[str]:
    """The names whose (cost, quality) no other point dominates: cost ≤, quality ≥, one of them strictly. Points
    with a non-finite coordinate are never on it. Returned by increasing cost."""
    ok = {n: (c, q) for n, (c, q) in points.items() if math.isfinite(c) and math.isfinite(q)}
    on = [
        n
        for n, (c, q) in ok.items()
        if not any(c2 <= c and q2 >= q and (c2 < c or q2 > q) for m, (c2, q2) in ok.items() if m != n)
    ]
    return sorted(on, key=lambda n: (ok[n][0], -ok[n][1]))


def _group(name: str) -> str:
    ps = passes_of(REGISTRY[name]) - {TRACES}
    return next(iter(sorted(ps)), "single pass") if len(ps) <= 1 else "+".join(sorted(ps))


def candidates(run_estimators: Sequence[str], missing: set[str]) -> list[str]:
    """The run's estimators the frontier scores: the single-pass ones (`SINGLE_PASS` and every other trace-only
    statistic, for the best one), and every one reading another pass the run holds."""
    out = []
    for e in run_estimators:
        if e not in REGISTRY or passes_of(REGISTRY[e]) & missing:
            continue
        out.append(e)
    return out


def _subset(store: RunStore, task: str, labels: Mapping[str, int], passes: Sequence[str]) -> tuple[TaskStats, int]:
    """The task's answers that every pass in ``passes`` holds (traces order), with those passes' stats; and how
    many answers the run's traces hold."""
    traces = store.read_traces(task)
    keep = {t.id for t in traces}
    tables = {}
    for name in (p for p in passes if p != TRACES):
        t = store.read_pass(name, task)
        tables[name] = t
        keep &= set() if t is None else set(t.column("id").to_pylist())
    chosen = [t for t in traces if t.id in keep and t.id in labels]
    ids = [t.id for t in chosen]
    inputs = Inputs(TraceBatch.from_traces(chosen), chosen)
    for name, t in tables.items():
        assert t is not None
        where = {i: j for j, i in enumerate(t.column("id").to_pylist())}
        rows = t.take([where[i] for i in ids])
        for stat, kind in PASSES[name].provides.items():
            inputs.stats[stat] = stat_array(rows, stat, kind, inputs.batch.lengths, f"{task}/{name}")
    y = np.array([labels[i] for i in ids], dtype=np.int64)
    return TaskStats(task, ids, y, inputs, "stored labels"), len(traces)


def _score_config(store: RunStore, names: list[str], n_boot: int | None) -> ScoreConfig:
    """The run's scoring settings (its config.json) for ``names``."""
    conf = store.config().get("config", {})
    kw = {k: conf[k] for k in ("n_seeds", "cal_frac", "calibrator", "n_bins", "seed", "n_boot", "level") if k in conf}
    if n_boot is not None:
        kw["n_boot"] = n_boot
    return ScoreConfig(names, **kw).validate()


def _point(name: str, metrics: Mapping[str, Any], draws: Mapping[str, Any], level: float) -> dict[str, Any]:
    """An estimator's split means and its paired comparison with TRACE+ (without bootstrap draws — a task with
    too few answers of a class — the difference alone: NaN bounds, verdict ``n/a``)."""
    m = metrics[name]
    out: dict[str, Any] = {"estimator": name, "group": _group(name)}
    out |= {k: {"mean": m[k]["mean"], "sd": m[k]["sd"]} for k in ("auroc", "brier")}
    if name == REFERENCE:
        return out
    out["vs_trace_plus"] = {}
    for k in ("auroc", "brier"):
        diff = m[k]["mean"] - metrics[REFERENCE][k]["mean"]
        if draws.get(name) and draws.get(REFERENCE):
            out["vs_trace_plus"][k] = compare(draws[name][k], draws[REFERENCE][k], diff, level, k == "brier")
        else:
            out["vs_trace_plus"][k] = {"diff": diff, "lo": math.nan, "hi": math.nan, "verdict": "n/a"}
    return out


def _shown(names: Sequence[str], metrics: Mapping[str, Any]) -> tuple[list[str], str | None]:
    """The estimators drawn: `SINGLE_PASS`, the best other single-pass statistic (by mean AUROC) and every
    estimator reading another pass; and the name of that best statistic."""
    single = [n for n in names if passes_of(REGISTRY[n]) == {TRACES}]
    others = [n for n in single if n not in SINGLE_PASS and REGISTRY[n].family != "TRACE"]
    finite = [n for n in others if math.isfinite(metrics[n]["auroc"]["mean"])]
    best = max(finite, key=lambda n: metrics[n]["auroc"]["mean"]) if finite else None
    shown = [n for n in names if n in SINGLE_PASS or n == best or passes_of(REGISTRY[n]) != {TRACES}]
    return shown, best


def frontier(
    store: RunStore,
    task: str,
    labels: Mapping[str, int],
    estimators: Sequence[str],
    timings: Mapping[str, float] | None = None,
    n_boot: int | None = None,
) -> dict[str, Any]:
    """One task's frontier document (module docstring)::

        {"task", "n", "n_correct", "n_run", "best_statistic", "settings", "costs": {pass: {axis: per answer}},
         "clocks": {pass: "cpu" | "wall" | "measured"},
         "points": [{"estimator", "group", "decode_tokens", "forward_passes", "cpu_seconds",
                     "auroc": {"mean", "sd"}, "brier": {...}, "vs_trace_plus": {"auroc": compare, "brier": ...}}],
         "frontier": {axis: [estimators on it, by increasing cost]}}

    ``labels``: {answer id: 1 correct / 0}; ``estimators``: those to consider (an estimator whose pass the run
    does not hold at all is left out); ``timings``: seconds per stage the run's own ``timings.json`` lacks."""
    held = {p for p in PASSES if store.shard_files(p, task)}
    missing = set(PASSES) - held
    names = candidates(estimators, missing)
    if REFERENCE not in names:
        raise ValidationError(f"{task}: the frontier compares with {REFERENCE}, which the run cannot score")
    passes = sorted(set().union(*(passes_of(REGISTRY[n]) for n in names)) | {TRACES})
    data, n_run = _subset(store, task, labels, passes)
    if len(data) == 0:
        raise ValidationError(f"{task}: no answer is held by every pass of {', '.join(passes)}")
    k_max = int(data.inputs.stats["sample_agree"].shape[1]) if "samples" in passes else 1
    names = [n for n in names if not ((m := _K.search(n)) and "samples" in passes and int(m.group(1)) > k_max)]
    cfg = _score_config(store, names, n_boot)
    res = score_tasks([data], cfg)
    metrics, draws = res.metrics[task], (res.draws or {}).get(task, {})
    shown, best = _shown(names, metrics)
    costs = pass_costs(store, data, passes, timings)
    clocks = pass_clocks(store, task, passes, timings)
    points = [_point(n, metrics, draws, cfg.level) | estimator_cost(n, costs, k_max) for n in shown]
    on = {a: frontier_set({p["estimator"]: (p[a], p["auroc"]["mean"]) for p in points}) for a in COST_AXES}
    settings = {k: getattr(cfg, k) for k in ("n_seeds", "cal_frac", "calibrator", "n_boot", "level", "seed")}
    return {
        "task": task,
        "n": len(data),
        "n_correct": int(data.y.sum()),
        "n_run": n_run,
        "k_max": k_max,
        "best_statistic": best,
        "settings": settings,
        "costs": costs,
        "clocks": clocks,
        "points": points,
        "frontier": on,
    }


def _nan(v: Any) -> Any:
    return math.nan if v is None else v


def with_nan(d: Mapping[str, Any]) -> dict[str, Any]:
    """One task's frontier document as read back from JSON (NaN written as null) with NaN back in its numbers."""
    points = []
    for p in d["points"]:
        q = dict(p) | {a: _nan(p[a]) for a in COST_AXES}
        q |= {m: {k: _nan(v) for k, v in p[m].items()} for m in ("auroc", "brier")}
        if "vs_trace_plus" in p:
            q["vs_trace_plus"] = {m: {k: _nan(v) for k, v in c.items()} for m, c in p["vs_trace_plus"].items()}
        points.append(q)
    return dict(d) | {"points": points}


AXIS_MARK = {"cpu_seconds": "CPU", "decode_tokens": "tok", "forward_passes": "fwd"}
VERDICT = {"better": " ▲", "worse": " ▼"}


def _num(v: float, digits: int = 3) -> str:
    return "–" if not math.isfinite(v) else f"{v:.{digits}f}"


def _cost(v: float) -> str:
    if not math.isfinite(v):
        return "–"
    return f"{v:.3g}" if v < 100 else f"{v:,.0f}"


def diff_cell(p: Mapping[str, Any], metric: str) -> str:
    """A point's difference against TRACE+ with its paired interval and ▲ / ▼ (Markdown and the report)."""
    c = (p.get("vs_trace_plus") or {}).get(metric)
    if c is None:
        return "(reference)" if p["estimator"] == REFERENCE else "–"
    if not math.isfinite(c["lo"]):
        return f"{c['diff']:+.3f} (no interval)"
    return f"{c['diff']:+.3f} [{c['lo']:+.3f}, {c['hi']:+.3f}]{VERDICT.get(c['verdict'], '')}"


def clock_note(clocks: Mapping[str, str]) -> str:
    """The caveat for passes whose CPU-seconds are wall seconds (a run recorded before CPU time was kept)."""
    wall = [p for p, c in clocks.items() if c == "wall"]
    if not wall:
        return ""
    why = "recorded before CPU time was kept: an upper bound"
    return f" CPU-s of the {', '.join(wall)} pass(es): wall seconds ({why})."


def frontier_markdown(doc: Mapping[str, Any]) -> str:
    """One Markdown table per task of a `run_frontier` document, by increasing CPU-seconds."""
    lines = []
    for task, raw in doc["tasks"].items():
        d = with_nan(raw)
        s = d["settings"]
        lines += [
            f"#### {task}: {d['n']} questions of the run's {d['n_run']} ({d['n_correct']} correct), K = {d['k_max']}",
            "",
            f"Split means of {s['n_seeds']} splits ({s['cal_frac']:.0%} calibration, {s['calibrator']}); "
            f"Δ against TRACE+: paired {s['level']:.0%} bootstrap interval ({s['n_boot']} resamples; ▲ / ▼ "
            "significantly better / worse; Brier: lower is better). Cost per answer; frontier: not dominated on "
            f"that axis (cost ≤ and AUROC ≥). Best other single-pass statistic: {d['best_statistic']}."
            + clock_note(d.get("clocks") or {}),
            "",
            "| estimator | passes | decode tokens | forward passes | CPU-s | AUROC | Δ AUROC | Brier | Δ Brier "
            "| frontier |",
            "|---|---|--:|--:|--:|--:|--:|--:|--:|---|",
        ]
        for p in sorted(d["points"], key=lambda p: (p["cpu_seconds"], p["estimator"])):
            marks = ", ".join(AXIS_MARK[a] for a in COST_AXES if p["estimator"] in d["frontier"][a])
            lines.append(
                f"| {p['estimator']} | {p['group']} | {_cost(p['decode_tokens'])} | {_cost(p['forward_passes'])} "
                f"| {_cost(p['cpu_seconds'])} | {_num(p['auroc']['mean'])} ± {_num(p['auroc']['sd'])} "
                f"| {diff_cell(p, 'auroc')} | {_num(p['brier']['mean'])} | {diff_cell(p, 'brier')} | {marks} |"
            )
        lines.append("")
    return "\n".join(lines)


def stored_labels(store: RunStore) -> dict[str, dict[str, int]]:
    """{task: {answer id: correct}} from a scored run's rows table."""
    rows = store.scored_rows(["task", "id", "correct"])
    out: dict[str, dict[str, int]] = {}
    for t, i, c in zip(*(rows.column(k).to_pylist() for k in ("task", "id", "correct")), strict=True):
        out.setdefault(str(t), {})[str(i)] = int(c)
    return out


def run_frontier(
    run_dir: str | os.PathLike[str] | RunStore,
    tasks: Sequence[str] | None = None,
    estimators: Sequence[str] | None = None,
    timings: Mapping[str, float] | None = None,
    n_boot: int | None = None,
) -> dict[str, Any]:
    """The frontier of each task of a scored run (default: the tasks with a samples pass, else all), written into
    the run as ``frontier.json`` (merged by task) and ``frontier.md``; returns the whole document. ``estimators``:
    default the run's; ``timings``: stage seconds its ``timings.json`` lacks (`pass_costs`)."""
    store = run_dir if isinstance(run_dir, RunStore) else RunStore(run_dir)
    labels = stored_labels(store)
    unknown = [t for t in tasks or () if t not in labels]
    if unknown:
        raise ValidationError(f"task {unknown[0]!r} is not in {store.path}; it holds {', '.join(labels)}")
    sampled = [t for t in labels if store.shard_files("samples", t)]
    names = (
        resolve_estimators(",".join(estimators)) if estimators else store.config().get("config", {}).get("estimators")
    )
    names = list(names or [])
    doc = store.read_artefact(ARTEFACT) or {"tasks": {}}
    for t in tasks or sampled or list(labels):
        doc["tasks"][t] = plain_json(frontier(store, t, labels[t], names, timings, n_boot))
    store.write_artefact(ARTEFACT, doc)
    store.write_text("frontier.md", frontier_markdown(doc))
    return doc
