"""The user's own input files: a JSONL of prompts (``tracecal generate --prompts``) and a label file of answer ids
with 0/1 labels (``tracecal fit-calibrator --labels``), read with the row readers of `tracecal.tasks.sources`
(UTF-8, a BOM dropped, 1-based line numbers).

Every problem is an `InputFileError` (or `InputFileNotFoundError`) whose message starts with ``path:line`` and
says what the line should hold.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tracecal.errors import TracecalError
from tracecal.tasks.sources import iter_csv, iter_jsonl

__all__ = [
    "InputFileError",
    "InputFileNotFoundError",
    "jsonl_lines",
    "parse_label",
    "read_labels",
    "read_prompt_file",
]


class InputFileError(TracecalError, ValueError):
    """A prompts or labels file holds something it should not (bad JSON, a missing column, a label not 0/1)."""


class InputFileNotFoundError(TracecalError, FileNotFoundError):
    """A prompts or labels file that does not exist (or is not a file)."""


def _existing(path: Path, what: str) -> Path:
    if not path.is_file():
        raise InputFileNotFoundError(f"{what} file not found: {path}")
    return path


def jsonl_lines(path: Path) -> Iterator[tuple[int, Any]]:
    """``(line number, parsed JSON)`` for each non-blank line of a JSONL file; `InputFileError` on bad JSON."""
    for row in iter_jsonl(path):
        if row.error is not None:
            raise InputFileError(f"{path}:{row.line}: {row.error}")
        yield (row.line if row.line is not None else row.index + 1), row.record


def read_prompt_file(path: Path) -> tuple[list[Any], list[str]]:
    """Prompts and their ids from a JSONL file: each line a JSON string (id: its position), or an object with a
    non-empty ``prompt`` (a string) or ``messages`` (a chat) and an optional ``id``."""
    prompts: list[Any] = []
    ids: list[str] = []
    for lineno, obj in jsonl_lines(_existing(path, "prompts")):
        if isinstance(obj, str):
            prompts.append(obj)
            ids.append(str(len(ids)))
        elif isinstance(obj, dict) and (obj.get("prompt") or obj.get("messages")):
            prompts.append(obj.get("messages") or obj["prompt"])
            ids.append(str(obj.get("id", len(ids))))
        else:
            raise InputFileError(f"{path}:{lineno}: expected a string or an object with a non-empty 'prompt'")
    if not prompts:
        raise InputFileError(f"{path}: no prompts found")
    return prompts, ids


def parse_label(value: Any, where: str) -> int:
    """A 0/1 label from ``0``, ``1``, ``"0"``, ``"1"`` or a boolean; `InputFileError` naming ``where`` otherwise."""
    if isinstance(value, bool) or value in (0, 1, "0", "1"):
        return int(value)
    raise InputFileError(f"{where}: label must be 0 or 1, got {value!r}")


def _csv_labels(path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for row in iter_csv(path):
        where = f"{path}:{row.line}"
        if row.error is not None:
            raise InputFileError(f"{where}: {row.error}")
        rec = row.record
        missing = [c for c in ("id", "label") if c not in rec]
        if missing:
            raise InputFileError(
                f"{path}: the CSV needs the columns id and label; missing: {', '.join(missing)} "
                f"(found: {', '.join(rec) or 'no header'})"
            )
        out[str(rec["id"])] = parse_label(rec["label"], where)
    return out


def _jsonl_labels(path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for lineno, obj in jsonl_lines(path):
        if not isinstance(obj, dict) or "id" not in obj or "label" not in obj:
            raise InputFileError(f'{path}:{lineno}: each line must be an object {{"id": ..., "label": 0 or 1}}')
        out[str(obj["id"])] = parse_label(obj["label"], f"{path}:{lineno}")
    return out


def read_labels(path: Path) -> dict[str, int]:
    """Labels by answer id from a CSV (a header with ``id`` and ``label``; ``.csv``) or a JSONL of
    ``{"id": ..., "label": 0 or 1}`` objects (any other suffix)."""
    _existing(path, "labels")
    out = _csv_labels(path) if path.suffix.lower() == ".csv" else _jsonl_labels(path)
    if not out:
        raise InputFileError(f"{path}: no labels found")
    return out
