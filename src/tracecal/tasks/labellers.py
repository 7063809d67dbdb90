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
from dataclasses import dataclass

from tracecal.errors import ValidationError
from tracecal.tasks.choices import mc_match
from tracecal.tasks.example import Example
from tracecal.tasks.labels import alias_match, f1_match, numeric_match, truthful_match

__all__ = ["LABELLERS", "Labeller", "UnknownLabellerError", "f1_labeller", "get_labeller"]


class UnknownLabellerError(ValidationError):
    """A labeller name that is not in :data:`LABELLERS`."""


@dataclass(frozen=True)
class Labeller:
    """A named correctness rule: ``labeller(example, answer_text) -> 0 | 1``.

    ``rule`` is the human sentence a report prints; ``fn`` reads the references it needs from the
    :class:`~tracecal.tasks.example.Example` (``golds``, ``choices``, ``incorrect``).
    """

    name: str
    rule: str
    fn: Callable[[Example, str], int]

    def __call__(self, example: Example, answer: str | None) -> int:
        return int(self.fn(example, answer or ""))


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
    ),
    "f1": f1_labeller("en"),
    "f1_de": f1_labeller("de"),
    "mc": Labeller(
        "mc",
        "correct iff the chosen option letter ('The answer is C', a leading 'B.' or '(B)') equals the gold "
        "letter; with no such letter, iff the answer names the gold option's text and no other option's; "
        "else iff its first standalone capital letter is the gold letter",
        lambda ex, a: mc_match(a, ex.golds[0], ex.golds[1] if len(ex.golds) > 1 else "", ex.choices),
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
