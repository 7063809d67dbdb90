"""The user's own input files: a JSONL of prompts (``tracecal generate --prompts``) and a label file of answer ids
with 0/1 labels (``tracecal fit-calibrator --labels``), read with the row readers of `tracecal.tasks.sources`
(UTF-8, a BOM dropped, 1-based line numbers).

Every problem is an `InputFileError` (or `InputFileNotFoundError`) whose message starts with ``path:line`` and
says what the line should hold. Ids are one answer each: a prompts file with an id twice, a label file giving one
id two different labels, and traces sharing an id (`join_labels`) are refused, naming the ids (`check_unique_ids`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from tracecal._inputs import check_file
from tracecal._validation import check_text
from tracecal.errors import TracecalError
from tracecal.tasks.sources import iter_csv, iter_jsonl

__all__ = [
    "InputFileError",
    "InputFileNotFoundError",
    "check_unique_ids",
    "join_labels",
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
    """``path`` if it is a regular file of a bounded size (`tracecal._inputs.check_file`): a missing file, a
    folder, a FIFO or a device (``/dev/null``: read once, not a file to name) is `InputFileNotFoundError`."""
    check_file(path, f"{what} file", "text", InputFileNotFoundError)
    return path


def check_unique_ids(ids: Sequence[str], what: str) -> None:
    """Refuse ids that occur more than once: `InputFileError` ``"<what>: N ids occur more than once: a (2×), …"``
    naming up to five of them."""
    counts = Counter(ids)
    repeated = [(i, n) for i, n in counts.items() if n > 1]
    if repeated:
        shown = ", ".join(f"{i!r} ({n}×)" for i, n in repeated[:5]) + (", …" if len(repeated) > 5 else "")
        raise InputFileError(f"{what}: {len(repeated)} ids occur more than once: {shown}; give each answer its own id")


def jsonl_lines(path: Path, role: str = "prompts file") -> Iterator[tuple[int, Any]]:
    """``(line number, parsed JSON)`` for each non-blank line of a JSONL file; `InputFileError` on bad JSON."""
    for row in iter_jsonl(path, role):
        if row.error is not None:
            raise InputFileError(f"{path}:{row.line}: {row.error}")
        yield (row.line if row.line is not None else row.index + 1), row.record


def _prompt_texts(prompt: Any) -> list[Any]:
    """The texts of a prompt (a string, a chat's contents, a dict's ``prompt`` / ``messages``)."""
    if isinstance(prompt, dict):
        prompt = prompt.get("messages") or prompt.get("prompt")
    if isinstance(prompt, list):
        return [m.get("content") for m in prompt if isinstance(m, dict)]
    return [prompt]


def read_prompt_file(path: Path) -> tuple[list[Any], list[str]]:
    """Prompts and their ids from a JSONL file: each line a JSON string (id: its position), or an object with a
    non-empty ``prompt`` (a string) or ``messages`` (a chat) and an optional ``id``. Texts must be valid Unicode
    (`check_text`: a lone surrogate such as a JSON ``"\\ud800"`` is refused naming ``path:line``)."""
    prompts: list[Any] = []
    ids: list[str] = []
    for lineno, obj in jsonl_lines(_existing(path, "prompts")):
        if isinstance(obj, str):
            prompts.append(obj)
            ids.append(str(len(ids)))
        elif isinstance(obj, dict) and (obj.get("prompt") or obj.get("messages")):
            prompts.append(obj.get("messages") or obj["prompt"])
            ids.append(check_text(str(obj.get("id", len(ids))), f"{path}:{lineno}: the id", InputFileError))
        else:
            raise InputFileError(f"{path}:{lineno}: expected a string or an object with a non-empty 'prompt'")
        for text in _prompt_texts(prompts[-1]):
            if isinstance(text, str):
                check_text(text, f"{path}:{lineno}: the prompt", InputFileError)
    if not prompts:
        raise InputFileError(f"{path}: no prompts found")
    check_unique_ids(ids, str(path))
    return prompts, ids


def parse_label(value: Any, where: str) -> int:
    """A 0/1 label from ``0``, ``1``, ``"0"``, ``"1"`` or a boolean; `InputFileError` naming ``where`` otherwise."""
    if isinstance(value, bool) or value in (0, 1, "0", "1"):
        return int(value)
    raise InputFileError(f"{where}: label must be 0 or 1, got {value!r}")


def _add_label(out: dict[str, int], key: str, label: int, where: str) -> None:
    """Record ``label`` for ``key``: the same label again is accepted, a different one is `InputFileError` (as is
    an id that is not valid Unicode)."""
    check_text(key, f"{where}: the id", InputFileError)
    if out.setdefault(key, label) != label:
        raise InputFileError(f"{where}: id {key!r} is labelled {label} here but {out[key]} on an earlier line")


def _csv_labels(path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for row in iter_csv(path, "labels file"):
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
        _add_label(out, str(rec["id"]), parse_label(rec["label"], where), where)
    return out


def _jsonl_labels(path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for lineno, obj in jsonl_lines(path, "labels file"):
        if not isinstance(obj, dict) or "id" not in obj or "label" not in obj:
            raise InputFileError(f'{path}:{lineno}: each line must be an object {{"id": ..., "label": 0 or 1}}')
        where = f"{path}:{lineno}"
        _add_label(out, str(obj["id"]), parse_label(obj["label"], where), where)
    return out


def read_labels(path: Path) -> dict[str, int]:
    """Labels by answer id from a CSV (a header with ``id`` and ``label``; ``.csv``) or a JSONL of
    ``{"id": ..., "label": 0 or 1}`` objects (any other suffix), UTF-8 with or without a byte-order mark (as
    Excel saves it). An id listed twice with the same label is accepted (one label); with two different labels
    it is refused (`InputFileError` naming the id and the line)."""
    _existing(path, "labels")
    out = _csv_labels(path) if path.suffix.lower() == ".csv" else _jsonl_labels(path)
    if not out:
        raise InputFileError(f"{path}: no labels found")
    return out


def join_labels(ids: Sequence[str], labels: dict[str, int], source: str) -> list[int]:
    """The label of each answer id, in order: `InputFileError` when an id occurs twice among ``ids`` (one label
    would be applied to two answers) or has no label in ``labels`` (read from ``source``), naming the ids."""
    check_unique_ids(ids, "the traces")
    missing = [i for i in ids if i not in labels]
    if missing:
        raise InputFileError(f"{len(missing)} traces have no label in {source} (first: {missing[:3]})")
    return [labels[i] for i in ids]
