"""Tasks from a user's own JSONL / JSON / CSV file, or from a Hugging Face hub dataset (optional).

The file schema is documented in :mod:`tracecal.tasks`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracecal._inputs import loads, user_path
from tracecal._validation import Interval, check_param
from tracecal.errors import TracecalError, ValidationError
from tracecal.tasks.base import Task, check_task_name, register_task
from tracecal.tasks.builtin import dedupe, mc_golds
from tracecal.tasks.example import Example, RawRow, RowError
from tracecal.tasks.labellers import LABELLERS, Labeller, f1_labeller, get_labeller
from tracecal.tasks.labels import format_number, normalize_answer, parse_number
from tracecal.tasks.sources import FileSource, reader_for

__all__ = [
    "HubUnavailableError",
    "KIND_LABELLER",
    "USER_TASK_PREFIX",
    "file_task_name",
    "list_field",
    "load_user_file",
    "parse_user_row",
    "task_from_file",
    "task_from_hub",
]

#: Prefix of the default name of a task read from a user file (``data/my.jsonl`` -> ``file-my``): a user file
#: never shares a name - and so a run-directory folder - with a built-in task (``triviaqa.jsonl`` ->
#: ``file-triviaqa``, not ``triviaqa``).
USER_TASK_PREFIX = "file-"

#: Task kind -> default labeller name. Labeller names are accepted as kinds too (see ``_KIND_ALIASES``).
KIND_LABELLER = {"qa": "alias", "math": "numeric", "extractive": "f1", "mc": "mc", "truthful": "truthful"}
_KIND_ALIASES = {
    "qa": "qa",
    "alias": "qa",
    "short": "qa",
    "math": "math",
    "numeric": "math",
    "extractive": "extractive",
    "f1": "extractive",
    "f1_de": "extractive",
    "span": "extractive",
    "mc": "mc",
    "multiple_choice": "mc",
    "truthful": "truthful",
    "truthfulqa": "truthful",
}
_KNOWN_FIELDS = ("id", "question", "answer", "answers", "context", "choices", "incorrect_answers")
_LETTERS = "ABCDEFGHIJ"


class HubUnavailableError(TracecalError, RuntimeError):
    """The hub dataset could not be loaded (``datasets`` missing, offline, or a wrong name/split)."""


def _kind(kind: str) -> str:
    try:
        return _KIND_ALIASES[kind.strip().lower()]
    except (KeyError, AttributeError):
        raise ValidationError(f"unknown kind {kind!r}; use one of {', '.join(sorted(_KIND_ALIASES))}") from None


def list_field(value: Any, key: str) -> list[str]:
    """A list, a JSON-array string, or a ``;``-separated string -> list of non-empty strings."""
    if value is None or value == "":
        return []
    if isinstance(value, str):
        s = value.strip()
        if s.startswith("["):
            try:
                value = loads(s)
            except json.JSONDecodeError:
                value = None
        if not isinstance(value, list):
            return [p.strip() for p in s.split(";") if p.strip()]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return [format_number(float(value))]
    if not isinstance(value, list):
        raise RowError(f"field {key!r} must be a list or a ';'-separated string")
    out = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, str | int | float):
            raise RowError(f"field {key!r} must hold strings")
        v = v.strip() if isinstance(v, str) else format_number(float(v))
        if v:
            out.append(v)
    return out


def _answer_field(answer: Any, kind: str) -> list[Any]:
    """The ``answer`` field: a string, a number (for ``mc`` an int is a 0-based option index), or a list of
    gold aliases (``["Paris", "Paris, France"]``, as in most open-domain QA files)."""
    if isinstance(answer, bool):
        raise RowError("field 'answer' must be a string, a number or a list of strings")
    if isinstance(answer, int) and kind == "mc":
        return [answer]  # a 0-based option index, resolved by _choice_index
    if isinstance(answer, int | float):
        return [format_number(float(answer))]
    if isinstance(answer, str):
        return [answer.strip()] if answer.strip() else []
    if isinstance(answer, list):
        return list_field(answer, "answer")
    if answer is None:
        return []
    raise RowError(f"field 'answer' must be a string, a number or a list of strings, not {type(answer).__name__}")


def parse_user_row(rec: Any, index: int, name: str, kind: str) -> Example:
    """Turn one user row (dict) into an :class:`Example` for ``kind`` (see the package docstring)."""
    if not isinstance(rec, dict):
        raise RowError(f"expected an object, got {type(rec).__name__}")
    question = rec.get("question")
    if not isinstance(question, str) or not question.strip():
        raise RowError("missing or empty field 'question'")
    question = question.strip()
    answers = _answer_field(rec.get("answer"), kind) + list_field(rec.get("answers"), "answers")
    if not answers:
        raise RowError("missing field 'answer' (or 'answers')")
    context = rec.get("context") or ""
    if not isinstance(context, str):
        raise RowError("field 'context' must be a string")
    choices = list_field(rec.get("choices"), "choices")
    incorrect = list_field(rec.get("incorrect_answers"), "incorrect_answers")
    ex_id = rec.get("id")
    ex_id = f"{name}-{index}" if ex_id in (None, "") else str(ex_id)
    meta = {k: v for k, v in rec.items() if k not in _KNOWN_FIELDS and v not in (None, "")}

    if kind == "math":
        value = parse_number(answers[0] if isinstance(answers[0], str) else str(answers[0]))
        if value is None:
            raise RowError(f"gold answer {answers[0]!r} is not a number")
        golds = [format_number(value)]
    elif kind == "mc":
        if len(choices) < 2:
            raise RowError("multiple-choice rows need 'choices' with at least two options")
        if len(choices) > len(_LETTERS):
            raise RowError(f"at most {len(_LETTERS)} choices are supported")
        golds = mc_golds(choices, _choice_index(answers[0], choices))
    elif kind == "truthful":
        if not incorrect:
            raise RowError("truthful rows need 'incorrect_answers'")
        golds = dedupe([str(a) for a in answers])
    else:
        golds = dedupe([str(a) for a in answers])
        if kind == "qa" and not any(normalize_answer(g) for g in golds):
            raise RowError("no gold answer is left after normalisation")
    return Example(
        id=ex_id,
        task=name,
        question=question,
        golds=golds,
        context=context.strip(),
        choices=choices,
        incorrect=incorrect,
        meta=meta,
    )


def _choice_index(answer: Any, choices: list[str]) -> int:
    """Gold option from a letter (``"B"``, ``"(b)"``), an int (0-based index) or the option's text."""
    if isinstance(answer, int):
        if 0 <= answer < len(choices):
            return answer
        raise RowError(f"answer index {answer} is not in 0..{len(choices) - 1}")
    s = str(answer).strip().strip("().").strip()
    if len(s) == 1 and s.upper() in _LETTERS[: len(choices)]:
        return _LETTERS.index(s.upper())
    norm = normalize_answer(s)
    hits = [i for i, c in enumerate(choices) if normalize_answer(c) == norm]
    if len(hits) == 1:
        return hits[0]
    raise RowError(f"answer {answer!r} is neither an option letter nor exactly one option's text")


