"""The TRACE paper's ablations on a stored run: scoring only, no generation.

Every ablation is a *variant*: a function of one task's stored stats that returns either a score per answer
(higher = more confident; Brier and ECE through the Platt calibrator fitted on the calibration split, as in
docs/method.md §5), a probability used as it is (``raw``: no calibration), or a feature matrix (a logistic calibrator,
`tracecal.calibrators.TracePlus` on the matrix, fitted on the calibration split). Each variant is scored under
the protocol's splits (``cal_frac`` stratified calibration share, ``n_seeds`` seeds; AUROC on the evaluation
split, Brier and ECE on its probabilities) and averaged over splits, then over tasks.

Groups (the paper's numbers, Qwen2.5-7B-Instruct, are in `PAPER`):

* ``ladder``: TRACE raw (c_TRACE read as a probability) → scalar-calibrated (Platt on c_TRACE) → learned
  operator weights (logistic regression on D_λ(H), M^(w)(H), L_ρ(s)) → TRACE+.
* ``operators``: each operator alone, −D_λ(H), −M^(w)(H), −L_ρ(s).
* ``features``: TRACE+ without log length, entropy-local only, likelihood-local only, + sequence likelihood,
  without the entropy slope (the feature sets are `FEATURE_SETS`; "local" is our reading).
* ``shuffle``: positions permuted within each trace (s_t and H_t together, one permutation per answer, seed
  ``seed``): TRACE and TRACE+ on the shuffled traces.
* ``sweep``: TRACE with one setting changed at a time (α, β, γ on the simplex with α, β ∈ [0.2, 0.6] and
  γ ∈ [0.1, 0.4]; λ ∈ {1, 2, 4, 8}; w ∈ {2, 4, 6, 8}; ρ ∈ {0, 0.25, 0.5, 0.75, 1}).
* ``transfer``: TRACE+ fitted on one task's calibration split, evaluated on another task's evaluation split.
* ``fusion``: MARS alone and MARS fused with c_TRACE (logistic regression on both), where the run holds MARS.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np

from tracecal._validation import SEED, Constraint, Interval, check_params
from tracecal.analysis.ablation_tables import ablation_markdown
from tracecal.calibrators import TracePlus, make_calibrator
from tracecal.errors import ValidationError
from tracecal.estimators import MissingStatError, get_estimator
from tracecal.evaluation.protocol import TaskStats, sanitize
from tracecal.evaluation.ranking import informative
from tracecal.evaluation.result_json import merge_partial
from tracecal.evaluation.runstore import RunStore
from tracecal.signals.features import feature_names, trace_plus_features
from tracecal.signals.operators import TraceConfig, decayed_mean, length_norm_sum, window_peak
from tracecal.stats.metrics import auroc, brier, ece
from tracecal.stats.splits import SPLITS, stratified_split
from tracecal.traces.trace import TraceBatch

__all__ = [
    "ARTEFACT",
    "FEATURE_SETS",
    "PAPER",
    "Variant",
    "ablation_markdown",
    "ablation_variants",
    "operator_values",
    "run_ablations",
    "score_variant",
    "shuffle_positions",
    "sweep_configs",
]

ARTEFACT = "ablations"
Kind = Literal["score", "raw", "features"]

#: TRACE+ feature subsets by name (columns of `feature_names` with ``seq_likelihood=True``); our reading of the
#: paper's "entropy-local" (first-k and decayed entropy) and "likelihood-local" (decayed surprisal).
FEATURE_SETS: dict[str, tuple[str, ...]] = {
    "TRACE+ (8 features)": tuple(feature_names()),
    "without length": tuple(n for n in feature_names() if n != "log_length"),
    "entropy-local only": ("first3_entropy_conf", "decayed_entropy_conf_l2", "decayed_entropy_conf_l4"),
    "likelihood-local only": ("decayed_surprisal_conf_l2", "decayed_surprisal_conf_l4"),
    "+ sequence likelihood": tuple(feature_names(seq_likelihood=True)),
    "without slope": tuple(n for n in feature_names() if n != "entropy_slope"),
}

#: The TRACE paper's numbers for its main model (Table 1 and the ablation section): (AUROC, Brier, ECE).
PAPER: dict[str, tuple[float | None, float | None, float | None]] = {
    "TRACE raw": (0.772, None, 0.163),
    "TRACE, Platt": (0.772, 0.154, 0.092),
    "learned operator weights": (0.778, None, 0.054),
    "TRACE+": (0.792, 0.137, 0.054),
    "D only": (0.751, None, None),
    "M only": (0.754, None, None),
    "L only": (0.758, None, None),
    "TRACE, shuffled": (0.755, None, None),
}
PAPER_SWEEP_BAND = {"brier": (0.152, 0.160), "auroc": (0.763, 0.775)}


@dataclass(frozen=True)
class Variant:
    """One ablation: ``make(task_stats)`` gives a score per answer, a raw probability or a feature matrix.

    ``kind`` says which (``score``, ``raw``, ``features``) and so how it is calibrated; ``group`` names its table.
    """

    group: str
    name: str
    kind: Kind
    make: Callable[[TaskStats], np.ndarray]
    needs: str | None = None  # a stat the run must hold (e.g. the MARS pass), else the variant is not run


def shuffle_positions(batch: TraceBatch, seed: int = 0) -> TraceBatch:
    """The batch with the tokens of each answer in a random order (s_t and H_t moved together).

    One vectorised sort: tokens are ordered by (answer, random key), so every answer keeps its length and the
    multiset of its (s_t, H_t) pairs; only positions change.
    """
    seg = batch.segments
    keys = np.random.default_rng(seed).random(seg.n_tokens)
    answer = np.repeat(np.arange(len(seg)), seg.lengths)
    order = np.lexsort((keys, answer))
    return TraceBatch(batch.surprisal[order], batch.entropy[order], batch.offsets)


def operator_values(batch: TraceBatch, cfg: TraceConfig | None = None) -> np.ndarray:
    """The three TRACE operators per answer, shape (B, 3): D_λ(H), M^(w)(H), L_ρ(s) (nats; NaN when T = 0)."""
    c = cfg or TraceConfig()
    seg = batch.segments
    return np.column_stack(
        [
            decayed_mean(batch.entropy, seg, c.lam, c.kernel),
            window_peak(batch.entropy, seg, c.window),
            length_norm_sum(batch.surprisal, seg, c.rho),
        ]
    )


def _trace_conf(batch: TraceBatch, cfg: TraceConfig) -> np.ndarray:
    ops = operator_values(batch, cfg)
    return np.exp(-(ops @ np.array([cfg.alpha, cfg.beta, cfg.gamma])))


def sweep_configs() -> list[tuple[str, TraceConfig]]:
    """TRACE configurations of the hyperparameter sweep, one setting changed at a time from the defaults."""
    base, out = TraceConfig(), []
    grid = np.round(np.arange(0.2, 0.61, 0.1), 2)
    for a in grid:
        for b in grid:
            g = round(1.0 - a - b, 2)
            if 0.1 <= g <= 0.4:
                out.append((f"α={a:g} β={b:g} γ={g:g}", replace(base, alpha=float(a), beta=float(b), gamma=g)))
    out += [(f"λ={v:g}", replace(base, lam=float(v))) for v in (1, 2, 4, 8)]
    out += [(f"w={v}", replace(base, window=v)) for v in (2, 4, 6, 8)]
    out += [(f"ρ={v:g}", replace(base, rho=float(v))) for v in (0.0, 0.25, 0.5, 0.75, 1.0)]
    return out


def _feature_matrix(columns: Sequence[str]) -> Callable[[TaskStats], np.ndarray]:
    names = feature_names(seq_likelihood=True)
    idx = [names.index(c) for c in columns]
    return lambda d: trace_plus_features(d.inputs.batch, seq_likelihood=True)[:, idx]


def _operator_score(i: int) -> Callable[[TaskStats], np.ndarray]:
    """The score −(operator i) of `operator_values` (0: D_λ(H), 1: M^(w)(H), 2: L_ρ(s))."""
    return lambda d: -operator_values(d.inputs.batch)[:, i]


def _swept(cfg: TraceConfig) -> Callable[[TaskStats], np.ndarray]:
    """c_TRACE under the TRACE configuration ``cfg`` (one point of the sweep)."""
    return lambda d: _trace_conf(d.inputs.batch, cfg)


def _estimator_score(name: str) -> Callable[[TaskStats], np.ndarray]:
    return lambda d: np.asarray(get_estimator(name).score(d.inputs), dtype=np.float64)


def _fused(d: TaskStats) -> np.ndarray:
    return np.column_stack([_trace_conf(d.inputs.batch, TraceConfig()), _estimator_score("mars")(d)])


def ablation_variants(seed: int = 0) -> list[Variant]:
    """Every variant of every group except ``transfer`` (which pairs tasks; see `run_ablations`)."""
    cfg = TraceConfig()
    v = [
        Variant("ladder", "TRACE raw", "raw", lambda d: _trace_conf(d.inputs.batch, cfg)),
        Variant("ladder", "TRACE, Platt", "score", lambda d: _trace_conf(d.inputs.batch, cfg)),
        Variant("ladder", "learned operator weights", "features", lambda d: operator_values(d.inputs.batch, cfg)),
        Variant("ladder", "TRACE+", "features", _feature_matrix(FEATURE_SETS["TRACE+ (8 features)"])),
    ]
    for i, op in enumerate(("D", "M", "L")):
        v.append(Variant("operators", f"{op} only", "score", _operator_score(i)))
    v += [Variant("features", name, "features", _feature_matrix(cols)) for name, cols in FEATURE_SETS.items()]
    shuffled: Callable[[TaskStats], TraceBatch] = lambda d: shuffle_positions(d.inputs.batch, seed)  # noqa: E731
    v.append(Variant("shuffle", "TRACE, shuffled", "score", lambda d: _trace_conf(shuffled(d), cfg)))
    v.append(Variant("shuffle", "TRACE+, shuffled", "features", lambda d: trace_plus_features(shuffled(d))))
    v += [Variant("sweep", name, "score", _swept(c)) for name, c in sweep_configs()]
    v.append(Variant("fusion", "MARS", "score", _estimator_score("mars"), needs="mars"))
    v.append(Variant("fusion", "MARS + TRACE", "features", _fused, needs="mars"))
    return v


def _probabilities(kind: Kind, x: np.ndarray, y: np.ndarray, cal: np.ndarray, ev: np.ndarray) -> np.ndarray:
    """Probabilities on ``ev`` for a variant's output ``x`` (fitted on ``cal`` where the kind needs it)."""
    if kind == "raw":
        return np.clip(sanitize(x[ev])[0], 0.0, 1.0)
    if kind == "score":
        raw = sanitize(x)[0]
        return np.asarray(make_calibrator("platt").fit(raw[cal], y[cal]).predict_proba(raw[ev]), dtype=np.float64)
    model = TracePlus().fit(x[cal], y[cal])
    return np.clip(sanitize(model.predict_proba(x[ev]))[0], 0.0, 1.0)


