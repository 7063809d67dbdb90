"""Extra-inference confidences: P(True) and verbalised confidence (METHOD §4 "Broader").

Both read next-token distributions from forward passes over a prompt that shows the model its own answer;
neither generates text.

* P(True) = P(yes) / (P(yes) + P(no)), where P(yes) sums the probabilities of the single-token variants of
  "Yes" (``Yes``, `` Yes``, ``yes``, `` yes``, ``YES``) at the first answer position, and likewise "No".
  The same quantity is SECL's self-supervision target NormPTrue τ (METHOD §6).
* Verbalised confidence: the prompt asks for a number from 0 to 100 and the assistant turn is pre-filled
  with ``"Confidence: "``. Tokenizers that write numbers digit by digit (SmolLM2, Llama 3, Qwen) need a
  short tree of next-token distributions: P(d₁) for the first digit, P(d₂ | d₁) for each of the ten first
  digits (one batched step on a KV cache repeated 10×), and P(0 | "10") to tell 10 from 100. The number
  distribution over 0…100 is then

      P(n)   = P(d₁=n)·P(end | n)                      n = 1…9   (end = any non-digit token)
      P(0)   = P(d₁=0)
      P(10a+b) = P(d₁=a)·P(d₂=b | a)                   (10a+b ≠ 10; a third digit beyond 100 is ignored)
      P(10)  = P(1)·P(0 | 1)·(1 − P(0 | 10)),  P(100) = P(1)·P(0 | 1)·P(0 | 10)

  renormalised over 0…100; v = Σ n·P(n) / 100 (the probability-weighted mean). ``digit_mass`` (the
  probability that the reply starts with a digit) is returned so callers can see when the model did not
  want to answer with a number; when it is below ``min_digit_mass`` the caller may fall back to parsing
  generated text (`parse_confidence`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from tracecal.backends.base import LocalBackend
from tracecal.backends.recorder import output_cache
from tracecal.errors import TracecalError, ValidationError

__all__ = [
    "PTRUE_QUESTION",
    "VERBAL_QUESTION",
    "VERBAL_PREFILL",
    "p_true",
    "p_true_prompt_ids",
    "verbalized_prompt_ids",
    "number_distribution",
    "verbalized_confidence",
    "confidence_bins",
    "parse_confidence",
    "SelfEvalUnavailableError",
]

PTRUE_QUESTION = (
    "Question: {question}\nProposed answer: {answer}\nIs the proposed answer correct? Answer with Yes or No only."
)
VERBAL_QUESTION = (
    "Question: {question}\nYour answer: {answer}\n"
    "How confident are you that your answer is correct? Reply with a number from 0 to 100."
)
VERBAL_PREFILL = "Confidence: "
YES_VARIANTS = ("Yes", " Yes", "yes", " yes", "YES")
NO_VARIANTS = ("No", " No", "no", " no", "NO")


class SelfEvalUnavailableError(TracecalError, RuntimeError):
    """The tokenizer cannot express what a self-evaluation reads (single-token Yes/No variants, single-token digits)."""


def _paired_prompts(
    lm: LocalBackend,
    questions: Sequence[str],
    answers: Sequence[str],
    build: Callable[[LocalBackend, str, str, str], list[int]],
    template: str,
    what: str,
) -> list[list[int]]:
    """``build(lm, question, answer, template)`` per pair; `ValidationError` unless there is one answer per question."""
    if len(questions) != len(answers):
        raise ValidationError(f"{what} needs one answer per question")
    return [build(lm, q, a, template) for q, a in zip(questions, answers, strict=True)]


def _single_token_ids(lm: LocalBackend, words: Sequence[str]) -> list[int]:
    ids = []
    for w in words:
        enc = lm.tokenizer.encode(w, add_special_tokens=False)
        if len(enc) == 1 and enc[0] not in ids:
            ids.append(int(enc[0]))
    return ids


def _chat_ids(lm: LocalBackend, user: str, prefill: str = "") -> list[int]:
    """Prompt ids: chat template (+ assistant prefill) for chat models, plain text otherwise."""
    if lm.chat:
        ids = lm.encode_prompt([{"role": "user", "content": user}])
        if prefill:
            ids = ids + lm.tokenizer.encode(prefill, add_special_tokens=False)
        return ids
    return lm.encode_prompt(f"{user}\n{prefill or 'Answer:'}")


def p_true_prompt_ids(lm: LocalBackend, question: str, answer: str, template: str = PTRUE_QUESTION) -> list[int]:
    return _chat_ids(lm, template.format(question=question, answer=answer))


def p_true(
    lm: LocalBackend,
    questions: Sequence[str],
    answers: Sequence[str],
    template: str = PTRUE_QUESTION,
    batch_size: int | None = None,
) -> np.ndarray:
    """P(True) ∈ [0, 1] per (question, answer): P(yes) / (P(yes) + P(no)) from one forward pass each."""
    prompts = _paired_prompts(lm, questions, answers, p_true_prompt_ids, template, "p_true")
    yes, no = _single_token_ids(lm, YES_VARIANTS), _single_token_ids(lm, NO_VARIANTS)
    if not yes or not no:
        raise SelfEvalUnavailableError("the tokenizer has no single-token Yes/No variants; P(True) cannot be read")
    lp = lm.next_token_logprobs(prompts, yes + no, batch_size=batch_size)
    ly = np.logaddexp.reduce(lp[:, : len(yes)], axis=1)
    ln = np.logaddexp.reduce(lp[:, len(yes) :], axis=1)
    return 1.0 / (1.0 + np.exp(ln - ly))


def verbalized_prompt_ids(lm: LocalBackend, question: str, answer: str, template: str = VERBAL_QUESTION) -> list[int]:
    return _chat_ids(lm, template.format(question=question, answer=answer), prefill=VERBAL_PREFILL)


def _digit_ids(lm: LocalBackend) -> list[int]:
    ids = []
    for d in "0123456789":
        enc = lm.tokenizer.encode(d, add_special_tokens=False)
        if len(enc) != 1:
            raise SelfEvalUnavailableError(f"digit {d!r} is not a single token for this tokenizer")
        ids.append(int(enc[0]))
    return ids


def number_distribution(
    lm: LocalBackend, prompt_ids: Sequence[Sequence[int]], grad: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Distribution over the numbers 0…100 the model would write next, shape (B, 101), and digit mass (B,).

    Three forward steps on one KV cache (prompt, ten first digits, "10"→"0"); with ``grad=True`` the result
    is differentiable with respect to the model's (e.g. LoRA) parameters.
    """
    digits = torch.tensor(_digit_ids(lm), device=lm.device)
    ctx = torch.enable_grad() if grad else torch.no_grad()
    with ctx:
        ids, mask = lm.left_pad(prompt_ids)
        B = ids.shape[0]
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        out = lm.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True)
        p0 = torch.softmax(out.logits[:, -1].float(), -1)  # (B, V)
        cache = output_cache(out)
        last = mask.sum(-1, keepdim=True)  # next position per row
        # step 1: each of the ten first digits
        cache.batch_repeat_interleave(10)
        m1 = torch.cat([mask.repeat_interleave(10, 0), torch.ones(B * 10, 1, dtype=mask.dtype, device=mask.device)], 1)
        x1 = digits.repeat(B)[:, None]
        kw = lm.cache_kw()
        out1 = lm.model(input_ids=x1, attention_mask=m1, position_ids=last.repeat_interleave(10, 0), **{kw: cache})
        p1 = torch.softmax(out1.logits[:, -1].float(), -1).view(B, 10, -1)  # P(· | d1)
        # step 2: after "1","0": is there another "0" (100) or not (10)?
        cache.batch_select_indices(torch.arange(B, device=ids.device) * 10 + 1)
        m2 = torch.cat([m1.view(B, 10, -1)[:, 1], torch.ones(B, 1, dtype=mask.dtype, device=mask.device)], 1)
        out2 = lm.model(input_ids=digits[0].repeat(B)[:, None], attention_mask=m2, position_ids=last + 1, **{kw: cache})
        p2_zero = torch.softmax(out2.logits[:, -1].float(), -1)[:, digits[0]]  # P("0" | "10")
        pd1 = p0[:, digits]  # (B, 10)
        pd2 = p1[:, :, digits]  # (B, 10, 10): P(d2 | d1)
        end1 = (1.0 - pd2.sum(-1)).clamp(min=0.0)  # (B, 10)
        probs = torch.zeros(B, 101, device=p0.device, dtype=p0.dtype)
        probs[:, 0] = pd1[:, 0]
        probs[:, 1:10] = pd1[:, 1:] * end1[:, 1:]
        two = pd1[:, 1:, None] * pd2[:, 1:, :]  # (B, 9, 10): 10a+b for a = 1..9
        probs[:, 10:100] = two.reshape(B, 90)
        probs[:, 10] = two[:, 0, 0] * (1.0 - p2_zero)
        probs[:, 100] = two[:, 0, 0] * p2_zero
        mass = pd1.sum(-1)
        probs = probs / probs.sum(-1, keepdim=True).clamp(min=1e-30)
    return probs, mass


