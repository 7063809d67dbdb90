"""From an evaluated run to a calibrator file the gateway and `tracecal score` serve.

`fit_from_run` fits the calibrator behind one estimator of the TRACE family on *every* labelled answer of the
chosen tasks of a run directory (the evaluation fitted it on 35 % splits to measure it; a deployment uses all the
labels it has):

* ``trace``: Platt scaling of c_TRACE (a `PlattCalibrator`, which the gateway applies to the c_TRACE it computes);
* an estimator with a ``model_class`` (TRACE+, ``trace_plus_cv``, ``trace_plus_prior`` …): that calibrator, with
  the estimator's own parameters, fitted on the traces.

Its provenance records the run's model and dtype, so applying it to answers of another model or dtype is
refused (`tracecal.traces.provenance`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from tracecal.calibrators import PlattCalibrator
from tracecal.errors import ValidationError
from tracecal.estimators import REGISTRY, get_estimator
from tracecal.evaluation.ranking import ranked_tasks
from tracecal.evaluation.runstore import RunStore
from tracecal.traces.provenance import traces_provenance
from tracecal.traces.trace import Trace

__all__ = ["deployable", "fit_from_run", "run_answers"]


def deployable() -> list[str]:
    """The registered estimators `fit_from_run` can turn into a calibrator file."""
    return ["trace"] + [n for n, c in REGISTRY.items() if getattr(c, "model_class", None) is not None]


def run_answers(store: RunStore, tasks: Sequence[str]) -> tuple[list[Trace], np.ndarray]:
    """The traces of ``tasks`` and their 0/1 labels (the run's ``rows`` table, joined on task and id)."""
    rows = store.scored_rows(["task", "id", "correct"])
    label = {
        (str(t), str(i)): int(c)
        for t, i, c in zip(*(rows.column(k).to_pylist() for k in ("task", "id", "correct")), strict=True)
    }
    traces: list[Trace] = []
    y: list[int] = []
    for task in tasks:
        for t in store.read_traces(task):
            key = (task, str(t.id))
            if key in label:
                traces.append(t)
                y.append(label[key])
    return traces, np.asarray(y, dtype=np.int64)


def fit_from_run(run_dir: str | os.PathLike[str], estimator: str, tasks: Sequence[str] | None = None) -> Any:
    """The calibrator of ``estimator`` fitted on every labelled answer of ``tasks`` (default: the run's ranked
    tasks) of a scored run, with its provenance set. Raises `ValidationError` for an estimator that has no
    calibrator file (`deployable`) or a task the run does not hold."""
    if estimator not in deployable():
        raise ValidationError(
            f"--estimator {estimator!r} cannot be served from a file; choose one of {', '.join(deployable())}"
        )
    store = RunStore(run_dir)
    info = store.read_results().get("tasks", {})
    chosen = list(tasks) if tasks else ranked_tasks(info)
    unknown = [t for t in chosen if t not in info]
    if unknown or not chosen:
        raise ValidationError(
            f"--tasks: {', '.join(unknown) or 'no ranked task'}; the run holds {', '.join(info) or 'no task'}"
        )
    traces, y = run_answers(store, chosen)
    if len(np.unique(y)) < 2:
        raise ValidationError(f"{run_dir}: the answers of {', '.join(chosen)} are all of one class: nothing to fit")
    if estimator == "trace":
        cal: Any = PlattCalibrator()  # reads a score: c_TRACE of each answer (`Calibrator.input_of`)
    else:
        est: Any = get_estimator(estimator)
        cal = type(est).model_class(**est.get_params())
    cal.fit_answers(traces, y)  # the one fit entry of a calibrator
    cal.provenance = traces_provenance(traces, run_dir)
    return cal
