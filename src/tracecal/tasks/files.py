"""The user's own input files: a JSONL of prompts (``tracecal generate --prompts``), a label file of answer ids
with 0/1 labels (``tracecal fit-calibrator --labels``; `write_labels` writes one) and an answers file of prompts
with the answers to score (``tracecal score-answers``: `read_answer_rows`), read with the row readers of
`tracecal.tasks.sources` (UTF-8, a BOM dropped, 1-based line numbers). Their formats, with an example each:
docs/formats.md.

Every problem is an `InputFileError` (or `InputFileNotFoundError`) whose message starts with ``path:line`` and
says what the line should hold. Ids are one answer each: a prompts file with an id twice, a label file giving one
id two different labels, and traces sharing an id (`join_labels`) are refused, naming the ids (`check_unique_ids`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from tracecal._inputs import check_file, loads
from tracecal._validation import check_text
from tracecal.errors import TracecalError, ValidationError
from tracecal.tasks.example import Example, RowError
from tracecal.tasks.sources import iter_csv, iter_jsonl, reader_for
from tracecal.tasks.user import list_field

__all__ = [
    "ANSWER_FILE_SUFFIXES",
    "ANSWER_KEYS",
    "PROMPT_KEYS",
    "AmbiguousRowError",
    "AnswerRow",
    "InputFileError",
    "InputFileNotFoundError",
    "check_unique_ids",
    "join_labels",
    "jsonl_lines",
    "parse_answer_row",
    "parse_label",
    "read_answer_rows",
    "read_labels",
    "write_labels",
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


def write_labels(
    path: Path, ids: Sequence[str], labels: Sequence[int], inputs: Any = (), option: str = "--labels-out"
) -> Path:
    """A labels CSV - the header ``id,label``, then one answer id and its 0/1 label per line: what `read_labels`
    (``tracecal fit-calibrator --labels``) reads - written atomically, never over one of ``inputs``
    (`tracecal._outputs.atomic_write`; ``option`` names the path in its refusal)."""
    import csv

    from tracecal._outputs import atomic_write

    if len(ids) != len(labels):
        raise ValidationError(f"{len(ids)} ids but {len(labels)} labels")

    def write(name: str) -> None:
        with open(name, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(["id", "label"])
            w.writerows((i, parse_label(z, f"the label of {i!r}")) for i, z in zip(ids, labels, strict=True))

    atomic_write(path, write, inputs, option)
    return path


def join_labels(ids: Sequence[str], labels: dict[str, int], source: str) -> list[int]:
    """The label of each answer id, in order: `InputFileError` when an id occurs twice among ``ids`` (one label
    would be applied to two answers) or has no label in ``labels`` (read from ``source``), naming the ids."""
    check_unique_ids(ids, "the traces")
    missing = [i for i in ids if i not in labels]
    if missing:
        raise InputFileError(f"{len(missing)} traces have no label in {source} (first: {missing[:3]})")
    return [labels[i] for i in ids]


# ------------------------------------------------------------------------------------------ answers files

ANSWER_FILE_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")
"""The formats of an answers file (``tracecal score-answers``), by suffix."""
PROMPT_KEYS = ("prompt", "messages", "question")
"""Where a row of an answers file holds its prompt: exactly one of them (docs/formats.md)."""
ANSWER_KEYS = ("answer", "answer_ids")
"""Where a row of an answers file holds the answer to score: exactly one of them."""


class AmbiguousRowError(InputFileError):
    """A row of an answers file that gives two prompts or two answers (``prompt`` and ``question``, …): the file
    is refused whatever ``on_error`` says (every row is likely so)."""


class AnswerRow(NamedTuple):
    """One good row of an answers file."""

    line: int
    """Where the row is: its 1-based line (CSV, JSONL; a JSON list: the line its item starts on), or its
    1-based position in a Parquet file."""
    id: str
    """``id``, else the line number."""
    prompt: Any
    """The prompt: text, a chat (a list of ``{"role", "content"}``), or for a ``question`` row the `Example`
    whose task prompt the model is given (`tracecal.tasks.prompts.render`, once the model says chat or not)."""
    answer: str | list[int]
    """The answer to score: text, or token ids of the model's vocabulary."""
    prompt_key: str = "prompt"
    """The key the prompt came from (one of `PROMPT_KEYS`)."""
    answer_key: str = "answer"
    """The key the answer came from (one of `ANSWER_KEYS`)."""
    id_key: str = ""
    """``"id"`` when the row gave its id, ``""`` when the id is the line number."""


def _given(rec: dict[str, Any], key: str) -> bool:
    """Whether ``key`` holds something (a CSV's empty cell or a Parquet null is nothing)."""
    value = rec.get(key)
    return value is not None and not (isinstance(value, str | list) and len(value) == 0)


def _json_cell(value: Any, key: str) -> Any:
    """A CSV cell holding JSON (a chat, token ids) parsed; other values as they are."""
    if isinstance(value, str) and value.strip()[:1] in ("[", "{"):
        try:
            return loads(value)
        except json.JSONDecodeError as e:
            raise InputFileError(f"{key!r} is not JSON ({e.msg})") from None
    return value


def _one_of(rec: dict[str, Any], keys: Sequence[str], what: str) -> str | None:
    """The one key of ``keys`` that ``rec`` fills (None if none); `AmbiguousRowError` if several."""
    given = [k for k in keys if _given(rec, k)]
    if len(given) > 1:
        listed = " and ".join(repr(k) for k in given)
        raise AmbiguousRowError(f"the row gives both {listed}: which is the {what}? keep one of them in each row")
    return given[0] if given else None