def _metrics(y: np.ndarray, score: np.ndarray, prob: np.ndarray) -> dict[str, float]:
    return {"auroc": auroc(y, score), "brier": brier(y, prob), "ece": ece(y, prob)}


def score_variant(
    kind: Kind,
    x: np.ndarray,
    y: np.ndarray,
    n_seeds: int = 20,
    cal_frac: float = 0.35,
    target: tuple[np.ndarray, np.ndarray] | None = None,
) -> dict[str, float]:
    """Mean and sd over ``n_seeds`` splits of AUROC (on the score, or on the probability for fitted kinds),
    Brier and ECE. With ``target = (x_b, y_b)`` the calibration split comes from (x, y) and the evaluation
    split from another task's (x_b, y_b) (cross-task transfer; split seeds as for each task alone)."""
    rows = []
    for seed in range(n_seeds):
        cal, ev = stratified_split(y, cal_frac, seed)
        if target is None:
            xs, ys, ev_s = x, y, ev
        else:
            xb, yb = target
            ev_s = stratified_split(yb, cal_frac, seed)[1]
            xs, ys = np.concatenate([x[cal], xb[ev_s]]), np.concatenate([y[cal], yb[ev_s]])
            cal, ev_s = np.arange(len(cal)), len(cal) + np.arange(len(ev_s))
        prob = _probabilities(kind, xs, ys, cal, ev_s)
        score = prob if kind == "features" else sanitize(xs[ev_s])[0]
        rows.append(_metrics(ys[ev_s], score, prob))
    out: dict[str, float] = {}
    for key in ("auroc", "brier", "ece"):
        vals = np.array([r[key] for r in rows], dtype=np.float64)
        out[key] = float(np.nanmean(vals)) if np.isfinite(vals).any() else float("nan")
        out[f"{key}_sd"] = float(np.nanstd(vals)) if np.isfinite(vals).any() else float("nan")
    return out


