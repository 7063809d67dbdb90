"""The eight built-in tasks, read from their original files under :func:`~tracecal.tasks.data_dir`.

Importing this module registers them in :data:`~tracecal.tasks.base.TASKS`.
"""

from __future__ import annotations

import re
from typing import Any

from tracecal.tasks.base import Task, register_task
from tracecal.tasks.example import Example, RowError
from tracecal.tasks.labellers import LABELLERS
from tracecal.tasks.labels import format_number, normalize_answer, parse_number
from tracecal.tasks.sources import FileSource

_LETTERS = "ABCDEFGHIJ"

#: Convention of the TruthfulQA reference implementations (original repo and lm-eval-harness): the
#: non-committal answer counts as a correct reference.
TRUTHFULQA_NO_COMMENT = "I have no comment."


# ------------------------------------------------------------------------------------------ helpers


def _obj(rec: Any) -> dict[str, Any]:
    if not isinstance(rec, dict):
        raise RowError(f"expected an object, got {type(rec).__name__}")
    return rec


def req_str(rec: Any, key: str) -> str:
    """``rec[key]`` as a non-empty stripped string, else :class:`RowError`."""
    rec = _obj(rec)
    if key not in rec or rec[key] is None:
        raise RowError(f"missing field {key!r}")
    value = rec[key]
    if not isinstance(value, str):
        raise RowError(f"field {key!r} must be a string, got {type(value).__name__}")
    value = value.strip()
    if not value:
        raise RowError(f"field {key!r} is empty")
    return value