def _resolve(labeller: str | Labeller, kind: str | None, language: str) -> tuple[str, Labeller]:
    """(kind, Labeller) from a labeller name or kind name, or a custom Labeller plus an explicit kind."""
    if isinstance(labeller, Labeller):
        if kind is None:
            raise ValidationError("pass kind=... together with a custom Labeller")
        return _kind(kind), labeller
    k = _kind(labeller)
    lab_name = labeller.strip().lower()
    if lab_name not in LABELLERS:
        lab_name = KIND_LABELLER[k]
    lab = f1_labeller(language) if lab_name == "f1" else get_labeller(lab_name)
    return (_kind(kind) if kind else k), lab


def file_task_name(path: str | Path) -> str:
    """The default task name of a user file: :data:`USER_TASK_PREFIX` + the file's stem, with every character
    other than a letter, digit, ``.``, ``_`` or ``-`` replaced by ``_`` (``data/my qa.jsonl`` ->
    ``file-my_qa``). Two files with the same stem get the same name: :func:`~tracecal.tasks.get_tasks`
    refuses to use both at once."""
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", Path(path).stem)[:90] or "_"
    return USER_TASK_PREFIX + stem


def _user_parser(kind: str) -> Callable[[Any, int, str], Example]:
    def parse(rec: Any, index: int, name: str) -> Example:
        return parse_user_row(rec, index, name, kind)

    return parse


def task_from_file(
    path: str | Path,
    labeller: str | Labeller = "alias",
    *,
    kind: str | None = None,
    name: str | None = None,
    language: str = "en",
    max_new_tokens: int | None = None,
    register: bool = False,
) -> Task:
    """A :class:`Task` reading a user JSONL / JSON-list / CSV file (schema: the package docstring).

    ``labeller``: ``alias`` (short QA), ``numeric`` (math), ``f1`` (extractive spans), ``mc``,
    ``truthful`` - or a :class:`Labeller` together with ``kind``. ``kind`` (prompt template and row
    validation) defaults to the labeller's. ``name`` defaults to :func:`file_task_name` (``file-<stem>``) and
    must be safe as a folder name; the task's ``ref`` is the file's absolute path. ``register=True`` adds
    the task to ``TASKS``. ``max_new_tokens``: the answer budget, a whole number ≥ 1 (None: the kind's default;
    0 is refused, never read as "the default"). The file's format is checked here (by suffix), its rows at
    :meth:`Task.load`.
    """
    if max_new_tokens is not None:
        check_param("max_new_tokens", max_new_tokens, Interval(int, 1, None))
    p = user_path(path)
    reader_for(p)  # an unsupported suffix fails now, with the list of supported ones
    kind, lab = _resolve(labeller, kind, language)
    task = Task(
        name=check_task_name(name) if name is not None else file_task_name(p),
        kind=kind,
        labeller=lab,
        source=FileSource(str(p), relative=False),
        parser=_user_parser(kind),
        max_new_tokens=0 if max_new_tokens is None else max_new_tokens,  # 0: Task uses the kind's default
        language=language,
        description=f"user file {p}",
        ref=str(p.resolve()),
    )
    return register_task(task, overwrite=True) if register else task