def _variant_rows(
    data: Sequence[TaskStats], variant: Variant, n_seeds: int, cal_frac: float, ranked: Sequence[str]
) -> dict[str, Any]:
    per_task: dict[str, Any] = {}
    for d in data:
        try:
            x = variant.make(d)
        except MissingStatError:
            per_task[d.task] = None  # the run does not hold the stat (e.g. no MARS pass): not run
            continue
        per_task[d.task] = score_variant(variant.kind, x, d.y, n_seeds, cal_frac)
    mean = _task_mean({t: m for t, m in per_task.items() if t in ranked})
    return {"group": variant.group, "kind": variant.kind, "tasks": per_task, "mean": mean}


def _task_mean(per_task: dict[str, Any]) -> dict[str, float] | None:
    """Unweighted mean over the (ranked) tasks a variant ran on (None if it ran on none)."""
    done = [m for m in per_task.values() if m is not None]
    if not done:
        return None
    return {k: float(np.nanmean([m[k] for m in done])) for k in ("auroc", "brier", "ece")}


def _transfer(data: Sequence[TaskStats], n_seeds: int, cal_frac: float) -> dict[str, dict[str, Any]]:
    """TRACE+ fitted on each task's calibration split, AUROC / Brier / ECE on every task's evaluation split."""
    feats = {d.task: trace_plus_features(d.inputs.batch) for d in data}
    out: dict[str, dict[str, Any]] = {}
    for a in data:
        out[a.task] = {
            b.task: score_variant(
                "features", feats[a.task], a.y, n_seeds, cal_frac, None if a is b else (feats[b.task], b.y)
            )
            for b in data
        }
    return out