def str_list(value: Any, key: str) -> list[str]:
    """A list of non-empty stripped strings (empty entries dropped), else :class:`RowError`."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RowError(f"field {key!r} must be a list of strings")
    return [v.strip() for v in value if v.strip()]


def dedupe(items: list[str]) -> list[str]:
    """Order-preserving de-duplication."""
    return list(dict.fromkeys(items))


def split_refs(text: str) -> list[str]:
    """``"a; b; c;"`` -> ``["a", "b", "c"]`` (TruthfulQA's ``;``-separated reference lists)."""
    return [s.strip() for s in text.split(";") if s.strip()]


def mc_golds(choices: list[str], gold_index: int) -> list[str]:
    """``[gold_letter, gold_text]`` for a multiple-choice item."""
    return [_LETTERS[gold_index], choices[gold_index]]


# ------------------------------------------------------------------------------------------ parsers

_TRIVIA_Q = re.compile(r"^\s*Question:\s*")
_TRIVIA_A = re.compile(r"\s*Answer:\s*$")


def parse_triviaqa(rec: Any, index: int, name: str) -> Example:
    """``{"context": "Question: ...\\nAnswer:", "answer", "aliases"}``; golds = answer + aliases."""
    question = _TRIVIA_A.sub("", _TRIVIA_Q.sub("", req_str(rec, "context"))).strip()
    if not question:
        raise RowError("field 'context' holds no question")
    answer = req_str(rec, "answer")
    aliases = str_list(rec.get("aliases", []), "aliases")
    golds = dedupe([answer, *aliases])
    if not any(normalize_answer(g) for g in golds):
        raise RowError("no alias is left after normalisation")
    return Example(id=f"{name}-{index}", task=name, question=question, golds=golds, meta={"answer": answer})


def _gold_number(value: Any, what: str) -> str:
    number = parse_number(value)
    if number is None:
        raise RowError(f"{what} {value!r} is not a number")
    return format_number(number)


def parse_svamp(rec: Any, index: int, name: str) -> Example:
    """``{ID, Body, Question, Equation, Answer, Type}``; question = Body + " " + Question."""
    rec = _obj(rec)
    question = f"{req_str(rec, 'Body')} {req_str(rec, 'Question')}"
    if "Answer" not in rec:
        raise RowError("missing field 'Answer'")
    gold = _gold_number(rec["Answer"], "gold 'Answer'")
    ex_id = str(rec.get("ID") or f"{name}-{index}")
    meta = {k: rec[k] for k in ("Equation", "Type") if k in rec}
    return Example(id=ex_id, task=name, question=question, golds=[gold], meta=meta)


def parse_gsm8k(rec: Any, index: int, name: str) -> Example:
    """``{"question", "answer"}``; the gold number follows the last ``#### `` (commas stripped)."""
    question = req_str(rec, "question")
    solution = req_str(rec, "answer")
    if "####" not in solution:
        raise RowError("field 'answer' has no '#### <number>' final answer")
    final = solution.rsplit("####", 1)[1].strip().replace(",", "")
    gold = _gold_number(final, "final answer")
    return Example(id=f"{name}-{index}", task=name, question=question, golds=[gold], meta={"solution": solution})


def parse_truthfulqa(rec: Any, index: int, name: str) -> Example:
    """CSV row: Question, Best Answer, Correct Answers, Incorrect Answers (``;``-separated).

    golds = Best Answer + Correct Answers + "I have no comment." (the reference implementations' rule);
    incorrect = Incorrect Answers.
    """
    question = req_str(rec, "Question")
    best = req_str(rec, "Best Answer")
    correct = split_refs(req_str(rec, "Correct Answers"))
    incorrect = split_refs(req_str(rec, "Incorrect Answers"))
    if not incorrect:
        raise RowError("no incorrect reference")
    golds = dedupe([best, *correct, TRUTHFULQA_NO_COMMENT])
    meta = {"best_answer": best, **{k.lower(): rec[k] for k in ("Type", "Category", "Source") if rec.get(k)}}
    return Example(id=f"{name}-{index}", task=name, question=question, golds=golds, incorrect=incorrect, meta=meta)


def parse_mlqa(rec: Any, index: int, name: str) -> Example:
    """SQuAD style ``{context, question, answers: {answer_start, text}, id}``; golds = answers.text."""
    rec = _obj(rec)
    answers = rec.get("answers")
    if not isinstance(answers, dict) or "text" not in answers:
        raise RowError("field 'answers' must be an object with a 'text' list")
    golds = dedupe(str_list(answers["text"], "answers.text"))
    if not golds:
        raise RowError("no gold answer span")
    ex_id = str(rec.get("id") or f"{name}-{index}")
    meta = {"answer_start": answers.get("answer_start"), "lang": "de"}
    return Example(
        id=ex_id,
        task=name,
        question=req_str(rec, "question"),
        golds=golds,
        context=req_str(rec, "context"),
        meta=meta,
    )


def parse_commonsenseqa(rec: Any, index: int, name: str) -> Example:
    """``{answerKey, id, question: {stem, choices: [{label, text}]}}``."""
    rec = _obj(rec)
    q = _obj(rec.get("question"))
    stem = req_str(q, "stem")
    raw = q.get("choices")
    if not isinstance(raw, list) or len(raw) < 2:
        raise RowError("field 'question.choices' must list at least two options")
    pairs = sorted((req_str(c, "label").upper(), req_str(c, "text")) for c in raw)
    labels = [lab for lab, _ in pairs]
    if labels != list(_LETTERS[: len(labels)]):
        raise RowError(f"choice labels {labels} are not A, B, C, ...")
    choices = [text for _, text in pairs]
    key = req_str(rec, "answerKey").upper()
    if key not in labels:
        raise RowError(f"answerKey {key!r} is not one of the choice labels {labels}")
    meta = {"question_concept": q.get("question_concept")}
    return Example(
        id=str(rec.get("id") or f"{name}-{index}"),
        task=name,
        question=stem,
        golds=mc_golds(choices, labels.index(key)),
        choices=choices,
        meta=meta,
    )


def parse_arc(rec: Any, index: int, name: str) -> Example:
    """llm-foundry ARC: ``{"query": "Question: ...", "choices": [str], "gold": int}``."""
    rec = _obj(rec)
    question = re.sub(r"^\s*Question:\s*", "", req_str(rec, "query")).strip()
    if not question:
        raise RowError("field 'query' holds no question")
    choices = str_list(rec.get("choices"), "choices")
    if len(choices) != len(rec["choices"]) or len(choices) < 2:
        raise RowError("field 'choices' must list at least two non-empty options")
    gold = rec.get("gold")
    if isinstance(gold, bool) or not isinstance(gold, int) or not 0 <= gold < len(choices):
        raise RowError(f"field 'gold' must be an option index 0..{len(choices) - 1}, got {gold!r}")
    return Example(
        id=f"{name}-{index}",
        task=name,
        question=question,
        golds=mc_golds(choices, gold),
        choices=choices,
        meta={"gold_index": gold},
    )


# ---------------------------------------------------------------------------------------- registry

BUILTIN_TASKS: tuple[Task, ...] = (
    Task(
        "triviaqa",
        "qa",
        LABELLERS["alias"],
        FileSource("triviaqa/triviaqa_sm_sub.jsonl"),
        parse_triviaqa,
        description="TriviaQA rc.nocontext validation, random 3000 (llm-foundry subset)",
    ),
    Task(
        "svamp",
        "math",
        LABELLERS["numeric"],
        FileSource("svamp/SVAMP.json"),
        parse_svamp,
        description="SVAMP, 1000 arithmetic word problems",
    ),
    Task(
        "gsm8k",
        "math",
        LABELLERS["numeric"],
        FileSource("gsm8k/test.jsonl"),
        parse_gsm8k,
        description="GSM8K test, 1319 grade-school math problems",
    ),
    Task(
        "truthfulqa",
        "truthful",
        LABELLERS["truthful"],
        FileSource("truthfulqa/TruthfulQA.csv"),
        parse_truthfulqa,
        description="TruthfulQA generation (original 817 questions)",
    ),
    Task(
        "mlqa",
        "extractive",
        LABELLERS["f1_de"],
        FileSource("mlqa/mlqa.de.de.validation.jsonl"),
        parse_mlqa,
        language="de",
        description="MLQA German context / German question, dev (512)",
    ),
    Task(
        "arc_easy",
        "mc",
        LABELLERS["mc"],
        FileSource("arc/arc_easy.jsonl"),
        parse_arc,
        description="ARC-Easy test, 4 options",
    ),
    Task(
        "arc_challenge",
        "mc",
        LABELLERS["mc"],
        FileSource("arc/arc_challenge.jsonl"),
        parse_arc,
        description="ARC-Challenge test, 4 options",
    ),
    Task(
        "commonsenseqa",
        "mc",
        LABELLERS["mc"],
        FileSource("commonsenseqa/dev_rand_split.jsonl"),
        parse_commonsenseqa,
        description="CommonsenseQA dev, 5 options",
    ),
)

for _task in BUILTIN_TASKS:
    register_task(_task, overwrite=True)
