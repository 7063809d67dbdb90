"""A scored run read back with the labels it was scored with: each task's `TaskStats` from the run alone.

`load_stored_tasks` reads a scored run through its `RunStore`: the traces and the passes' stats
(`tracecal.evaluation.run.load_task_stats`) with the labels of the ``rows`` table (so it needs no data files and
works on any scored run directory). The learning curves and selective answering (`tracecal.analysis`) start here.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from tracecal.errors import ValidationError
from tracecal.estimators import needs_of
from tracecal.evaluation.protocol import TaskStats
from tracecal.evaluation.run import load_task_stats
from tracecal.evaluation.runstore import RunStore

__all__ = ["StoredLabels", "load_stored_tasks"]


@dataclass
class StoredLabels:
    """A task whose labels are the ones stored in the run's ``rows`` table (for `load_task_stats`)."""

    name: str
    label_rule: str

    def label(self, example: Any, text: str) -> int:
        return int(example.correct)


def load_stored_tasks(
    run_dir: str | os.PathLike[str] | RunStore, estimators: Sequence[str], tasks: Sequence[str] | None = None
) -> list[TaskStats]:
    """Each task's stats and stored labels from a scored run (the passes the ``estimators`` need, if complete)."""
    store = run_dir if isinstance(run_dir, RunStore) else RunStore(run_dir)
    rows = store.scored_rows(["task", "id", "question", "golds", "correct"])
    cols = rows.to_pydict()
    names = list(dict.fromkeys(cols["task"]))
    unknown = [t for t in tasks or () if t not in names]
    if unknown:
        raise ValidationError(f"task {unknown[0]!r} is not in {store.path}; it holds {', '.join(names)}")
    info = store.read_results().get("tasks", {})
    passes = needs_of(estimators)
    out = []
    for t in tasks or names:
        rows_t = zip(cols["task"], cols["id"], cols["question"], cols["golds"], cols["correct"], strict=True)
        exs = [
            SimpleNamespace(id=i, question=q, golds=json.loads(g) if g else [], correct=c)
            for task, i, q, g, c in rows_t
            if task == t
        ]
        rule = str(info.get(t, {}).get("label_rule", "stored labels"))
        out.append(load_task_stats(store, StoredLabels(t, rule), exs, passes, allow_missing=True))
    return out
