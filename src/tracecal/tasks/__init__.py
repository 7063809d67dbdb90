"""Evaluation tasks: loaders (original file formats), prompt templates and correctness labellers.

Built-in tasks (``TASKS`` / ``get_task(name)``), read from :func:`data_dir` (``shared/data``, see its
MANIFEST.md)::

    triviaqa  svamp  gsm8k  truthfulqa  mlqa  arc_easy  arc_challenge  commonsenseqa

Typical use by the evaluation harness::

    task = get_task("triviaqa")                       # or a user file: get_task("data/my.jsonl")
    tasks = get_tasks(["triviaqa", "data/my.jsonl"])  # refuses two different tasks with one name
    examples = task.load(limit=200, data_dir=None, on_error="skip", seed=None)
    prompt = task.prompt(example, chat=True)          # [{"role": "user", "content": ...}] or a str
    stops, budget = task.stop_strings(chat=True), task.max_new_tokens
    z = task.label(example, answer_text)              # 0 / 1
    task.label_rule                                   # the rule in words, for reports

Task names (:func:`get_task`, rules in :mod:`tracecal.tasks.resolve`): a built-in name is the built-in
task; a path (ending in ``.jsonl``/``.json``/``.csv``, containing ``/``, or an existing file) is a user
file, named ``file-<stem>`` (``data/my.jsonl`` -> ``file-my``; ``triviaqa.jsonl`` -> ``file-triviaqa``,
never the built-in). ``task.name`` is safe as a folder name; ``task.ref`` resolves to the task again.

Data folder (:func:`data_dir`): the explicit argument, else ``$TRACECAL_DATA``, else the first existing
of :func:`data_dir_candidates` (``<cwd>/../shared/data``, ``<repo>/../shared/data``); nothing else.

User files (``get_task(path)``, ``load_user_file(path, kind=...)`` or ``task_from_file(path, labeller=...)``)
-------------------------------------------------------------------------------------------------------------
Formats, by suffix: ``.jsonl`` (one JSON object per line), ``.json`` (one JSON list of objects), ``.csv``
(UTF-8, a header row). Fields:

``question`` (required, non-empty string)
``answer`` (string, number, or a list of gold aliases) and/or ``answers`` (a list of strings; in CSV, or
    as a JSON string: a ``;``-separated string or a JSON array) - at least one answer is required. For
    ``math`` the first answer must be a number (``"3,000"``, ``"2.5"``, ``"$5"``, ``"1/2"``). For ``mc`` it is the gold
    option: a letter (``"B"``), its text, or in JSON an integer 0-based index.
``id`` (optional; default ``<task name>-<row index>``, e.g. ``file-my-0``; must be unique)
``context`` (optional passage shown in the prompt; used by ``extractive``)
``choices`` (``mc`` only, required: a list, or ``;``-separated / JSON array in CSV; lettered A, B, ...)
``incorrect_answers`` (``truthful`` only, required: list, or ``;``-separated)
Any other field is kept in ``Example.meta``.

Kinds and their labellers: ``qa`` -> ``alias``, ``math`` -> ``numeric``, ``extractive`` -> ``f1``,
``mc`` -> ``mc``, ``truthful`` -> ``truthful`` (the labeller names are accepted as kinds too).

Malformed rows (invalid JSON, missing/empty fields, a non-numeric math gold, ...): ``on_error="skip"``
warns (:class:`MalformedRowWarning`, text ``"<file>, line N: <reason> (row skipped)"``; for a JSON list
``"list index I (line N)"``) and skips the row; ``on_error="raise"`` raises :class:`MalformedRowError`
(a ``ValueError``) with the same text. A file with no usable row raises :class:`EmptyTaskFileError`.

Hub datasets: ``task_from_hub(name, split, question_field, answer_field, labeller)`` needs the optional
``datasets`` package (``pip install 'tracecal[hub]'``) and network; otherwise :class:`HubUnavailableError`.
"""

from tracecal.tasks.base import TASKS, Task, check_task_name, register_task
from tracecal.tasks.builtin import BUILTIN_TASKS, TRUTHFULQA_NO_COMMENT
from tracecal.tasks.choices import extract_choice_letter, mc_match
from tracecal.tasks.example import (
    AmbiguousTaskError,
    EmptyTaskFileError,
    Example,
    MalformedRowError,
    MalformedRowWarning,
    TaskDataError,
    TaskFileNotFoundError,
    TaskNameCollisionError,
    UnknownTaskError,
)
from tracecal.tasks.labellers import LABELLERS, Labeller, UnknownLabellerError, get_labeller
from tracecal.tasks.labels import (
    alias_match,
    extract_last_number,
    f1_match,
    normalize_answer,
    numeric_match,
    token_f1,
    truthful_match,
)
from tracecal.tasks.resolve import get_task, get_tasks
from tracecal.tasks.sources import DATA_ENV_VAR, data_dir, data_dir_candidates
from tracecal.tasks.user import HubUnavailableError, file_task_name, load_user_file, task_from_file, task_from_hub

TASK_NAMES: tuple[str, ...] = tuple(t.name for t in BUILTIN_TASKS)

__all__ = [
    "AmbiguousTaskError",
    "DATA_ENV_VAR",
    "LABELLERS",
    "TASKS",
    "TASK_NAMES",
    "TRUTHFULQA_NO_COMMENT",
    "EmptyTaskFileError",
    "Example",
    "HubUnavailableError",
    "Labeller",
    "MalformedRowError",
    "MalformedRowWarning",
    "Task",
    "TaskDataError",
    "TaskFileNotFoundError",
    "TaskNameCollisionError",
    "UnknownLabellerError",
    "UnknownTaskError",
    "alias_match",
    "check_task_name",
    "data_dir",
    "data_dir_candidates",
    "extract_choice_letter",
    "extract_last_number",
    "f1_match",
    "file_task_name",
    "get_labeller",
    "get_task",
    "get_tasks",
    "load_user_file",
    "mc_match",
    "normalize_answer",
    "numeric_match",
    "register_task",
    "task_from_file",
    "task_from_hub",
    "token_f1",
    "truthful_match",
]
