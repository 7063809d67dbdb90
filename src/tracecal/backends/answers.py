"""Traces of answers that already exist: ``model.trace_answers(prompts, answers)`` by teacher forcing.

An answer logged from production, written by a person, generated earlier or by another model is fed to the model
after its prompt (the same prompt ids ``generate`` would feed: `Backend.encode_prompt`), in one forward pass per
batch. From the next-token logits x_t at the position before answer token a_t (divided by ``temperature``),

    lse_t = logsumexp(x_t),   s_t = lse_t − x_t[a_t],   H_t = lse_t − Σ_v softmax(x_t)_v · x_t,v      (nats)

which are the numbers greedy decoding records when the model produces the same tokens: for its own greedy answers
``trace_answers`` returns the generation-time trace (same fields, s_t, H_t, tokens, offsets, stop reason; tested to
1e-4 nats in fp32 on the HF and llama.cpp backends). Only ``decoding`` differs (``strategy="teacher_forced"``), and
``meta["end_prob"]`` holds Σ_{v ∈ stop ids} P(v | prompt, answer): how likely the model was to end the answer there.

The stop reason is what greedy decoding would have recorded: ``"eos"`` when the answer's ids hold a stop token (the
answer ends before it) or the model's most likely next token after the answer is one; ``"length"`` when
``max_new_tokens`` is given and the answer has that many tokens; ``"stop_string"`` when that next token's text
completes one of ``stop_strings``; otherwise ``"unknown"`` (the model would have gone on: someone cut the answer).

Answers are text (tokenized by the model's tokenizer without BOS / EOS, exactly as given: include the leading
space a plain-text prompt such as ``"Answer:"`` is followed by; user text, so a special-token string it spells is
encoded as its characters: `tracecal.backends.prompting.user_text_ids`) or token ids of this model's vocabulary.
Text that a model generated may tokenize differently from the ids it generated (tokenizations are not unique):
pass the ids when you have them.

What the trace means for an answer this model did not choose greedily (docs in README.md, "Python API"):

* It is this model's view of the answer: s_t says how surprising each token is to *this* model, H_t how uncertain
  it was at that point of *this* text. For an answer sampled from the same model at temperature τ, pass
  ``temperature=τ`` to read it under the sampling distribution (before top-k / top-p truncation); at τ = 1 the
  sampled tokens' s_t is higher than greedy ones' by construction.
* For another model's answer (or a person's), low-probability tokens give large s_t although the answer may be
  right, and the text is re-tokenized with this model's tokenizer. TRACE still ranks answers, but a TRACE+ or Platt
  calibrator fitted on this model's own greedy answers is fitted on another distribution: fit it on labelled answers
  of the same origin as the ones you score.
* Stop strings are not searched inside the given answer (it is kept as given, up to a stop token).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from tracecal._validation import Interval, check_param, check_text
from tracecal.backends import arguments, base
from tracecal.backends.arguments import Prompt
from tracecal.backends.prompting import given_ids, user_text_ids
from tracecal.backends.registry import CAPABILITIES, backend_of, get_backend
from tracecal.errors import ValidationError
from tracecal.traces.trace import Trace

__all__ = [
    "ANSWER_OPTIONS",
    "TEMPERATURE",
    "Answer",
    "AnswerArgs",
    "Forced",
    "check_answer_args",
    "why_not",
    "check_answers",
    "check_temperature",
    "check_top_logprobs",
    "end_reason",
    "forced_decoding",
    "trace_answers_local",
    "answer_problems",
    "SampleArgs",
    "check_sample_args",
]

Answer = str | Sequence[int] | np.ndarray
"""An answer: its text, or its token ids in the model's vocabulary."""


class Forced(NamedTuple):
    """What one teacher-forced pass over prompt + answer (T tokens) gives."""

    surprisal: np.ndarray
    """s_t of the T answer tokens, nats, float64."""
    entropy: np.ndarray
    """H_t at the T answer positions, nats, float64."""
    topk_ids: np.ndarray | None
    """(T, k) most likely ids per position, or None (``top_logprobs=0``)."""
    topk_logprobs: np.ndarray | None
    """(T, k) their log-probs, or None."""
    next_id: int
    """The most likely token after the answer (what greedy decoding would emit next)."""
    end_prob: float
    """Σ_{v ∈ stop ids} P(v | prompt, answer)."""
    hidden: np.ndarray | None = None
    """The (2, layers, d) hidden-state summary (`tracecal.backends.hidden`), when asked for (``hidden_layers``)."""
    hidden_layers: tuple[int, ...] | None = None
    """The 1-based layers ``hidden`` holds (resolved: ``"auto"`` becomes indices)."""


