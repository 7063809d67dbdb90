"""The registry of correctness labellers: each rule of `tracecal.tasks.labels` / `tracecal.tasks.choices` as a
named :class:`Labeller` (name + the sentence a report prints + ``(example, answer) -> 0 | 1``).

>>> from tracecal.tasks.labellers import get_labeller
>>> sorted(LABELLERS)
['alias', 'f1', 'f1_de', 'mc', 'numeric', 'truthful']
>>> get_labeller("numeric").name
'numeric'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from tracecal.errors import ValidationError
from tracecal.tasks.choices import mc_match
from tracecal.tasks.example import Example
from tracecal.tasks.labels import (
    alias_match,
    extract_last_number,
    f1_match,
    format_number,
    numeric_match,
    parse_number,
    truthful_match,
)

__all__ = [
    "LABELLERS",
    "Labeller",
    "UnknownLabellerError",
    "f1_labeller",
    "get_labeller",
    "text_as_gold",
    "number_as_gold",
    "option_as_gold",
]

AsGold = Callable[[Example, str], Example | None]


def text_as_gold(example: Example, answer: str) -> Example | None:
    """``example`` with ``answer`` (stripped) as its only gold; None for an empty answer (alias, F1, TruthfulQA's
    ROUGE-L with the incorrect references kept, and any labeller that reads ``golds`` as texts)."""
    return replace(example, golds=[answer.strip()]) if answer.strip() else None


def number_as_gold(example: Example, answer: str) -> Example | None:
    """``example`` with the last number of ``answer`` as its gold (what the numeric rule compares); None when the
    answer has no number."""
    x = extract_last_number(answer)
    gold = None if x is None else format_number(x)
    return None if gold is None or parse_number(gold) is None else replace(example, golds=[gold])


def option_as_gold(example: Example, answer: str) -> Example | None:
    """``example`` with the option ``answer`` chooses as its gold ``[letter, option text]``: the first option the
    multiple-choice rule marks ``answer`` correct against; None when it marks none."""
    for i, text in enumerate(example.choices):
        letter = "ABCDEFGHIJ"[i]
        if mc_match(answer, letter, text, example.choices):
            return replace(example, golds=[letter, text])
    return None


class UnknownLabellerError(ValidationError):
    """A labeller name that is not in :data:`LABELLERS`."""


@dataclass(frozen=True)
class Labeller:
    """A named correctness rule: ``labeller(example, answer_text) -> 0 | 1``.

    ``rule`` is the human sentence a report prints; ``fn`` reads the references it needs from the
    :class:`~tracecal.tasks.example.Example` (``golds``, ``choices``, ``incorrect``). ``as_gold`` puts another
    answer in the gold's place, as the rule reads golds (`agrees`): the text itself (`text_as_gold`), its last
    number (`number_as_gold`), the option it chooses (`option_as_gold`).
    """

    name: str
    rule: str
    fn: Callable[[Example, str], int]
    as_gold: AsGold = text_as_gold

    def __call__(self, example: Example, answer: str | None) -> int:
        return int(self.fn(example, answer or ""))

    def agrees(self, example: Example, reference: str | None, answer: str | None) -> int:
        """1 iff ``answer`` is correct under this rule when ``reference`` (another answer to the same question)
        stands in the gold's place (`as_gold`); 0 when ``reference`` states nothing the rule can match (empty; no
        number; no option). Not symmetric in general (alias: the reference must occur in the answer).

        >>> ex = Example(id="1", task="t", question="Capital of France?", golds=["Paris"])
        >>> alias = LABELLERS["alias"]
        >>> alias.agrees(ex, "Paris", "It is Paris, France."), alias.agrees(ex, "Lyon", "Paris")
        (1, 0)
        """
        ex = self.as_gold(example, reference or "")
        return 0 if ex is None else self(ex, answer)


def f1_labeller(lang: str = "en", threshold: float = 0.5) -> Labeller:
    """An F1 :class:`Labeller` for a language (``"en"`` or ``"de"``) and threshold."""
    extra = (
        "German articles der/die/das/den/dem/des/ein/eine/einen/einem/eines/einer removed, umlauts kept"
        if lang == "de"
        else "articles a/an/the removed"
    )
    return Labeller(
        name="f1" if (lang, threshold) == ("en", 0.5) else f"f1_{lang}",
        rule=(
            f"correct iff SQuAD token F1 >= {threshold:g} against some gold span (lower-case, punctuation "
            f"removed, {extra}; as in the official MLQA evaluation); empty answers are wrong"
        ),
        fn=lambda ex, a: f1_match(a, ex.golds, threshold=threshold, lang=lang),
    )


LABELLERS: dict[str, Labeller] = {
    "alias": Labeller(
        "alias",
        "correct iff some gold alias occurs in the answer as whole words after SQuAD-style "
        "normalisation (lower-case, punctuation and articles a/an/the removed, whitespace collapsed); "
        "empty answers are wrong",
        lambda ex, a: alias_match(a, ex.golds),
    ),
    "numeric": Labeller(
        "numeric",
        "correct iff the last number in the answer (commas, '$', decimals and simple fractions understood) "
        "equals the gold value within 1e-6; no number means wrong",
        lambda ex, a: numeric_match(a, ex.golds[0]),
        number_as_gold,
    ),
    "f1": f1_labeller("en"),
    "f1_de": f1_labeller("de"),
    "mc": Labeller(
        "mc",
        "correct iff the chosen option letter ('The answer is C', a leading 'B.' or '(B)') equals the gold "
        "letter; with no such letter, iff the answer names the gold option's text and no other option's; "
        "else iff its first standalone capital letter is the gold letter",
        lambda ex, a: mc_match(a, ex.golds[0], ex.golds[1] if len(ex.golds) > 1 else "", ex.choices),
        option_as_gold,
    ),
    "truthful": Labeller(
        "truthful",
        "correct iff the answer is non-empty and its ROUGE-L F to the closest correct reference exceeds "
        "its ROUGE-L F to the closest incorrect reference",
        lambda ex, a: truthful_match(a, ex.golds, ex.incorrect),
    ),
}


def get_labeller(name: str | Labeller) -> Labeller:
    """Look a labeller up by name (``alias``, ``numeric``, ``f1``, ``f1_de``, ``mc``, ``truthful``)."""
    if isinstance(name, Labeller):
        return name
    try:
        return LABELLERS[name]
    except (KeyError, TypeError):  # TypeError: an unhashable value, e.g. a list
        raise UnknownLabellerError(f"unknown labeller {name!r}; known: {', '.join(sorted(LABELLERS))}") from None
