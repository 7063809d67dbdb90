"""Correctness labellers (docs/method.md §5): pure functions from an answer text and gold references to 0/1.

Each labeller is a plain function with a docstring that names its rule (the multiple-choice rule:
`tracecal.tasks.choices`); `tracecal.tasks.labellers.LABELLERS` wraps them as ``Labeller`` objects (name +
human-readable rule + ``(example, answer) -> int``) so that a task can swap its labeller and a report can print
the rule it used.

Normalisation choices (ours, documented here once):

* English text follows SQuAD: NFKC, lower-case, punctuation removed, articles ``a/an/the`` removed,
  whitespace collapsed. Punctuation is every Unicode ``P*`` character plus ASCII ``string.punctuation``.
* German text (MLQA) follows the official MLQA v1 evaluation script: the same, but the articles removed
  are ``der die das den dem des ein eine einen einem eines einer``; umlauts and ß are kept as they are.
* Alias containment (TriviaQA) tries two punctuation treatments, *punctuation -> space* (TriviaQA's
  official normaliser: ``dik-dik`` == ``dik dik``) and *punctuation removed* (SQuAD: ``U.S.`` == ``US``,
  ``3,000`` == ``3000``), and matches whole words only (alias ``us`` never matches ``house``).
"""

from __future__ import annotations

import functools
import re
import string
import unicodedata
from collections import Counter
from collections.abc import Iterable
from typing import Any

from tracecal.errors import ValidationError

__all__ = [
    "alias_match",
    "as_list",
    "extract_last_number",
    "f1_match",
    "normalize_answer",
    "numeric_match",
    "parse_number",
    "format_number",
    "rouge_l",
    "token_f1",
    "truthful_match",
]

_ARTICLES = {
    "en": re.compile(r"\b(?:a|an|the)\b"),
    "de": re.compile(r"\b(?:ein|eine|einen|einem|eines|einer|der|die|das|den|dem|des)\b"),
}
_ASCII_PUNCT = frozenset(string.punctuation)


@functools.lru_cache(maxsize=4096)
def _is_punct(ch: str) -> bool:
    return ch in _ASCII_PUNCT or unicodedata.category(ch).startswith("P")


def as_list(refs: str | Iterable[str] | None) -> list[str]:
    """A single string is one reference (never iterate over its characters)."""
    if refs is None:
        return []
    if isinstance(refs, str):
        return [refs]
    return [r for r in refs if isinstance(r, str)]


def normalize_answer(text: str, lang: str = "en", punct: str = "") -> str:
    """SQuAD/MLQA-style normalisation: NFKC, lower-case, punctuation -> ``punct``, articles removed.

    ``lang`` selects the article list (``"en"``: a/an/the; ``"de"``: der/die/das/den/dem/des/ein/eine/
    einen/einem/eines/einer; any other language: no article removal). Whitespace is collapsed.
    """
    text = unicodedata.normalize("NFKC", text or "").lower()
    text = "".join(punct if _is_punct(c) else c for c in text)
    articles = _ARTICLES.get(lang)
    if articles is not None:
        text = articles.sub(" ", text)
    return " ".join(text.split())


# --------------------------------------------------------------------------------------------- alias


def alias_match(answer: str | None, aliases: str | Iterable[str], lang: str = "en") -> int:
    """Rule: 1 iff some normalised gold alias occurs in the normalised answer as a whole-word span.

    Normalisation is SQuAD-style (lower-case, punctuation and articles a/an/the removed, whitespace
    collapsed); it is tried with punctuation replaced by a space and with punctuation deleted. Aliases
    that normalise to nothing are ignored. An empty answer is labelled 0.
    """
    if not answer or not answer.strip():
        return 0
    refs = as_list(aliases)
    for punct in (" ", ""):
        norm = normalize_answer(answer, lang, punct)
        if not norm:
            continue
        padded = f" {norm} "
        for alias in refs:
            a = normalize_answer(alias, lang, punct)
            if a and f" {a} " in padded:
                return 1
    return 0


# ------------------------------------------------------------------------------------------- numeric

_NUMBER_RE = re.compile(
    r"(?<![\w.])(?P<sign>-)?"
    r"(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"
    r"(?:\s*/\s*(?P<den>\d+)(?![\d.,]))?"
)
_MINUS_SIGNS = str.maketrans({"\u2212": "-", "\u2013": "-", "\u2012": "-"})


def _match_value(m: re.Match[str]) -> float | None:
    num = m.group("num")
    value = float(num.replace(",", ""))
    den = m.group("den")
    if den is not None and "." not in num and "," not in num:
        d = float(den)
        if d != 0:
            value = value / d
    return -value if m.group("sign") else value


