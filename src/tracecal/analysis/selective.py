"""Selective answering on a scored run: coverage and realised risk of the guaranteed threshold per estimator.

`run_selective` re-scores a run's tasks with its stored labels (`tracecal.evaluation.stored_tasks.load_stored_tasks`)
under the split protocol, choosing on each calibration split the Learn-then-Test threshold of `tracecal.stats.selective`
(error rate among answered ≤ α with probability ≥ 1 − δ) and applying it to the evaluation split. Per task and
estimator: mean coverage and realised risk over the splits, the share of splits whose realised risk exceeds α
(which should stay ≤ δ up to the noise of a finite evaluation split), and the threshold to deploy — chosen on
*all* of the task's answers, on the estimator's raw score. A fitted estimator (TRACE+) is fitted on a random
1 − ``holdout`` of the answers and its threshold chosen on the other ``holdout``
(`tracecal.stats.splits.threshold_split`: its score must not have seen the answers the threshold is tested on);
deploy that fitted model with it. The document is written to ``RUN/selective.json`` as standard JSON: a number
that is not finite is null there — a threshold of null (``"certified": false``) means no threshold certifies the
guarantee (every answer would abstain), a mean of null that no split gave a value.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from tracecal._inputs import UserFileError, read_bytes
from tracecal.errors import ValidationError
from tracecal.estimators import REGISTRY, get_estimator, resolve_estimators
from tracecal.evaluation.config import legacy_identity, stored_setting
from tracecal.evaluation.protocol import ScoreConfig, TaskStats, sanitize, score_tasks
from tracecal.evaluation.results import Results
from tracecal.evaluation.runstore import RunStore
from tracecal.evaluation.stored_tasks import load_stored_tasks
from tracecal.stats.metrics import SingleClassWarning
from tracecal.stats.selective import check_alpha_delta, check_holdout, ltt_threshold
from tracecal.stats.splits import threshold_split
from tracecal.traces.provenance import provenance, read_provenance

__all__ = ["run_selective", "deployment_threshold", "deployed_threshold", "ARTEFACT"]

ARTEFACT = "selective"


def deployment_threshold(
    data: TaskStats, estimator: str, alpha: float, delta: float, holdout: float = 0.5, seed: int = 0
) -> dict[str, Any]:
    """The Learn-then-Test threshold of ``estimator``'s raw score chosen on the task's answers: all of them for a
    label-free score; for a fitted one, the ``holdout`` share its fit (on the rest) has not seen (0: all, no
    guarantee). ``n_fit``: the answers the estimator was fitted on (0 for a label-free one)."""
    est = get_estimator(estimator)
    fit, thr = np.arange(0), np.arange(len(data))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        if REGISTRY[estimator].needs_fit:
            fit, thr = threshold_split(data.y, holdout, seed) if holdout > 0 else (thr, thr)
            est = est.fit(data.inputs.select(fit), data.y[fit])
        raw, _ = sanitize(est.score(data.inputs.select(thr)))
    t = ltt_threshold(raw, data.y[thr], alpha, delta)
    return {
        "threshold": t.threshold,
        "certified": bool(np.isfinite(t.threshold)),
        "n_answered": t.n_answered,
        "n_errors": t.n_errors,
        "coverage": t.coverage,
        "n_fit": len(fit),
        "n_threshold": len(thr),
    }


def _document(data: Sequence[TaskStats], res: Results, cfg: ScoreConfig) -> dict[str, Any]:
    """The selective document of scored tasks: per task × estimator, the split means of coverage and risk, the
    share of splits whose risk exceeds α, the base rate, and the threshold to deploy (None where not run)."""
    alpha, delta, holdout = cfg.sel_alpha, cfg.sel_delta, cfg.sel_holdout
    doc: dict[str, Any] = {
        "alpha": alpha,
        "delta": delta,
        "holdout": holdout,
        "n_splits": cfg.n_seeds,
        "cal_frac": cfg.cal_frac,
        "score": "raw",
        "tasks": {},
    }
    for d in data:
        per, info = res.metrics[d.task], res.tasks[d.task]
        doc["tasks"][d.task] = {
            e: {
                "coverage": per[e]["sel_coverage"],
                "risk": per[e]["sel_risk"],
                "violation_share": per[e]["sel_violation"]["mean"],
                "base_rate": info["accuracy"],
                "deploy": None if e in info["not_run"] else deployment_threshold(d, e, alpha, delta, holdout, cfg.seed),
            }
            for e in cfg.estimators
        }
    return doc


def run_selective(
    run_dir: str | os.PathLike[str] | RunStore,
    alpha: float = 0.1,
    delta: float = 0.1,
    estimators: Sequence[str] | None = None,
    tasks: Sequence[str] | None = None,
    n_splits: int | None = None,
    write: bool = True,
    holdout: float | None = None,
) -> dict[str, Any]:
    """Selective answering per task × estimator (module docstring); the JSON document (also written into the run
    as ``selective.json`` unless ``write`` is false). Defaults come from the run: its estimators, splits,
    calibration share, calibrator and ``sel_holdout`` (0.5 when it has none): the share of the answers a fitted
    estimator's threshold is chosen on."""
    check_alpha_delta(alpha, delta)
    store = run_dir if isinstance(run_dir, RunStore) else RunStore(run_dir)
    conf = store.config()["config"]
    run = {k: stored_setting(conf, k, store.path) for k in ("n_seeds", "sel_holdout", "cal_frac", "seed") if k in conf}
    names = resolve_estimators(list(estimators) if estimators else conf.get("estimators") or "all")
    data = load_stored_tasks(store, names, tasks)
    n_seeds = n_splits or run.get("n_seeds", 20)
    holdout = run.get("sel_holdout", 0.5) if holdout is None else holdout
    check_holdout(holdout)
    cfg = ScoreConfig(
        names,
        n_seeds=n_seeds,
        cal_frac=float(run.get("cal_frac", 0.35)),
        calibrator=conf.get("calibrator", "platt"),
        seed=int(run.get("seed", 0)),
        n_boot=0,
        sel_alpha=alpha,
        sel_delta=delta,
        sel_holdout=holdout,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SingleClassWarning)
        res = score_tasks(data, cfg)
    doc = _document(data, res, cfg)
    ident = store.config().get("identity") or legacy_identity(conf)  # whose answers the guarantee is for
    doc["provenance"] = provenance(ident.get("model"), ident.get("dtype"), store.path)
    if write:
        store.write_artefact(ARTEFACT, doc)
    return doc