class AnswerArgs(NamedTuple):
    """The checked arguments of ``trace_answers`` (`check_answer_args`)."""

    prompts: list[Prompt]
    answers: list[Answer]
    batch_size: int
    top_logprobs: int
    max_new_tokens: int | None
    stop_strings: list[str]
    temperature: float


def _is_id(x: Any) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def check_answers(prompts: Sequence[Prompt], answers: Sequence[Answer]) -> tuple[list[Prompt], list[Answer]]:
    """Prompts (`check_prompts`) and one answer per prompt, each a str or a sequence of token ids (ints ≥ 0);
    `ValidationError` naming the answer's index otherwise."""
    prompts = arguments.check_prompts(prompts)
    if isinstance(answers, str | np.ndarray) and (isinstance(answers, str) or answers.ndim == 1):
        answers = [answers]
    try:
        answers = list(answers)
    except TypeError:
        raise ValidationError(f"answers must be a list of answers, got {type(answers).__name__}") from None
    if len(answers) != len(prompts):
        raise ValidationError(f"answers must have one entry per prompt: {len(answers)} answers, {len(prompts)} prompts")
    for i, a in enumerate(answers):
        if isinstance(a, str):
            check_text(a, f"answer {i}")  # a lone surrogate: refused here, naming the answer, on every backend
            continue
        if isinstance(a, dict) or not isinstance(a, Sequence | np.ndarray) or not all(_is_id(x) for x in a):
            raise ValidationError(f"answer {i}: expected a str or a list of token ids (ints), got {str(a)[:60]!r}")
        if any(int(x) < 0 for x in a):
            raise ValidationError(f"answer {i}: token ids must be ≥ 0")
    return prompts, answers


TEMPERATURE = Interval(float, 0.01, 100)
"""The temperature τ of every in-process backend's ``generate`` (when sampling), ``sample_answers`` and
``trace_answers``, and of `tracecal.backends.user_generate.record`: the recorded distribution is softmax(x/τ), so
τ → 0 sends s_t of a token other than the argmax to ∞ (a logit gap of 100 at τ = 0.01 is 10⁴ nats, the most a trace
holds: `tracecal.traces.segments.MAX_TOKEN_NATS`) and τ → ∞ makes every s_t log |V| whatever the model says."""


class SampleArgs(NamedTuple):
    """The checked arguments of ``sample_answers`` (`check_sample_args`)."""

    prompts: list[Prompt]
    num_samples: int
    max_new_tokens: int
    temperature: float
    stop_strings: list[str]
    seeds: list[int] | None


def check_sample_args(
    prompts: Sequence[Prompt],
    num_samples: Any,
    max_new_tokens: Any,
    temperature: Any,
    stop_strings: Any,
    seeds: Any,
    default_batch_size: int,
) -> SampleArgs:
    """Every argument of an in-process backend's ``sample_answers`` checked at the boundary (`ValidationError`
    naming it): the arguments ``generate`` shares (`~tracecal.backends.arguments.check_generate_args`),
    ``num_samples`` in `~tracecal.backends.arguments.NUM_SAMPLES`, ``temperature`` in `TEMPERATURE`, and None or one
    seed per prompt, each in `~tracecal.backends.arguments.GENERATOR_SEED`."""
    prompts, max_new_tokens, _, _ = arguments.check_generate_args(
        prompts, max_new_tokens, None, default_batch_size, stop_strings=stop_strings
    )
    k = arguments.check_count(num_samples, "num_samples", arguments.NUM_SAMPLES)
    if seeds is not None:
        listed = arguments.check_list(seeds, "seeds")
        seeds = [int(check_param(f"seeds[{i}]", s, arguments.GENERATOR_SEED)) for i, s in enumerate(listed)]
        if len(seeds) != len(prompts):
            raise ValidationError(f"seeds must have one entry per prompt: {len(seeds)} for {len(prompts)} prompts")
    return SampleArgs(
        prompts, k, max_new_tokens, check_temperature(temperature), arguments.check_stop_strings(stop_strings), seeds
    )


def check_temperature(value: Any, name: str = "temperature") -> float:
    """``value`` as a float if it meets `TEMPERATURE`, else `ValidationError` naming ``name``."""
    return float(check_param(name, value, TEMPERATURE))