# The same inputs as `p_true`, on purpose: the two self-evaluation readings of the same (question, answer) pairs,
# called side by side by the passes and SECL; their shared prompt building is `_paired_prompts`.
def verbalized_confidence(
    lm: LocalBackend,
    questions: Sequence[str],
    answers: Sequence[str],
    template: str = VERBAL_QUESTION,
    batch_size: int | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Verbalised confidence v ∈ [0, 1] per answer, its number distribution (B, 101) and digit mass (B,)."""
    prompts = _paired_prompts(lm, questions, answers, verbalized_prompt_ids, template, "verbalized_confidence")
    bs = batch_size or lm.batch_size
    dist, mass = np.zeros((len(prompts), 101)), np.zeros(len(prompts))
    order = np.argsort([-len(p) for p in prompts], kind="stable")  # similar lengths share a batch: little padding
    for s in range(0, len(order), bs):
        idx = order[s : s + bs]
        d, m = number_distribution(lm, [prompts[i] for i in idx])
        dist[idx], mass[idx] = d.double().cpu().numpy(), m.double().cpu().numpy()
    v = dist @ (np.arange(101) / 100.0)
    return v, dist, mass


def confidence_bins(dist: np.ndarray | torch.Tensor, n_bins: int = 10) -> Any:
    """Collapse a (B, 101) number distribution into ``n_bins`` equal-width confidence bins (100 → last bin)."""
    idx = np.minimum((np.arange(101) * n_bins) // 100, n_bins - 1)
    onehot = np.zeros((101, n_bins))
    onehot[np.arange(101), idx] = 1.0
    if isinstance(dist, torch.Tensor):
        return dist @ torch.as_tensor(onehot, dtype=dist.dtype, device=dist.device)
    return np.asarray(dist) @ onehot


_NUM = re.compile(r"(\d+(?:\.\d+)?)\s*(%|/\s*100|percent)?")


def parse_confidence(text: str) -> float:
    """The first number in ``text`` read as a 0–100 confidence (``"85%"``, ``"0.85"``, ``"85/100"``); NaN if none."""
    m = _NUM.search(text or "")
    if not m:
        return float("nan")
    x = float(m.group(1))
    if x <= 1.0 and "." in m.group(1) and not m.group(2):
        x *= 100.0
    return float(np.clip(x, 0.0, 100.0) / 100.0)
