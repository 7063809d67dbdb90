"""Extra-inference confidences: P(True) and verbalised confidence (docs/method.md §4 "Broader").

Both read next-token distributions from forward passes over a prompt that shows the model its own answer;
neither generates text.

* P(True) = P(yes) / (P(yes) + P(no)), where P(yes) sums the probabilities of the single-token variants of
  "Yes" (``Yes``, `` Yes``, ``yes``, `` yes``, ``YES``) at the first answer position, and likewise "No".
  The same quantity is SECL's self-supervision target NormPTrue τ (docs/method.md §6).
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

Both run on any backend with a tokenizer and next-token log-probs (`Judge`: the HF and llama.cpp backends), from
the same prompt ids (the chat template of the model's tokenizer). On HF the digit tree is one batched step on a
repeated KV cache; on llama.cpp (no torch model) the same eleven continuations are read as prompts of their own,
prompt + d₁ and prompt + "1" "0", which llama.cpp evaluates on the cached prompt (`number_distribution`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np
import torch

from tracecal.backends.base import BackendUnsupportedError, LocalBackend
from tracecal.backends.prefill import last_logits_only, length_batches
from tracecal.backends.recorder import output_cache
from tracecal.errors import TracecalError, ValidationError

__all__ = [
    "PTRUE_QUESTION",
    "VERBAL_QUESTION",
    "VERBAL_PREFILL",
    "p_true",
    "p_true_with_raw",
    "p_true_prompt_ids",
    "verbalized_prompt_ids",
    "number_distribution",
    "verbalized_confidence",
    "confidence_bins",
    "parse_confidence",
    "SelfEvalUnavailableError",
    "Judge",
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


class Judge(Protocol):
    """What a self-evaluation reads from a model: its tokenizer and prompt ids, and next-token log-probs (the HF
    and llama.cpp backends; the HF one, a `LocalBackend`, reads the digits' tree on one KV cache)."""

    tokenizer: Any
    chat: bool
    batch_size: int

    def encode_prompt(self, prompt: Any) -> list[int]: ...

    def next_token_logprobs(
        self, prompt_ids: Sequence[Sequence[int]], token_ids: Sequence[int], batch_size: int | None = None
    ) -> np.ndarray: ...


def _paired_prompts(
    lm: Judge,
    questions: Sequence[str],
    answers: Sequence[str],
    build: Callable[[Judge, str, str, str], list[int]],
    template: str,
    what: str,
) -> list[list[int]]:
    """``build(lm, question, answer, template)`` per pair; `ValidationError` unless there is one answer per question."""
    if len(questions) != len(answers):
        raise ValidationError(f"{what} needs one answer per question")
    return [build(lm, q, a, template) for q, a in zip(questions, answers, strict=True)]


def _single_token_ids(lm: Judge, words: Sequence[str]) -> list[int]:
    ids = []
    for w in words:
        enc = lm.tokenizer.encode(w, add_special_tokens=False)
        if len(enc) == 1 and enc[0] not in ids:
            ids.append(int(enc[0]))
    return ids


def _chat_ids(lm: Judge, user: str, prefill: str = "") -> list[int]:
    """Prompt ids: chat template (+ assistant prefill) for chat models, plain text otherwise."""
    if lm.chat:
        ids = lm.encode_prompt([{"role": "user", "content": user}])
        if prefill:
            ids = ids + lm.tokenizer.encode(prefill, add_special_tokens=False)
        return ids
    return lm.encode_prompt(f"{user}\n{prefill or 'Answer:'}")


def p_true_prompt_ids(lm: Judge, question: str, answer: str, template: str = PTRUE_QUESTION) -> list[int]:
    return _chat_ids(lm, template.format(question=question, answer=answer))


def p_true(
    lm: Judge,
    questions: Sequence[str],
    answers: Sequence[str],
    template: str = PTRUE_QUESTION,
    batch_size: int | None = None,
) -> np.ndarray:
    """P(True) ∈ [0, 1] per (question, answer): P(yes) / (P(yes) + P(no)) from one forward pass each."""
    return p_true_with_raw(lm, questions, answers, template, batch_size)[0]


def p_true_with_raw(
    lm: Judge,
    questions: Sequence[str],
    answers: Sequence[str],
    template: str = PTRUE_QUESTION,
    batch_size: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(P(yes) / (P(yes) + P(no)), raw P(yes)) per (question, answer), both from the same forward pass.

    Raw P(yes) = Σ over the Yes variants of their next-token probability, not renormalised against No (the mass
    the model puts on neither word lowers it); SECL's ``target="ptrue"`` ablation uses it.
    """
    prompts = _paired_prompts(lm, questions, answers, p_true_prompt_ids, template, "p_true")
    yes, no = _single_token_ids(lm, YES_VARIANTS), _single_token_ids(lm, NO_VARIANTS)
    if not yes or not no:
        raise SelfEvalUnavailableError("the tokenizer has no single-token Yes/No variants; P(True) cannot be read")
    lp = lm.next_token_logprobs(prompts, yes + no, batch_size=batch_size)
    ly = np.logaddexp.reduce(lp[:, : len(yes)], axis=1)
    ln = np.logaddexp.reduce(lp[:, len(yes) :], axis=1)
    return 1.0 / (1.0 + np.exp(ln - ly)), np.exp(ly)


def verbalized_prompt_ids(lm: Judge, question: str, answer: str, template: str = VERBAL_QUESTION) -> list[int]:
    return _chat_ids(lm, template.format(question=question, answer=answer), prefill=VERBAL_PREFILL)


def _digit_ids(lm: Judge) -> list[int]:
    ids = []
    for d in "0123456789":
        enc = lm.tokenizer.encode(d, add_special_tokens=False)
        if len(enc) != 1:
            raise SelfEvalUnavailableError(f"digit {d!r} is not a single token for this tokenizer")
        ids.append(int(enc[0]))
    return ids


def number_distribution(
    lm: Judge, prompt_ids: Sequence[Sequence[int]], grad: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Distribution over the numbers 0…100 the model would write next, shape (B, 101), and digit mass (B,).

    HF (a `LocalBackend`): three forward steps on one KV cache (prompt, ten first digits, "10"→"0"); with
    ``grad=True`` the result is differentiable with respect to the model's (e.g. LoRA) parameters. Another backend
    (llama.cpp): the same next-token distributions from `Judge.next_token_logprobs` (`_tree_from_logprobs`; no
    gradients).
    """
    if not isinstance(lm, LocalBackend):
        if grad:
            raise BackendUnsupportedError(f"gradients need the HF backend, not {type(lm).__name__}")
        return _tree_from_logprobs(lm, prompt_ids)
    digits = torch.tensor(_digit_ids(lm), device=lm.device)
    ctx = torch.enable_grad() if grad else torch.no_grad()
    with ctx:
        ids, mask = lm.left_pad(prompt_ids)
        B = ids.shape[0]
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        out = lm.model(
            input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, **last_logits_only(lm.model)
        )
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
        return _number_tree(p0[:, digits], p1[:, :, digits], p2_zero)


def _tree_from_logprobs(lm: Judge, prompt_ids: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """`number_distribution` from next-token log-probs of the digits after 12 prompts per row: the prompt, the
    prompt + each first digit d₁, the prompt + "1" "0" (consecutive, so llama.cpp evaluates each continuation on
    the prompt's cached prefix: one or two tokens)."""
    digits = _digit_ids(lm)
    rows = []
    for p in prompt_ids:
        p = [int(t) for t in p]
        rows += [p, *([*p, d] for d in digits), [*p, digits[1], digits[0]]]
    lp = lm.next_token_logprobs(rows, digits).reshape(len(prompt_ids), 12, 10)
    probs = torch.from_numpy(np.exp(lp))
    return _number_tree(probs[:, 0], probs[:, 1:11], probs[:, 11, 0])


def _number_tree(pd1: torch.Tensor, pd2: torch.Tensor, p2_zero: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """P(n), n = 0…100 (the module docstring's tree, renormalised), and the digit mass from P(d₁) (B, 10),
    P(d₂ | d₁) (B, 10, 10) and P("0" | "10") (B,)."""
    B = pd1.shape[0]
    end1 = (1.0 - pd2.sum(-1)).clamp(min=0.0)  # (B, 10)
    probs = torch.zeros(B, 101, device=pd1.device, dtype=pd1.dtype)
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
    lm: Judge,
    questions: Sequence[str],
    answers: Sequence[str],
    template: str = VERBAL_QUESTION,
    batch_size: int | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Verbalised confidence v ∈ [0, 1] per answer, its number distribution (B, 101) and digit mass (B,)."""
    prompts = _paired_prompts(lm, questions, answers, verbalized_prompt_ids, template, "verbalized_confidence")
    bs = batch_size or lm.batch_size
    dist, mass = np.zeros((len(prompts), 101)), np.zeros(len(prompts))
    for idx in length_batches([len(p) for p in prompts], bs):  # ≤ bs rows, ≤ PREFILL_TOKENS tokens (KV cache ×10)
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