def check_top_logprobs(value: Any, vocab_size: int | None = None) -> int:
    """``top_logprobs``: 0 (off) or a whole number in [1, ``vocab_size``] (the alternatives a step has), else
    `ValidationError`: the one bound of ``generate``, ``trace_answers`` and ``record`` on the in-process backends."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and value == 0:
        return 0
    top = arguments.check_positive_int(value, "top_logprobs")
    if vocab_size is not None and top > vocab_size:
        raise ValidationError(
            f"top_logprobs must be at most the model's vocabulary of {vocab_size} (0 = off), got {top}"
        )
    return top


ANSWER_OPTIONS = (
    "batch_size",
    "ids",
    "progress",
    "top_logprobs",
    "temperature",
    "max_new_tokens",
    "stop_strings",
    "hidden_layers",
)
"""The keywords of ``trace_answers`` on the in-process backends (the HTTP backend takes all but ``temperature``)."""


def why_not(model: Any, capability: str) -> str:
    """Why ``model``'s registered backend cannot do ``capability`` (its declared line, `BackendSpec.why_not`)."""
    name = backend_of(model)
    return (
        get_backend(name).why_not(capability) if name else f"{type(model).__name__} has no {CAPABILITIES[capability]}"
    )


def check_answer_args(
    prompts: Sequence[Prompt],
    answers: Sequence[Answer],
    options: dict[str, Any],
    default_batch_size: int,
    known: Sequence[str] = ANSWER_OPTIONS,
    hidden: str | None = None,
    vocab_size: int | None = None,
) -> AnswerArgs:
    """Every argument of ``trace_answers`` checked at the boundary (`ValidationError` naming it); an option not in
    ``known`` is refused (a misspelt ``temperatur=`` must not pass silently). ``temperature`` and ``top_logprobs``
    are held to the bounds of ``generate`` (`TEMPERATURE`; at most ``vocab_size`` alternatives). ``hidden``: None
    where the backend records hidden states, else why it cannot: ``hidden_layers`` then raises
    `BackendUnsupportedError` saying so."""
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise ValidationError(f"trace_answers got unknown option(s) {', '.join(unknown)}; it takes {', '.join(known)}")
    if hidden is not None and options.get("hidden_layers") is not None:
        raise base.BackendUnsupportedError(f"hidden_layers: {hidden}; use --backend hf")
    prompts, answers = check_answers(prompts, answers)
    arguments.check_ids(options.get("ids"), len(prompts))
    arguments.check_more(options)
    top = options.get("top_logprobs", 0)
    mnt = options.get("max_new_tokens")
    stops = options.get("stop_strings") or ()
    return AnswerArgs(
        prompts,
        answers,
        arguments.check_batch_size(options.get("batch_size"), default_batch_size),
        check_top_logprobs(top, vocab_size),
        None if mnt is None else arguments.check_positive_int(mnt, "max_new_tokens"),
        [stops] if isinstance(stops, str) else list(stops),
        check_temperature(options.get("temperature", 1.0)),
    )


def answer_token_ids(tokenizer: Any, answer: Answer, what: str = "the answer") -> list[int]:
    """The ids of an answer: text encoded as user text without BOS / EOS (`user_text_ids`: a special-token string
    in it, e.g. ``"<|im_end|>"``, becomes the ids of its characters, so it neither ends the answer nor feeds the
    model a control token), ids as given."""
    if isinstance(answer, str):
        return user_text_ids(tokenizer, answer, what)
    return given_ids(tokenizer, answer, what)


def end_reason(
    n_tokens: int, had_stop: bool, next_is_stop: bool, text_with_next: Callable[[], str], args: AnswerArgs
) -> str:
    """The stop reason greedy decoding would have recorded for an answer of ``n_tokens`` tokens (module docstring):
    ``had_stop`` - the given answer held a stop token; ``next_is_stop`` - the model's most likely next token is one;
    ``text_with_next()`` - the answer's text followed by that token's (read only when ``stop_strings`` are given)."""
    if had_stop:
        return "eos"
    if args.max_new_tokens is not None and n_tokens >= args.max_new_tokens:
        return "length"
    if next_is_stop:
        return "eos"
    if args.stop_strings and base.stop_string_hit(text_with_next(), args.stop_strings):
        return "stop_string"
    return "unknown"


def forced_decoding(args: AnswerArgs, chat: bool, extra: dict[str, Any]) -> dict[str, Any]:
    """The ``decoding`` record of traces made by teacher forcing (``extra``: the backend's own entries)."""
    return {
        "strategy": "teacher_forced",
        "temperature": args.temperature,
        "max_new_tokens": args.max_new_tokens,
        "top_logprobs": args.top_logprobs,
        "stop_strings": list(args.stop_strings),
        "chat_template": chat,
    } | extra


