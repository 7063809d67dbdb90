"""The verdict of a scored run, in plain words: which confidence to use, how calibrated it is, what a threshold
buys, and the commands to serve it.

Read from the run's ``results.json`` (`tracecal.evaluation.ranking`: the ranked tasks, the leader and every
estimator against it) and its seed-0 predictions (selective answering). The rules (our choices):

* **Which confidence.** Over the ranked (informative) tasks, the *leader* is the estimator with the highest mean
  AUROC; an estimator is *level* with it when the paired bootstrap interval of its AUROC difference holds 0. The
  recommendation is the leader when the gateway can serve it (`SERVABLE`: TRACE and the TRACE+ calibrators, which
  read nothing but the trace), else the servable estimator with the highest AUROC among those level with it, else
  the leader (named as not servable).
* **How calibrated.** Its ECE (10 equal-width bins, mean over splits and ranked tasks) after its calibrator
  (Platt on the labelled calibration split; TRACE+ variants are their own calibrator).
* **What a threshold buys.** Per ranked task, on the seed-0 evaluation split: α*, the smallest error rate that
  Learn-then-Test certifies at the run's δ (`tracecal.report.selective.certified`), and the share answered there;
  where the run's own α (``sel_alpha``) is not certified, `labels_needed` estimates how many labelled answers
  would certify it from the estimator's risk–coverage curve.
* **Serving.** ``tracecal fit-calibrator RUN --estimator NAME`` fits that estimator's calibrator on every answer of
  the ranked tasks; ``tracecal serve`` loads it with the run's model and dtype.
"""

from __future__ import annotations

import math
import os
import shlex
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from tracecal.backends.registry import REGISTRY
from tracecal.evaluation.runstore import RunStore
from tracecal.report.data import RunData, load_run
from tracecal.report.selective import certified, run_delta
from tracecal.stats.selective import SelectiveThreshold

__all__ = ["SERVABLE", "Verdict", "labels_needed", "run_verdict", "verdict_of"]

SERVABLE = ("trace", "trace_plus", "trace_plus_seqlik", "trace_plus_prior", "trace_plus_prior_mono", "trace_plus_cv")
"""The estimators `tracecal fit-calibrator RUN --estimator` turns into a file the gateway serves (they read only
the trace of the answer)."""


@dataclass
class Verdict:
    """What a user should do with a run: ``headline`` (one sentence), ``lines`` (the rest, in words), ``table``
    (the leader and the estimators compared with it), and the facts behind them."""

    headline: str
    lines: list[str] = field(default_factory=list)
    table: list[dict[str, Any]] = field(default_factory=list)
    recommended: str | None = None
    leader: str | None = None
    level_with: list[str] = field(default_factory=list)
    ranked: list[str] = field(default_factory=list)
    not_ranked: dict[str, str] = field(default_factory=dict)
    selective: dict[str, dict[str, Any]] = field(default_factory=dict)
    commands: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def labels_needed(
    confidence: np.ndarray,
    correct: np.ndarray,
    alpha: float,
    delta: float,
    cap: int = 100_000,
    repeats: int = 20,
    seed: int = 0,
) -> int | None:
    """≈ how many labelled answers Learn-then-Test (`tracecal.stats.selective.ltt_threshold`, the procedure the
    run certifies with) needs to certify error rate ``alpha`` with probability ``1 − delta`` for this confidence,
    if its answers looked like these: the smallest N (on a grid of powers of √2 from the current size, at most
    ``cap``) at which a threshold is certified on at least half of ``repeats`` bootstrap samples of N answers
    drawn from (``confidence``, ``correct``). None if even ``cap`` answers do not suffice (the most confident
    answers are wrong too often for α).

    >>> rng = np.random.default_rng(0)
    >>> y = (rng.random(300) < 0.5).astype(int)
    >>> c = y + rng.normal(0, 0.6, 300)            # a confidence that separates well
    >>> n = labels_needed(c, y, 0.1, 0.1)
    >>> n is not None and n >= 300
    True
    >>> labels_needed(rng.random(300), y, 0.1, 0.1) is None   # no signal: nothing certifies 10 % errors
    True
    """
    from tracecal.stats.selective import ltt_threshold, min_answered

    c = np.asarray(confidence, dtype=np.float64)
    y = np.asarray(correct, dtype=np.int64)
    k = np.arange(1, len(y) + 1)
    err = np.cumsum(1 - y[np.argsort(-c, kind="stable")]) / k
    if not np.any(err[k >= min(min_answered(alpha, delta), len(y))] < alpha):
        return None  # no coverage of at least LTT's fewest answers has an error rate under α: labels cannot help
    rng = np.random.default_rng(seed)
    size = max(len(y), 10) * math.sqrt(2)  # the run's own size did not certify it
    while size <= cap:
        n = int(size)
        wins = sum(
            math.isfinite(ltt_threshold(c[i], y[i], alpha, delta).threshold)
            for i in (rng.integers(0, len(y), n) for _ in range(repeats))
        )
        if 2 * wins >= repeats:
            return int(math.ceil(n / 10) * 10)
        size *= math.sqrt(2)
    return None


