"""Selective answering on a scored run: coverage and realised risk of the guaranteed threshold per estimator.

`run_selective` re-scores a run's tasks with its stored labels (`tracecal.learning_curve.load_stored_tasks`)
under the split protocol, choosing on each calibration split the Learn-then-Test threshold of `tracecal.selective`
(error rate among answered ≤ α with probability ≥ 1 − δ) and applying it to the evaluation split. Per task and
estimator: mean coverage and realised risk over the splits, the share of splits whose realised risk exceeds α
(which should stay ≤ δ up to the noise of a finite evaluation split), and the threshold to deploy — chosen on
*all* of the task's answers, on the estimator's raw score (fitted estimators fitted on all answers first). The
document is written to ``RUN/selective.json``.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from typing import Any

from tracecal.estimators import REGISTRY, get_estimator, resolve_estimators
from tracecal.learning_curve import load_stored_tasks
from tracecal.metrics import SingleClassWarning
from tracecal.protocol import ScoreConfig, TaskStats, sanitize, score_tasks
from tracecal.runstore import RunStore
from tracecal.selective import check_alpha_delta, ltt_threshold

__all__ = ["run_selective", "deployment_threshold", "ARTEFACT"]

ARTEFACT = "selective"


def deployment_threshold(data: TaskStats, estimator: str, alpha: float, delta: float) -> dict[str, Any]:
    """The Learn-then-Test threshold of ``estimator``'s raw score chosen on all of the task's answers."""
    est = get_estimator(estimator)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        if REGISTRY[estimator].needs_fit:
            est = est.fit(data.inputs, data.y)
        raw, _ = sanitize(est.score(data.inputs))
    t = ltt_threshold(raw, data.y, alpha, delta)
    return {"threshold": t.threshold, "n_answered": t.n_answered, "n_errors": t.n_errors, "coverage": t.coverage}


def run_selective(
    run_dir: str | os.PathLike[str] | RunStore,
    alpha: float = 0.1,
    delta: float = 0.1,
    estimators: Sequence[str] | None = None,
    tasks: Sequence[str] | None = None,
    n_splits: int | None = None,
    write: bool = True,
) -> dict[str, Any]:
    """Selective answering per task × estimator (module docstring); the JSON document (also written into the run
    as ``selective.json`` unless ``write`` is false). Defaults come from the run: its estimators, splits,
    calibration share and calibrator."""
    check_alpha_delta(alpha, delta)
    store = run_dir if isinstance(run_dir, RunStore) else RunStore(run_dir)
    conf = store.config()["config"]
    names = resolve_estimators(list(estimators) if estimators else conf.get("estimators") or "all")
    data = load_stored_tasks(store, names, tasks)
    n_seeds = n_splits or int(conf.get("n_seeds", 20))
    cfg = ScoreConfig(names, n_seeds=n_seeds, cal_frac=float(conf.get("cal_frac", 0.35)),
                      calibrator=conf.get("calibrator", "platt"), seed=int(conf.get("seed", 0)), n_boot=0,
                      sel_alpha=alpha, sel_delta=delta)  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SingleClassWarning)
        res = score_tasks(data, cfg)
    doc: dict[str, Any] = {"alpha": alpha, "delta": delta, "n_splits": cfg.n_seeds, "cal_frac": cfg.cal_frac,
                           "score": "raw", "tasks": {}}  # fmt: skip
    for d in data:
        per = res.metrics[d.task]
        doc["tasks"][d.task] = {
            e: {"coverage": per[e]["sel_coverage"], "risk": per[e]["sel_risk"],
                "violation_share": per[e]["sel_violation"]["mean"], "base_rate": res.tasks[d.task]["accuracy"],
                "deploy": deployment_threshold(d, e, alpha, delta) if e not in res.tasks[d.task]["not_run"] else None}
            for e in names
        }  # fmt: skip
    if write:
        store.write_artefact(ARTEFACT, doc)
    return doc
