"""The multiple-choice correctness rule (docs/method.md §5): which option an answer chooses, and whether it is the
gold one.

An answer chooses an option by letter (``The answer is C``, a leading ``B.``, ``(B)``; `extract_choice_letter`)
or, with no letter, by naming the option's text (compared exactly, then case-folded, then SQuAD-normalised with
`tracecal.tasks.labels.normalize_answer`); `mc_match` is the 0/1 rule built from both.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

from tracecal.tasks.labels import normalize_answer

__all__ = ["extract_choice_letter", "mc_match"]

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
