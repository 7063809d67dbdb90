"""A scored run read back with its stored labels (`load_stored_tasks`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tracecal.evaluation.runstore import NotARunError, RunStore
from tracecal.evaluation.stored_tasks import load_stored_tasks
from tracecal.testing import write_synthetic_run


def test_stored_tasks_carry_the_stored_labels_and_traces(tmp_path: Path) -> None:
    run = write_synthetic_run(tmp_path / "run", tasks=("triviaqa", "svamp"), n_per_task=30)
    data = load_stored_tasks(run, ["trace"])
    assert [d.task for d in data] == ["triviaqa", "svamp"] and all(len(d) == 30 for d in data)
    rows = RunStore(run).read_table("rows", ["task", "correct"]).to_pydict()
    stored = [c for t, c in zip(rows["task"], rows["correct"], strict=True) if t == "svamp"]
    assert np.array_equal(data[1].y, stored) and data[1].label_rule == "synthetic labels for svamp"
    assert load_stored_tasks(run, ["trace"], ["svamp"])[0].task == "svamp"
    with pytest.raises(ValueError, match="task 'mlqa' is not in"):
        load_stored_tasks(run, ["trace"], ["mlqa"])
    assert load_stored_tasks(run, ["trace", "p_true"], ["svamp"])[0].missing == {"extra"}


def test_a_folder_that_is_not_a_scored_run_is_refused(tmp_path: Path) -> None:
    with pytest.raises(NotARunError):
        load_stored_tasks(tmp_path / "nowhere", ["trace"])