def extract_last_number(text: str | None) -> float | None:
    """The last number written in ``text`` (``None`` when there is none).

    Understood: thousands separators (``3,000``), decimals (``3.0``, ``.5``), a leading minus (``-2``,
    Unicode minus too), currency/percent signs around it (``$5``, ``50%``), simple fractions (``1/2``),
    and a sentence-final full stop (``5.``). A hyphen glued to a preceding word/number is not a sign
    (``5-2`` gives 5 then 2). Number words (``twelve``) are not numbers.
    """
    if not text:
        return None
    last = None
    for m in _NUMBER_RE.finditer(text.translate(_MINUS_SIGNS)):
        last = m
    return None if last is None else _match_value(last)


def parse_number(text: str | float | int) -> float | None:
    """Parse a gold value written as a number (``"3,000"``, ``"$5"``, ``"-2.5"``, ``"1/2"``); else None.

    Unlike :func:`extract_last_number` the whole string must be one number (surrounding ``$``, ``%`` and
    whitespace allowed), so ``"five"`` or ``"3 apples"`` are rejected.
    """
    if isinstance(text, bool):
        return None
    if isinstance(text, int | float):
        value = float(text)
        return value if value == value and abs(value) != float("inf") else None
    if not isinstance(text, str):
        return None
    s = text.translate(_MINUS_SIGNS).strip()
    s = s.removesuffix("%").strip()
    if s.startswith("-$"):
        s = "-" + s[2:]
    s = s.removeprefix("$").strip()
    m = _NUMBER_RE.fullmatch(s)
    return None if m is None else _match_value(m)


def format_number(value: float) -> str:
    """Canonical string of a gold number: integers without ``.0`` (``51.0`` -> ``"51"``), else repr."""
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def numeric_match(answer: str | None, gold: str | float, tol: float = 1e-6) -> int:
    """Rule: 1 iff the last number in the answer equals the gold value, ``|answer - gold| < tol``.

    See :func:`extract_last_number` for the number formats understood. No number in the answer -> 0.
    ``gold`` must itself be a number (or a numeric string); anything else raises ``ValueError``.
    """
    g = parse_number(gold)
    if g is None:
        raise ValidationError(f"gold value {gold!r} is not a number")
    x = extract_last_number(answer)
    if x is None:
        return 0
    return int(x == g or abs(x - g) < tol)


# ------------------------------------------------------------------------------------------------ F1


def token_f1(prediction: str, gold: str, lang: str = "en") -> float:
    """SQuAD token F1 between two texts after :func:`normalize_answer` (punctuation deleted)."""
    p = normalize_answer(prediction, lang).split()
    g = normalize_answer(gold, lang).split()
    if not p or not g:
        return float(p == g)
    same = sum((Counter(p) & Counter(g)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


def f1_match(answer: str | None, golds: str | Iterable[str], threshold: float = 0.5, lang: str = "en") -> int:
    """Rule: 1 iff SQuAD token F1 between the answer and some gold span is >= ``threshold`` (0.5).

    Tokens come from :func:`normalize_answer` with punctuation deleted: for ``lang="de"`` the German
    articles der/die/das/den/dem/des/ein/eine/einen/einem/eines/einer are removed and umlauts kept (as in
    the official MLQA evaluation). An answer that is empty after normalisation is labelled 0.
    """
    if not answer or not normalize_answer(answer, lang):
        return 0
    refs = as_list(golds)
    best = max((token_f1(answer, g, lang) for g in refs), default=0.0)
    return int(best >= threshold - 1e-12)


# ---------------------------------------------------------------------------------------- TruthfulQA


@functools.lru_cache(maxsize=1)
def _rouge_scorer() -> Any:
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rougeL"])


def rouge_l(reference: str, prediction: str) -> float:
    """ROUGE-L F-measure (``rouge_score`` package, no stemming) between a reference and a prediction."""
    return float(_rouge_scorer().score(reference, prediction)["rougeL"].fmeasure)


def truthful_match(answer: str | None, correct_refs: str | Iterable[str], incorrect_refs: str | Iterable[str]) -> int:
    """Rule: 1 iff the answer is non-empty and its ROUGE-L F to the closest correct reference is strictly
    greater than its ROUGE-L F to the closest incorrect reference (0 when there is none).
    """
    if not answer or not answer.strip():
        return 0
    correct = as_list(correct_refs)
    if not correct:
        raise ValidationError("truthful_match needs at least one correct reference")
    best_true = max(rouge_l(r, answer) for r in correct)
    best_false = max((rouge_l(r, answer) for r in as_list(incorrect_refs)), default=0.0)
    return int(best_true > best_false)