def _question_prompt(rec: dict[str, Any], line: int) -> Example:
    """A task file's question (``question``, optional ``context`` and ``choices``) as an `Example` to prompt with."""
    question = rec["question"]
    if not isinstance(question, str) or not question.strip():
        raise InputFileError("'question' must be non-empty text")
    context = rec.get("context") or ""
    if not isinstance(context, str):
        raise InputFileError("'context' must be text")
    try:
        choices = list_field(rec.get("choices"), "choices")
    except RowError as e:
        raise InputFileError(str(e)) from None
    for text, what in [(question, "'question'"), (context, "'context'"), *((c, "'choices'") for c in choices)]:
        check_text(text, what, InputFileError)
    return Example(str(line), "answers", question.strip(), [], context.strip(), choices)


def _row_prompt(rec: dict[str, Any], line: int) -> tuple[Any, str]:
    """(the prompt, its key) of one row; `InputFileError` saying what the row lacks."""
    from tracecal.backends.arguments import check_prompts

    key = _one_of(rec, PROMPT_KEYS, "prompt")
    if key is None:
        raise InputFileError(
            "no prompt: give 'prompt' (text), 'messages' (a list of {'role', 'content'}) or 'question' (as in a "
            "task file)"
        )
    if key == "question":
        return _question_prompt(rec, line), key
    prompt = _json_cell(rec[key], key) if key == "messages" else rec[key]
    if key == "prompt" and not isinstance(prompt, str):
        raise InputFileError(f"'prompt' must be text, got {type(prompt).__name__}")
    if isinstance(prompt, str):
        check_text(prompt, "'prompt'", InputFileError)
    try:
        check_prompts([prompt])
    except ValueError as e:
        raise InputFileError(str(e).removeprefix("prompt 0").lstrip(": ,") or "bad prompt") from None
    return prompt, key


def _row_answer(rec: dict[str, Any]) -> tuple[str | list[int], str]:
    """(the answer to score, its key) of one row: ``answer`` text (may be empty) or ``answer_ids``."""
    key = _one_of(rec, ANSWER_KEYS, "answer")
    if key == "answer_ids":
        ids = _json_cell(rec[key], key)
        if not isinstance(ids, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in ids):
            raise InputFileError(f"'answer_ids' must be a list of token ids (whole numbers), got {str(ids)[:60]!r}")
        if any(x < 0 for x in ids):
            raise InputFileError("'answer_ids' must be token ids ≥ 0")
        return ids, key
    answer = rec.get("answer")
    if answer is None and _given(rec, "answers"):
        raise InputFileError(
            "'answers' holds a task file's gold answers, not the answer to score: give 'answer' (text) or "
            "'answer_ids' (token ids)"
        )
    if not isinstance(answer, str):
        got = type(answer).__name__ if answer is not None else "none"
        raise InputFileError(f"'answer' must be text, got {got}")
    return check_text(answer, "'answer'", InputFileError), "answer"


def parse_answer_row(line: int, rec: Any) -> AnswerRow:
    """One row of an answers file → `AnswerRow`; `InputFileError` saying what the row lacks, `AmbiguousRowError`
    when it gives two prompts (``prompt``, ``messages``, ``question``) or two answers (``answer``, ``answer_ids``)."""
    if not isinstance(rec, dict):
        raise InputFileError("expected an object with 'prompt', 'messages' or 'question', and 'answer'")
    prompt, prompt_key = _row_prompt(rec, line)
    answer, answer_key = _row_answer(rec)
    given = _given(rec, "id")
    rid = check_text(str(rec["id"]), "'id'", InputFileError) if given else str(line)
    return AnswerRow(line, rid, prompt, answer, prompt_key, answer_key, "id" if given else "")


def _answer_records(path: Path) -> list[tuple[int, Any, str | None]]:
    """(line, record, read error) for each row of an answers file (a Parquet row's "line" is its 1-based
    position)."""
    suffix = path.suffix.lower()
    if suffix not in ANSWER_FILE_SUFFIXES:
        kind = suffix or "(no suffix)"
        raise InputFileError(f"{path}: unsupported answers file {kind}; use {', '.join(ANSWER_FILE_SUFFIXES)}")
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return [(i + 1, r, None) for i, r in enumerate(pq.read_table(path).to_pylist())]
    return [(r.line if r.line is not None else r.index + 1, r.record, r.error) for r in reader_for(path)(path)]


def read_answer_rows(path: Path, on_error: str = "skip") -> tuple[list[AnswerRow], list[str]]:
    """The good rows of an answers file (.jsonl, .json, .csv or .parquet; one row per answer: docs/formats.md) and
    one ``FILE:LINE: why`` per malformed row (``on_error="raise"``: `InputFileError` at the first one instead). A
    row giving two prompts or two answers refuses the file (`AmbiguousRowError`), as does a file with no good
    row."""
    good, bad = [], []
    for line, rec, error in _answer_records(_existing(path, "answers")):
        try:
            if error is not None:
                raise InputFileError(error)
            good.append(parse_answer_row(line, rec))
        except AmbiguousRowError as e:
            raise AmbiguousRowError(f"{path}:{line}: {e}") from None
        except InputFileError as e:
            if on_error == "raise":
                raise InputFileError(f"{path}:{line}: {e}") from None
            bad.append(f"{path}:{line}: {e}")
    if not good:
        if not bad:
            raise InputFileError(f"{path}: no answer to score: the file holds no rows (docs/formats.md)")
        raise InputFileError(f"{path}: no answer to score: {len(bad)} malformed rows (first: {bad[0]})")
    return good, bad
