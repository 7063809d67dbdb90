"""Shared helpers of the task tests: the real shared data (skipped when absent), rows loaded once, small files."""

from __future__ import annotations

import functools
import json
import warnings
from pathlib import Path

import pytest

from tracecal.tasks import (
    Example,
    MalformedRowWarning,
    data_dir,
    get_task,
)

MANIFEST_COUNTS = {
    "triviaqa": 3000,
    "svamp": 1000,
    "gsm8k": 1319,
    "truthfulqa": 817,
    "mlqa": 512,
    "commonsenseqa": 1221,
    "arc_easy": 2376,
    "arc_challenge": 1172,
}


def real_data_dir() -> Path | None:
    try:
        return data_dir()
    except FileNotFoundError:
        return None


needs_data = pytest.mark.skipif(real_data_dir() is None, reason="shared evaluation data not found")


@functools.cache
def rows(name: str) -> tuple[Example, ...]:
    """All rows of a built-in task, loaded once per test session; no malformed row may be skipped."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", MalformedRowWarning)
        return tuple(get_task(name).load())


def write_file(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def jsonl_text(*rows_: object) -> str:
    return "\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows_) + "\n"