def _level(leader: dict[str, Any]) -> list[str]:
    """The estimators whose AUROC interval against the leader holds 0."""
    out = []
    for est, m in leader.get("estimators", {}).items():
        a = m.get("auroc") or {}
        if a.get("verdict") == "n.s.":
            out.append(est)
    return out


def _pick(lead: str, level: list[str], avg: dict[str, Any]) -> str:
    if lead in SERVABLE:
        return lead
    ok = [e for e in level if e in SERVABLE]
    return max(ok, key=lambda e: avg[e]["auroc"]["mean"]) if ok else lead


def _fmt_ci(c: dict[str, Any] | None) -> str:
    if not c or not math.isfinite(c.get("lo", math.nan)):
        return ""
    return f"Δ {c['diff']:+.3f} [{c['lo']:+.3f}, {c['hi']:+.3f}]"


def _table(res: dict[str, Any], ref: str, leader: dict[str, Any], show: list[str]) -> list[dict[str, Any]]:
    avg = res["metrics"][ref]
    rows = []
    for est in show:
        m = avg.get(est)
        if m is None:
            continue
        c = leader["estimators"].get(est, {}).get("auroc") if est != leader["estimator"] else None
        rows.append(
            {
                "estimator": est,
                "auroc": m["auroc"]["mean"],
                "brier": m["brier"]["mean"],
                "ece": m["ece"]["mean"],
                "delta": c["diff"] if c else 0.0,
                "lo": c["lo"] if c else math.nan,
                "hi": c["hi"] if c else math.nan,
                "level": est == leader["estimator"] or bool(c and c.get("verdict") == "n.s."),
            }
        )
    return rows


def _shown(res: dict[str, Any], ref: str, lead: str, rec: str, level: list[str]) -> list[str]:
    """The table's estimators: the leader, the recommendation, the level ones, TRACE / TRACE+, P(True), verbalised,
    and the best baseline, in AUROC order."""
    avg = res["metrics"][ref]
    comp = (res.get("statistics") or {}).get("comparisons", {}).get(ref, {})
    want = {lead, rec, *level, "trace", "trace_plus", "trace_plus_cv", "p_true", "verbalized", comp.get("baseline")}
    names = [e for e in avg if e in want and math.isfinite(avg[e]["auroc"]["mean"])]
    return sorted(names, key=lambda e: -avg[e]["auroc"]["mean"])


def _selective(run: RunData, est: str, ranked: list[str], alpha: float) -> dict[str, dict[str, Any]]:
    delta = run_delta(run.results)
    out: dict[str, dict[str, Any]] = {}
    raw = run.raw.get(est)
    for task in ranked:
        idx = run.task_rows.get(task, np.zeros(0, np.int64))
        ev = idx[run.split[idx] == "eval"] if raw is not None else idx[:0]
        ok = ev[np.isfinite(raw[ev])] if raw is not None else ev
        if not ok.size:
            continue
        c: SelectiveThreshold = certified(raw[ok], run.correct[ok], delta)  # type: ignore[index]
        need = None
        if not (math.isfinite(c.alpha) and c.alpha <= alpha):
            need = labels_needed(raw[ok], run.correct[ok], alpha, delta)  # type: ignore[index]
        out[task] = {"alpha_star": c.alpha, "coverage": c.coverage, "n": int(ok.size), "alpha": alpha}
        out[task] |= {"delta": delta, "labels_needed": need}
    return out


def _selective_lines(sel: dict[str, dict[str, Any]], est: str) -> list[str]:
    lines = []
    for task, s in sel.items():
        a, need = s["alpha"], s["labels_needed"]
        conf = f"with probability ≥ {1 - s['delta']:g}"
        if math.isfinite(s["alpha_star"]) and s["alpha_star"] <= a:
            lines.append(
                f"{task}: thresholding {est} certifies an error rate ≤ {s['alpha_star']:.2f} {conf}, answering "
                f"{s['coverage']:.0%} of the questions (fix α, then `tracecal selective RUN --alpha α` gives the "
                "threshold)."
            )
            continue
        got = (
            f"the smallest certified error rate is {s['alpha_star']:.2f} ({s['coverage']:.0%} answered)"
            if math.isfinite(s["alpha_star"])
            else "no error rate is certified"
        )
        more = (
            f"≈ {need:,} labelled answers would certify α = {a:g}"
            if need
            else f"no number of labels certifies α = {a:g}: its most confident answers are wrong more often than that"
        )
        lines.append(f"{task}: at this size ({s['n']} evaluation answers) {got} {conf}; {more}.")
    return lines