def deployed_threshold(
    path: str | os.PathLike[str], estimator: str = "trace", task: str | None = None
) -> dict[str, Any]:
    """The threshold to deploy from a ``selective.json`` that `run_selective` wrote (e.g. for the gateway's
    ``abstain``): ``{"threshold", "estimator", "task", "alpha", "delta", "n_threshold", "coverage", "path",
    "sha256", "model", "dtype", "provenance"}`` (model and dtype from the file's own ``provenance``; a file from
    before it: from the run's ``config.json`` beside it, None without one).

    ``task`` may be left out when the file holds one task. ValueError with what to fix for a file that is not a
    selective document, an unknown task or estimator, or a threshold that certifies nothing (+∞: at that α no
    answer may be given; rerun with a larger α).
    """
    import hashlib
    import json
    import math
    from pathlib import Path

    p = Path(path)
    raw = read_bytes(p, "guarantee file")  # the one checked opener (tracecal._inputs)
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise UserFileError(f"guarantee file {p}: not the JSON `tracecal selective` writes ({e})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("tasks"), dict) or not {"alpha", "delta"} <= set(doc):
        raise UserFileError(f"{p} is not a selective.json (written by `tracecal selective RUN`)")
    tasks = sorted(doc["tasks"])
    if task is None and len(tasks) != 1:
        raise UserFileError(f"{p} holds the tasks {', '.join(tasks)}: name one")
    task = tasks[0] if task is None else task
    if task not in doc["tasks"]:
        raise UserFileError(f"{p} has no task {task!r}; it holds {', '.join(tasks)}")
    entry = doc["tasks"][task].get(estimator)
    deploy = entry.get("deploy") if isinstance(entry, dict) else None
    if not isinstance(deploy, dict):
        raise UserFileError(f"{p} has no deployable threshold of {estimator!r} for {task!r}")
    thr = math.inf if deploy.get("threshold") is None else float(deploy["threshold"])  # null: none certified
    if not math.isfinite(thr):
        raise ValidationError(
            f"{p}: no threshold of {estimator!r} on {task!r} keeps the error rate ≤ α = {doc['alpha']:g} "
            f"with probability ≥ 1 − δ = {1 - doc['delta']:g}: every answer would abstain. Rerun "
            "`tracecal selective` with a larger --alpha"
        )
    record = read_provenance(doc.get("provenance"))  # the file's own record; older files: the run's beside it
    run_cfg: dict[str, Any] = dict(record or {})
    if record is None and (run := RunStore(p.parent)).exists():
        run_cfg = dict(run.config().get("config", {}))
    return {
        "threshold": thr,
        "estimator": estimator,
        "task": task,
        "alpha": doc["alpha"],
        "delta": doc["delta"],
        "n_threshold": deploy.get("n_threshold"),
        "coverage": deploy.get("coverage"),
        "path": str(p.resolve()),
        "sha256": hashlib.sha256(raw).hexdigest(),
        "model": run_cfg.get("model"),
        "dtype": run_cfg.get("dtype"),
        "provenance": record,
    }