def load_user_file(
    path: str | Path,
    kind: str = "qa",
    on_error: str = "skip",
    limit: int | None = None,
    seed: int | None = None,
    language: str = "en",
) -> list[Example]:
    """Load a user JSONL / JSON-list / CSV file as :class:`Example` rows validated for ``kind``
    (``qa``, ``math``, ``extractive``, ``mc``, ``truthful``; the labeller names are accepted too)."""
    return task_from_file(path, kind, language=language).load(limit=limit, on_error=on_error, seed=seed)


# --------------------------------------------------------------------------------------------- hub


def _import_datasets() -> Any:
    try:
        import datasets
    except ImportError as e:
        raise HubUnavailableError(
            "loading a task from the Hugging Face hub needs the optional 'datasets' package: "
            "pip install 'tracecal[hub]' (or use a local JSONL/CSV file with task_from_file)"
        ) from e
    return datasets


def _hub_answers(value: Any) -> Any:
    """Common hub answer layouts: str/number, list, ``{"text": [...]}``, ``{"aliases", "value"}``."""
    if isinstance(value, dict):
        out: list[Any] = []
        for key in ("value", "text", "aliases", "normalized_aliases"):
            v = value.get(key)
            out += v if isinstance(v, list) else ([v] if v not in (None, "") else [])
        return out
    return value


@dataclass(frozen=True)
class HubSource:
    """Rows of a hub dataset split, renamed to the user-file schema."""

    dataset: str
    split: str
    question_field: str
    answer_field: str
    config: str | None = None
    context_field: str | None = None
    choices_field: str | None = None
    incorrect_field: str | None = None

    def describe(self) -> str:
        cfg = f"/{self.config}" if self.config else ""
        return f"hf:{self.dataset}{cfg}[{self.split}]"

    def rows(self, data_dir_override: Any = None) -> tuple[str, Iterator[RawRow]]:
        datasets = _import_datasets()
        try:
            ds = datasets.load_dataset(self.dataset, self.config, split=self.split)
        except Exception as e:  # noqa: BLE001 - any failure here means "cannot use the hub"
            raise HubUnavailableError(
                f"could not load {self.describe()} from the Hugging Face hub (offline? wrong name or split?): {e}"
            ) from e
        label = self.describe()

        def gen() -> Iterator[RawRow]:
            for i, rec in enumerate(ds):
                answer = _hub_answers(rec.get(self.answer_field))
                row = {
                    "question": rec.get(self.question_field),
                    "answers" if isinstance(answer, list) else "answer": answer,
                    "id": rec.get("id"),
                }
                for key, fld in (
                    ("context", self.context_field),
                    ("choices", self.choices_field),
                    ("incorrect_answers", self.incorrect_field),
                ):
                    if fld:
                        row[key] = rec.get(fld)
                yield RawRow(label, f"row {i}", None, i, row)

        return label, gen()


def _hub_task_name(dataset_name: str) -> str:
    return "hub-" + (re.sub(r"[^A-Za-z0-9._-]", "_", dataset_name.rsplit("/", 1)[-1])[:90] or "_")


def task_from_hub(
    dataset_name: str,
    split: str = "validation",
    question_field: str = "question",
    answer_field: str = "answer",
    labeller: str = "alias",
    *,
    config: str | None = None,
    context_field: str | None = None,
    choices_field: str | None = None,
    incorrect_field: str | None = None,
    name: str | None = None,
    language: str = "en",
) -> Task:
    """A :class:`Task` over a Hugging Face hub dataset split (needs ``pip install 'tracecal[hub]'`` and
    network or a warm ``datasets`` cache). ``datasets`` is imported here, lazily; a missing package or a
    failed download raises :class:`HubUnavailableError`. Rows are mapped to the user-file schema and
    validated like a user file of the labeller's kind. ``name`` defaults to ``hub-<dataset>`` (the part
    after the last ``/``, characters unsafe in a folder name replaced by ``_``), so that a hub copy of a
    built-in dataset never shares the built-in task's name."""
    _import_datasets()
    k, lab = _resolve(labeller, None, language)
    src = HubSource(
        dataset_name,
        split,
        question_field,
        answer_field,
        config,
        context_field,
        choices_field,
        incorrect_field,
    )
    return Task(
        name=check_task_name(name) if name is not None else _hub_task_name(dataset_name),
        kind=k,
        labeller=lab,
        source=src,
        parser=_user_parser(k),
        language=language,
        description=f"hub dataset {src.describe()}",
    )