ABLATION_CONSTRAINTS: dict[str, Constraint] = {
    "n_seeds": SPLITS,
    "cal_frac": Interval(float, 0, 1, closed="neither"),
    "seed": SEED,
}
"""The constraint of each setting of `run_ablations` (``tracecal ablate`` checks its options against the same)."""


def run_ablations(
    run_dir: str | os.PathLike[str] | RunStore,
    tasks: Sequence[str] | None = None,
    n_seeds: int = 20,
    cal_frac: float = 0.35,
    seed: int = 0,
    groups: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Every ablation on a scored run's stored traces (and its MARS pass where present); written into the run
    as ``ablations.json`` and ``ablations.md`` and returned. ``groups`` restricts to some groups (default: all,
    ``transfer`` included), merged into the run's earlier ablations (`merge_partial`: never replaced with less)."""
    from tracecal.evaluation.stored_tasks import load_stored_tasks

    check_params({"n_seeds": n_seeds, "cal_frac": cal_frac, "seed": seed}, ABLATION_CONSTRAINTS)
    store = run_dir if isinstance(run_dir, RunStore) else RunStore(run_dir)
    data = load_stored_tasks(store, ["trace", "mars"], tasks)
    chosen = [v for v in ablation_variants(seed) if groups is None or v.group in groups]
    apart = {d.task: why for d in data if (why := informative(int(d.y.sum()), len(d)))}
    ranked = [d.task for d in data if d.task not in apart]
    cfg = store.config()
    doc: dict[str, Any] = {
        "run": str(store.path),
        # the identity holds the resolved model (config.model is None for the default one)
        "model": (cfg.get("identity") or {}).get("model") or cfg.get("config", {}).get("model"),
        "dtype": (cfg.get("identity") or {}).get("dtype") or cfg.get("config", {}).get("dtype"),
        "tasks": [d.task for d in data],
        "n": {d.task: len(d) for d in data},
        "n_correct": {d.task: int(d.y.sum()) for d in data},
        "n_seeds": n_seeds,
        "cal_frac": cal_frac,
        "seed": seed,
        "not_ranked": apart,
        "variants": {v.name: _variant_rows(data, v, n_seeds, cal_frac, ranked) for v in chosen},
        "paper": {k: dict(zip(("auroc", "brier", "ece"), v, strict=True)) for k, v in PAPER.items()},
        "paper_sweep_band": PAPER_SWEEP_BAND,
    }
    if groups is None or "transfer" in groups:
        doc["transfer"] = _transfer(data, n_seeds, cal_frac)
    _refuse_nothing_ran(data, chosen, doc)
    if groups is not None:  # part of the output: merged into the one there, never replacing it with less
        same, where = (
            ("model", "dtype", "tasks", "n_seeds", "cal_frac", "seed"),
            str(store.artefact_path(f"{ARTEFACT}.json")),
        )
        doc = merge_partial(store.read_artefact(ARTEFACT), doc, same, ("variants", "transfer"), where)
    store.write_artefact(ARTEFACT, doc)
    store.write_text(f"{ARTEFACT}.md", ablation_markdown(doc))
    return doc


def _refuse_nothing_ran(data: Sequence[TaskStats], chosen: Sequence[Variant], doc: dict[str, Any]) -> None:
    """`ValidationError` (before anything is written) when no chosen variant ran on any task, saying why."""
    ran = (any(m is not None for m in doc["variants"][v.name]["tasks"].values()) for v in chosen)
    if doc.get("transfer") or any(ran):
        return
    why = "the run holds no task"
    try:
        _ = chosen[0].make(data[0]) if data and chosen else None
    except MissingStatError as e:
        why = str(e)
    groups = ", ".join(sorted({v.group for v in chosen}))
    raise ValidationError(f"no ablation of the groups {groups} could run on {doc['run']}: {why}; nothing was written")
