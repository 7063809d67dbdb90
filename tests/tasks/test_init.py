"""`tracecal.tasks` (the package): the registry of built-in tasks and its defaults."""

from __future__ import annotations

from tests.tasks.helpers import MANIFEST_COUNTS, needs_data
from tracecal import tasks
from tracecal.tasks import (
    TASKS,
)


@needs_data
def test_registry_names_and_defaults() -> None:
    assert set(MANIFEST_COUNTS) <= set(TASKS)
    assert tasks.TASK_NAMES == tuple(TASKS[n].name for n in tasks.TASK_NAMES)
    budgets = {n: TASKS[n].max_new_tokens for n in MANIFEST_COUNTS}
    assert budgets == {
        "triviaqa": 24,
        "mlqa": 24,
        "truthfulqa": 48,
        "svamp": 96,
        "gsm8k": 96,
        "arc_easy": 16,
        "arc_challenge": 16,
        "commonsenseqa": 16,
    }
    for n in MANIFEST_COUNTS:
        assert "correct iff" in TASKS[n].label_rule