def _commands(run_dir: str, res: dict[str, Any], rec: str) -> list[str]:
    cfg = res.get("config", {})
    model = cfg.get("model") or "smollm2-135m-instruct"
    cal = os.path.join(run_dir, "calibrator.json")
    q = shlex.quote
    fit = f"tracecal fit-calibrator {q(run_dir)} --estimator {rec} --out {q(cal)}"
    backend = cfg.get("backend") or "auto"
    how = f"--backend {backend}" if backend not in ("auto", "hf") else f"--dtype {cfg.get('dtype') or 'auto'}"
    serve = f"tracecal serve --model {q(str(model))} {how} --calibrator {q(cal)}"
    return [fit, serve]


def _model_words(run: RunData) -> str:
    """``model (weights)`` as the run's identity records them: the resolved dtype, or what its backend declares
    (`BackendSpec.weights`: llama.cpp's GGUF weights)."""
    cfg = run.results.get("config", {})
    try:
        ident = RunStore(run.path).config().get("identity") or {}
    except (OSError, ValueError):
        ident = {}
    spec = REGISTRY.get(str(ident.get("backend")))  # a backend declares how its weights are named (no --dtype)
    weights = spec.weights if spec is not None and spec.weights else ident.get("dtype") or cfg.get("dtype")
    return f"{ident.get('model') or cfg.get('model') or 'the default model'} ({weights})"


def _no_verdict(res: dict[str, Any], apart: dict[str, str]) -> Verdict:
    why = "; ".join(f"{t}: {r}" for t, r in apart.items()) or "the run has no scored task"
    return Verdict(
        headline="No verdict: no task has enough correct and wrong answers to rank the confidences.",
        lines=[why, "Run more questions (`--limit`) or a stronger model (`--model`), then score again."],
        not_ranked=apart,
    )


def verdict_of(run: RunData, run_dir: str | None = None) -> Verdict:
    """The `Verdict` of a loaded run (see the module docstring)."""
    res = run.results
    stats = res.get("statistics") or {}
    info = res.get("tasks", {})
    apart = {t: str(i.get("informative_reason") or "") for t, i in info.items() if not i.get("informative", True)}
    ref, leader = (stats.get("ranked") or {}).get("over"), stats.get("leader")
    if "ranked" not in stats:  # scored before the rule: its statistics hold no leader to read
        return Verdict(
            headline="No verdict yet: this run was scored by an older tracecal.",
            lines=[f"Score it again (no generation): tracecal evaluate --score-only --run-dir {run_dir or run.path}"],
            not_ranked=apart,
        )
    if not ref or not leader:
        return _no_verdict(res, apart)
    ranked = list((stats.get("ranked") or {}).get("tasks") or [])
    lead, level = leader["estimator"], _level(leader)
    avg = res["metrics"][ref]
    rec = _pick(lead, level, avg)
    m = avg[rec]
    over = f"{len(ranked)} tasks ({', '.join(ranked)})" if len(ranked) > 1 else ranked[0]
    model = _model_words(run)
    if rec == lead:
        why = "the highest AUROC" + (f"; level with it: {', '.join(level)}" if level else ", significantly")
    else:
        ci = _fmt_ci(leader["estimators"][rec]["auroc"])
        why = f"level with the leader {lead} ({ci}), which the gateway cannot serve"
    cal = "its own fit" if res["estimators"].get(rec, {}).get("self_calibrated") else "Platt scaling"
    lines = [
        f"Calibration: ECE {m['ece']['mean']:.3f} and Brier {m['brier']['mean']:.3f} after {cal} on the "
        f"{res['config'].get('cal_frac', 0.35):.0%} labelled calibration split (reliability diagrams in the report).",
    ]
    sel = _selective(run, rec, ranked, float((stats.get("selective") or {}).get("alpha", 0.1)))
    lines += _selective_lines(sel, rec)
    lines += [f"Not ranked: {t}: {r}." for t, r in apart.items()]
    cmds = _commands(run_dir or str(run.path), res, rec) if rec in SERVABLE else []
    return Verdict(
        headline=f"For {model} on {over}: use {rec} — AUROC {m['auroc']['mean']:.3f} ({why}).",
        lines=lines,
        table=_table(res, ref, leader, _shown(res, ref, lead, rec, level)),
        recommended=rec,
        leader=lead,
        level_with=level,
        ranked=ranked,
        not_ranked=apart,
        selective=sel,
        commands=cmds,
    )


def run_verdict(run_dir: str | os.PathLike[str] | RunStore) -> Verdict:
    """`verdict_of` a scored run directory."""
    run = load_run(run_dir)
    return verdict_of(run, str(run_dir.path if isinstance(run_dir, RunStore) else run_dir))
