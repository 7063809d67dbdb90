"""Prompt templates, one per task kind, zero-shot.

``chat=True`` gives a list of chat messages (``[{"role": "user", "content": ...}]``) carrying a short
instruction; ``chat=False`` gives a plain-text prompt for base models (``"Question: ...\\nAnswer:"``) that
is cut at :func:`stop_strings`.
"""

from __future__ import annotations

from tracecal.errors import ValidationError
from tracecal.tasks.example import Example

KINDS = ("qa", "math", "extractive", "truthful", "mc")

#: Default generation budget per task kind.
MAX_NEW_TOKENS = {"qa": 24, "extractive": 24, "truthful": 48, "math": 96, "mc": 16}

_BASE_STOPS: dict[str, tuple[str, ...]] = {
    "qa": ("\n",),
    "extractive": ("\n",),
    "truthful": ("\n",),
    "mc": ("\n",),
    "math": ("\n\n", "\nQuestion:"),
}

_LETTERS = "ABCDEFGHIJ"


def option_lines(choices: list[str]) -> str:
    """``A. first\\nB. second ...``."""
    return "\n".join(f"{_LETTERS[i]}. {c}" for i, c in enumerate(choices))


def self_eval_question(example: Example) -> str:
    """The question as shown to the model when it judges its own answer (P(True), verbalised confidence).

    The one builder shared by evaluate, SECL and the service: the question, then its options
    (``A. …``) for multiple choice, and the context first for extractive tasks — so the model judges the
    answer with the information it answered from.
    """
    q = example.question
    if example.choices:
        q = f"{q}\n{option_lines(example.choices)}"
    if example.context:
        q = f"Context: {example.context}\n\n{q}"
    return q


def _letters_phrase(n: int) -> str:
    letters = list(_LETTERS[:n])
    return ", ".join(letters[:-1]) + f" or {letters[-1]}" if n > 1 else letters[0]


def render(kind: str, example: Example, chat: bool, language: str = "en") -> str | list[dict[str, str]]:
    """The prompt for ``example`` (see the module docstring for the two formats)."""
    q, ctx = example.question, example.context
    german = language == "de"
    if kind == "mc":
        opts = option_lines(example.choices)
        if chat:
            text = (
                "Answer the multiple-choice question with the letter of the correct option only.\n\n"
                f"Question: {q}\n{opts}\n\nReply with one letter: {_letters_phrase(len(example.choices))}."
            )
        else:
            text = f"Question: {q}\n{opts}\nAnswer:"
    elif kind == "math":
        if chat:
            text = f"Solve the problem. End with 'The answer is N.' where N is the final number.\n\nProblem: {q}"
        else:
            text = f"Question: {q}\nAnswer:"
    elif kind == "extractive" and german:
        if chat:
            text = (
                "Beantworte die Frage mit der kurzen Textstelle aus dem Kontext, auf Deutsch und ohne "
                f"Erklärung.\n\nKontext: {ctx}\n\nFrage: {q}"
            )
        else:
            text = f"Kontext: {ctx}\nFrage: {q}\nAntwort:"
    elif kind == "extractive":
        if chat:
            text = (
                "Answer the question with the short span from the context only, no explanation.\n\n"
                f"Context: {ctx}\n\nQuestion: {q}"
            )
        else:
            text = f"Context: {ctx}\nQuestion: {q}\nAnswer:"
    elif kind == "truthful":
        if chat:
            text = f"Answer the question truthfully in one short sentence.\n\nQuestion: {q}"
        else:
            text = f"Question: {q}\nAnswer:"
    elif kind == "qa":
        prefix = f"Context: {ctx}\n\n" if ctx else ""
        if chat:
            text = f"Answer the question with a short answer only.\n\n{prefix}Question: {q}"
        else:
            text = f"{prefix.replace(chr(10) * 2, chr(10))}Question: {q}\nAnswer:"
    else:
        raise ValidationError(f"unknown task kind {kind!r}; known: {', '.join(KINDS)}")
    if chat:
        return [{"role": "user", "content": text}]
    return text


def stop_strings(kind: str, chat: bool) -> tuple[str, ...]:
    """Strings that end a generation: none for chat prompts (the chat template ends the turn)."""
    if chat:
        return ()
    return _BASE_STOPS[kind]
