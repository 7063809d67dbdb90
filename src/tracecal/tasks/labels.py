"""Correctness labellers (METHOD §5): pure functions from an answer text and gold references to 0/1.

Each labeller is a plain function with a docstring that names its rule; :data:`LABELLERS` wraps them as
:class:`Labeller` objects (name + human-readable rule + ``(example, answer) -> int``) so that a task can
swap its labeller and a report can print the rule it used.

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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tracecal.tasks.example import Example

__all__ = [
    "LABELLERS",
    "Labeller",
    "alias_match",
    "extract_choice_letter",
    "extract_last_number",
    "f1_labeller",
    "f1_match",
    "get_labeller",
    "mc_match",
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


def _as_list(refs: str | Iterable[str] | None) -> list[str]:
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
    refs = _as_list(aliases)
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
        raise ValueError(f"gold value {gold!r} is not a number")
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
    refs = _as_list(golds)
    best = max((token_f1(answer, g, lang) for g in refs), default=0.0)
    return int(best >= threshold - 1e-12)


# ----------------------------------------------------------------------------------- multiple choice

_LETTERS = "ABCDEFGHIJ"
_NOT_WORD = r"(?![\w'\u2019-])"


def _letter_class(n: int) -> str:
    return f"[{_LETTERS[: max(1, min(n, len(_LETTERS)))]}]"


def _article_a(text: str, end: int, choices: Sequence[str]) -> bool:
    """True when a capital ``A`` at ``text[:end]`` reads as the English article ("A bank ...")."""
    rest = text[end:]
    m = re.match(r"\s+([a-z]\w*)", rest)
    if not m:
        return False
    if choices:
        opt = normalize_answer(choices[0], punct=" ")
        if opt and (" " + normalize_answer(rest, punct=" ") + " ").startswith(f" {opt} "):
            return False  # "A bank" where option A is "bank": the letter, spelled out
    return True


def _letter_patterns(n: int) -> tuple[list[str], str]:
    cls = _letter_class(n)
    strong = [
        # an explicit phrase: "The answer is C", "Answer: (B)", "the correct option is D"
        rf"(?i:\b(?:answer|option|choice)\b)(?:\s+(?i:is|would\s+be|will\s+be))?\s*:?\s*"
        rf"(?i:option\s+|choice\s+)?\(?\s*({cls}|{cls.lower()}){_NOT_WORD}",
        # a leading letter: "B", "B.", "(B)", "B) text", "B: text"
        rf"^[\(\[]?({cls})(?:[\)\].:,]|\s|$)",
        # a parenthesised letter anywhere: "... (b) ..."
        rf"\(({cls}|{cls.lower()})\)",
    ]
    weak = rf"(?<![\w'\u2019\u00b0-])({cls}){_NOT_WORD}"  # first standalone capital letter
    return strong, weak


def _find_letter(text: str, patterns: list[str], opts: Sequence[str], paren: int = -1) -> str | None:
    for i, pat in enumerate(patterns):
        for m in re.finditer(pat, text):
            if m.group(1) in "Aa" and i != paren and _article_a(text, m.end(1), opts):
                continue
            return m.group(1).upper()
    return None


def extract_choice_letter(answer: str | None, choices: Sequence[str] | int = 5, weak: bool = True) -> str | None:
    """The option letter an answer chooses, or None.

    Tried in order: an explicit phrase (``The answer is C``, ``Answer: (B)``, ``correct option is D``);
    a leading letter (``B``, ``B.``, ``(B)``, ``B) text``); a parenthesised letter anywhere (``(b)``); and,
    if ``weak``, the first standalone capital letter (not one glued to a word, digit or ``°``, so the
    ``C`` of ``20°C`` is no letter). Only letters of existing options count (A-D for four options). A
    capital ``A`` followed by a lower-case word is read as the article, unless that word starts option
    A's text.
    """
    if not answer or not answer.strip():
        return None
    opts: Sequence[str] = [] if isinstance(choices, int) else choices
    strong, weak_pat = _letter_patterns(choices if isinstance(choices, int) else len(choices))
    text = answer.strip()
    letter = _find_letter(text, strong, opts, paren=2)
    if letter is None and weak:
        letter = _find_letter(text, [weak_pat], opts)
    return letter


def _tier_norm(text: str, tier: int) -> str:
    if tier == 2:
        return normalize_answer(text, punct=" ")
    t = " ".join(unicodedata.normalize("NFKC", text).split()).rstrip(".").strip()
    return t.casefold() if tier == 1 else t


def _contains(hay: str, needle: str, tier: int) -> bool:
    if not needle:
        return False
    if tier == 2:
        return f" {needle} " in f" {hay} "
    return re.search(rf"(?<![^\W_]){re.escape(needle)}(?![^\W_])", hay) is not None


def _options_named(answer: str, options: Sequence[str], tier: int) -> set[str]:
    """Normalised texts of the options that ``answer`` names at a normalisation tier (0 exact, 1
    case-folded, 2 SQuAD); an option inside another named option's text does not count on its own."""
    hay = _tier_norm(answer, tier)
    named = {o for o in (_tier_norm(x, tier) for x in options) if _contains(hay, o, tier)}
    return {o for o in named if not any(p != o and _contains(p, o, tier) for p in named)}


def mc_match(answer: str | None, gold_letter: str, gold_text: str, choices: Sequence[str]) -> int:
    """Rule: 1 iff the chosen option letter equals the gold letter; with no letter, 1 iff the answer
    contains the gold option's text and no other option's text.

    Order: an explicit/leading/parenthesised letter (:func:`extract_choice_letter` without ``weak``);
    else the option texts the answer names, compared exactly, then case-folded, then SQuAD-normalised
    (the first of these that finds any option decides; options with identical text count as one, and an
    option inside another named option's text, ``cells`` in ``brain cells``, does not count on its own);
    else the first standalone capital letter. Empty answers are wrong.
    """
    if not answer or not answer.strip():
        return 0
    gold_letter = gold_letter.strip().upper()
    opts = list(choices) if choices else []
    strong, weak = _letter_patterns(len(opts) if opts else 5)
    letter = _find_letter(answer.strip(), strong, opts, paren=2)
    if letter is not None:
        return int(letter == gold_letter)
    if opts:
        gold_idx = _LETTERS.find(gold_letter)
        if 0 <= gold_idx < len(opts):
            gold_text = gold_text or opts[gold_idx]
            opts[gold_idx] = gold_text
    elif gold_text:
        opts = [gold_text]
    for tier in (0, 1, 2):
        named = _options_named(answer, opts, tier)
        if named:
            return int(named == {_tier_norm(gold_text, tier)})
    letter = _find_letter(answer.strip(), [weak], opts)
    return int(letter == gold_letter)


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
    correct = _as_list(correct_refs)
    if not correct:
        raise ValueError("truthful_match needs at least one correct reference")
    best_true = max(rouge_l(r, answer) for r in correct)
    best_false = max((rouge_l(r, answer) for r in _as_list(incorrect_refs)), default=0.0)
    return int(best_true > best_false)


# ------------------------------------------------------------------------------- Labeller registry


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
        raise ValueError(f"unknown labeller {name!r}; known: {', '.join(sorted(LABELLERS))}") from None