def _encoded(backend: Any, prompt: Prompt, answer: Answer, where: str) -> tuple[list[int], list[int], bool]:
    """(prompt ids, answer ids cut before the first stop token, whether one was cut) of one answer of an
    in-process backend; `ValidationError` naming ``where`` when the pair cannot be traced: an answer that does not
    encode, a prompt of zero tokens, or more tokens than the model's context (with the position after the answer)."""
    a_ids = answer_token_ids(backend.tokenizer, answer, where)
    stop = set(backend.stop_ids)
    cut = next((t for t, x in enumerate(a_ids) if x in stop), None)
    p_ids = backend.encode_prompt(prompt)
    a_ids = a_ids if cut is None else a_ids[:cut]
    context = backend.context_length
    if not p_ids:
        raise ValidationError(f"{where}: the prompt encodes to zero tokens")
    if context is not None and len(p_ids) + len(a_ids) + 1 > context:
        raise ValidationError(
            f"{where}: the prompt and its answer have {len(p_ids) + len(a_ids)} tokens; with the position after the "
            f"answer they exceed the model's context of {context} tokens"
        )
    return p_ids, a_ids, cut is not None


def _where(i: int, ids: Sequence[str] | None) -> str:
    """How a message names answer ``i``: by its id when the caller gave ids (``answer 'q7'``), else its index."""
    return f"answer {ids[i]!r}" if ids is not None and i < len(ids) else f"answer {i}"


def answer_problems(backend: Any, prompts: Sequence[Prompt], answers: Sequence[Answer]) -> list[str | None]:
    """Per answer, why ``trace_answers`` of ``backend`` would refuse it (None: it would not), computed with the
    model's tokenizer and nothing run through the model: what a caller checks *before* tracing to skip or report
    single answers (``tracecal score-answers --on-error skip``) instead of losing the batch. Only in-process
    backends (a ``tokenizer`` here) can tell; for a server every entry is None (the server refuses what it cannot
    take)."""
    if getattr(backend, "tokenizer", None) is None or not hasattr(backend, "encode_prompt"):
        return [None] * len(answers)
    out: list[str | None] = []
    for p, a in zip(prompts, answers, strict=True):
        try:
            arguments.check_prompts([p])
            _encoded(backend, p, a, "answer")
            out.append(None)
        except ValidationError as e:
            out.append(str(e).removeprefix("answer: ").removeprefix("prompt 0: "))
    return out


def trace_answers_local(
    backend: Any,
    args: AnswerArgs,
    forced: Callable[[list[tuple[list[int], list[int]]]], list[Forced]],
    decoding: dict[str, Any],
    ids: Sequence[str] | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[Trace]:
    """``trace_answers`` of an in-process backend (``tokenizer``, ``encode_prompt``, ``stop_ids``, ``model_id``,
    ``context_length``): answers cut before their first stop token, batches of similar lengths handed to
    ``forced`` (one teacher-forced pass per batch), traces in prompt order."""
    stop = set(backend.stop_ids)
    rows: list[tuple[list[int], list[int]]] = []
    had_stop: list[bool] = []
    for i, (p, a) in enumerate(zip(args.prompts, args.answers, strict=True)):
        p_ids, a_ids, cut = _encoded(backend, p, a, _where(i, ids))
        rows.append((p_ids, a_ids))
        had_stop.append(cut)
    order = np.argsort([-(len(p) + len(a)) for p, a in rows], kind="stable")
    out: list[Trace | None] = [None] * len(rows)
    for start in range(0, len(order), args.batch_size):
        idx = [int(i) for i in order[start : start + args.batch_size]]
        for i, f in zip(idx, forced([rows[i] for i in idx]), strict=True):
            p_ids, a_ids = rows[i]
            next_text = lambda a=a_ids, n=f.next_id: backend.tokenizer.decode([*a, n])  # noqa: E731
            reason = end_reason(len(a_ids), had_stop[i], f.next_id in stop, next_text, args)
            prefixes = base.decoded_prefixes(backend.tokenizer, a_ids)
            top = (f.topk_ids, f.topk_logprobs) if a_ids else (None, None)
            s, h = np.maximum(f.surprisal, 0.0), np.maximum(f.entropy, 0.0)  # float round-off below 0
            t = base.local_trace(prefixes, a_ids, s, h, p_ids, reason, backend.model_id, decoding, top)
            t.meta["end_prob"] = f.end_prob
            t.hidden, t.hidden_layers = f.hidden, f.hidden_layers
            out[i] = base.name_trace(t, args.prompts[i], i, ids)
        if progress is not None:
            progress(len(idx))
    return [t for t in out if t is not None]
