"""The checks of every argument a backend method takes, at the boundary: each refuses a bad value with a
`ValidationError` naming the argument (``prompts``, ``prompt 3``, ``ids[2]``, ``stop_strings[0]``,
``answer_ids``), before any model runs, so every backend (HF, llama.cpp, HTTP) gives a value the same answer.
The prompts (`check_prompts`: text, a chat whose last turn is not the assistant's, or a dict), the counts
(`POSITIVE_INT`), the ids, callbacks, stop strings and hidden-state layers (`check_more`), token ids
(`check_token_ids`) and the arguments ``generate`` shares (`check_generate_args`).

>>> check_generate_args("Hi", 8, None, 16)
GenerateArgs(prompts=['Hi'], max_new_tokens=8, batch_size=16, top_logprobs=0)
>>> check_generate_args("Hi", 8, None, 16, progress=True)
Traceback (most recent call last):
    ...
tracecal.errors.ValidationError: progress must be a function (or None), got bool True
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from tracecal._validation import Interval, check_param, check_text, int_array, is_number
from tracecal.errors import TracecalError, ValidationError

__all__ = [
    "NUM_BEAMS",
    "NUM_SAMPLES",
    "GENERATOR_SEED",
    "check_count",
    "POSITIVE_INT",
    "GenerateArgs",
    "Prompt",
    "PromptTooLongError",
    "check_batch_size",
    "check_generate_args",
    "check_positive_int",
    "check_prompt_lengths",
    "check_prompts",
    "check_last_turn",
    "check_token_ids",
    "check_id_lists",
    "check_prompt",
    "check_ids",
    "check_list",
    "check_callback",
    "check_stop_strings",
    "check_hidden_layers",
    "check_more",
    "CALLBACKS",
]

Prompt = str | list[dict[str, str]] | dict[str, Any]
"""A prompt: text, a chat (a list of ``{"role", "content"}``), or a dict with ``prompt``, ``messages`` or
``prompt_ids``."""


class PromptTooLongError(TracecalError, ValueError):
    """A prompt that does not fit the model's context window together with max_new_tokens."""


POSITIVE_INT = Interval(int, 1, None)
"""The constraint of every count setting of a backend (``max_new_tokens``, ``batch_size``, ``top_logprobs``, …)."""


NUM_BEAMS = Interval(int, 2, 256)
"""The beams of one beam search (``beam_scores``, ``evaluate --num-beams``): each beam is one more row of the batch's
KV cache, so the count is bounded (256 beams of a 32-token answer already hold 256× a greedy pass's cache)."""

NUM_SAMPLES = Interval(int, 1, 1024)
"""The answers sampled per prompt (``sample_answers``, ``evaluate --num-samples``): one batch of that many rows per
prompt, bounded for the same reason as `NUM_BEAMS`."""


GENERATOR_SEED = Interval(int, 0, 2**64 - 1)
"""The bound of a seed handed to torch's or NumPy's generator (``generate(seed=...)``, ``sample_answers(seeds=...)``:
the sampling pass derives one from each question's id, 64 bits)."""


def check_count(value: Any, name: str, bound: Interval) -> int:
    """``value`` as an int within ``bound`` (`NUM_BEAMS`, `NUM_SAMPLES`), else `ValidationError` naming ``name``."""
    return int(check_param(name, check_positive_int(value, name), bound))


def check_positive_int(value: Any, name: str) -> int:
    """``value`` as an int if it meets `POSITIVE_INT` (a whole number ≥ 1; not a bool, a float or a string),
    else `ValidationError` (a ValueError) naming ``name``, the value and its type."""
    if not is_number(value, integer=True):
        raise ValidationError(f"{name} must be a positive integer, got {value!r} ({type(value).__name__})")
    if not POSITIVE_INT.accepts(value):
        raise ValidationError(f"{name} must be a positive integer (≥ 1), got {value}")
    return int(value)


def check_batch_size(value: Any, default: int) -> int:
    """``value`` (a positive int) or ``default`` when it is None."""
    return default if value is None else check_positive_int(value, "batch_size")


def check_list(value: Any, name: str) -> list[Any]:
    """``value`` as a list if it is a sequence (not text, bytes or a mapping); else `ValidationError` naming
    ``name``."""
    if isinstance(value, str | bytes | dict) or not isinstance(value, Sequence | np.ndarray):
        raise ValidationError(f"{name} must be a list, got {type(value).__name__} {value!r:.40}")
    return list(value)


def check_ids(ids: Any, n: int) -> None:
    """None, or one id (a str or a whole number) per prompt; else `ValidationError` naming ``ids``."""
    if ids is None:
        return
    ids = check_list(ids, "ids")
    if len(ids) != n:
        raise ValidationError(f"ids must have one entry per prompt: {len(ids)} ids for {n} prompts")
    for i, x in enumerate(ids):
        if isinstance(x, bool) or not isinstance(x, str | numbers.Integral):
            raise ValidationError(f"ids[{i}] must be a str, got {type(x).__name__} {x!r:.40}")


def check_callback(value: Any, name: str) -> None:
    """None or a callable; else `ValidationError` naming ``name`` (``progress``, ``on_step``, ``on_token``)."""
    if value is not None and not callable(value):
        raise ValidationError(f"{name} must be a function (or None), got {type(value).__name__} {value!r:.40}")


def check_stop_strings(value: Any) -> list[str]:
    """``stop_strings`` as a list: None or () for none, one str, or a list of non-empty str; else
    `ValidationError` naming it."""
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if isinstance(value, bytes | dict) or not isinstance(value, Sequence):
        raise ValidationError(f"stop_strings must be a list of strings, got {type(value).__name__}")
    for i, x in enumerate(value):
        if not isinstance(x, str) or not x:
            raise ValidationError(f"stop_strings[{i}] must be a non-empty string, got {x!r:.40}")
        check_text(x, f"stop_strings[{i}]")
    return list(value)


def check_hidden_layers(value: Any) -> None:
    """None, ``"auto"`` or a non-empty list of 1-based layer indices (checked against the model's depth where the
    layers are resolved: `tracecal.backends.hidden.resolve_layers`); else `ValidationError` naming
    ``hidden_layers``."""
    if value is None or (isinstance(value, str) and value == "auto"):
        return
    if isinstance(value, str | bytes | dict) or not isinstance(value, Sequence | np.ndarray):
        raise ValidationError(f"hidden_layers must be 'auto' or a list of layer indices, got {value!r:.40}")
    layers = int_array(value, "hidden_layers")
    if not layers.size or (layers < 1).any():
        raise ValidationError(f"hidden_layers must be a non-empty list of layer indices ≥ 1, got {value!r:.40}")


def check_token_ids(value: Any, name: str, vocab_size: int | None, min_len: int = 0) -> list[int]:
    """``value`` as a list of token ids: whole numbers in [0, ``vocab_size``) (`int_array`), at least ``min_len``
    of them; else `ValidationError` naming ``name`` (what every method that takes ids checks before the model runs:
    ``teacher_forced``, ``next_token_logprobs``)."""
    ids = int_array(value, name)
    if len(ids) < min_len:
        raise ValidationError(f"{name} must hold at least {min_len} token id(s), got {len(ids)}")
    if vocab_size and ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
        bad = int(ids[(ids < 0) | (ids >= vocab_size)][0])
        raise ValidationError(f"{name}: {bad} is not a token id of this model [0, {vocab_size})")
    return [int(i) for i in ids]


def check_id_lists(value: Any, name: str, vocab_size: int | None) -> list[list[int]]:
    """A non-empty list of non-empty token-id lists (`check_token_ids` for each: ``name[i]``)."""
    if not check_list(value, name):
        raise ValidationError(f"{name} must be a non-empty list of token-id lists, got {value!r:.40}")
    return [check_token_ids(p, f"{name}[{i}]", vocab_size, min_len=1) for i, p in enumerate(value)]


def check_last_turn(last_role: str, where: str) -> None:
    """`ValidationError` when a chat's last message is the assistant's: every surface (``generate``,
    ``trace_answers``, ``tracecal score-answers``, the gateway's chat and ``/v1/score-answers``) reads a chat as the
    turns *before* the answer, which is the assistant turn the chat template opens next; continuing an assistant
    turn is not supported, so such a chat gets the same refusal everywhere."""
    if last_role == "assistant":
        raise ValidationError(
            f"{where}: the last message is the assistant's; a chat holds the turns before the answer "
            "(end it with the user's message and give the assistant's reply as the answer)"
        )


def _check_messages(messages: Any, where: str) -> None:
    if not isinstance(messages, list) or not messages:
        raise ValidationError(f"{where}: chat messages must be a non-empty list of {{'role': ..., 'content': ...}}")
    for j, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise ValidationError(f"{where}, message {j}: expected {{'role': str, 'content': str}}, got {m!r:.80}")
        check_text(m["content"], f"{where}, message {j}'s content")  # a lone surrogate: no tokenizer takes it
    check_last_turn(messages[-1]["role"], where)


def check_prompt(p: Any, where: str) -> None:
    if isinstance(p, str):
        check_text(p, where)
        return
    if isinstance(p, list):
        _check_messages(p, where)
        return
    if not isinstance(p, dict):
        raise ValidationError(f"{where} has type {type(p).__name__}; expected a str, a list of chat messages or a dict")
    if p.get("prompt_ids") is not None:
        ids = p["prompt_ids"]
        if (
            not isinstance(ids, Sequence)
            or isinstance(ids, str)
            or not all(isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in ids)
        ):
            raise ValidationError(f"{where}: 'prompt_ids' must be a list of token ids (ints)")
    elif p.get("messages") is not None:
        _check_messages(p["messages"], where)
    elif not isinstance(p.get("prompt"), str):
        raise ValidationError(f"{where}: a dict prompt needs 'prompt' (str), 'messages' (list) or 'prompt_ids'")
    else:
        check_text(p["prompt"], where)


def check_prompts(prompts: Sequence[Prompt]) -> list[Prompt]:
    """Validate the prompt list at the boundary; ValueError with the prompt's index and what is wrong."""
    if isinstance(prompts, str | dict):
        prompts = [prompts]
    try:
        prompts = list(prompts)
    except TypeError:
        raise ValidationError(f"prompts must be a list of prompts, got {type(prompts).__name__}") from None
    if not prompts:
        raise ValidationError("prompts is empty: pass at least one prompt")
    for i, p in enumerate(prompts):
        check_prompt(p, f"prompt {i}")
    return prompts


def check_prompt_lengths(
    prompt_ids: Sequence[Sequence[int]], max_new_tokens: int, context: int, where: str, remedy: str
) -> None:
    """Every prompt has ≥ 1 token and fits ``context`` together with ``max_new_tokens`` (`PromptTooLongError`).
    ``where`` names the limit in the message (e.g. "the model's context"), ``remedy`` says what to do."""
    for i, ids in enumerate(prompt_ids):
        if len(ids) == 0:
            raise ValidationError(f"prompt {i} encodes to zero tokens")
        if len(ids) + max_new_tokens > context:
            raise PromptTooLongError(
                f"prompt {i} has {len(ids)} tokens; with max_new_tokens={max_new_tokens} it exceeds {where} of "
                f"{context} tokens. {remedy}"
            )


class GenerateArgs(NamedTuple):
    """The checked common arguments of ``generate`` (`check_generate_args`)."""

    prompts: list[Prompt]
    max_new_tokens: int
    batch_size: int
    top_logprobs: int


def check_generate_args(
    prompts: Sequence[Prompt],
    max_new_tokens: Any,
    batch_size: Any,
    default_batch_size: int,
    ids: Sequence[str] | None = None,
    top_logprobs: Any = 0,
    **more: Any,
) -> GenerateArgs:
    """The arguments every backend's ``generate`` shares, checked at the boundary (`ValidationError` naming the
    argument): the prompts (`check_prompts`), ``max_new_tokens`` and ``batch_size`` (`POSITIVE_INT`; None: the
    backend's ``default_batch_size``), ``top_logprobs`` (0 = off, else `POSITIVE_INT`), one id per prompt
    (`check_ids`), and of ``more``: ``stop_strings`` (`check_stop_strings`), ``hidden_layers``
    (`check_hidden_layers`) and the callbacks ``progress``, ``on_step``, ``on_token`` (`check_callback`)."""
    prompts = check_prompts(prompts)
    max_new_tokens = check_positive_int(max_new_tokens, "max_new_tokens")
    batch = check_batch_size(batch_size, default_batch_size)
    if top_logprobs != 0:
        top_logprobs = check_positive_int(top_logprobs, "top_logprobs")
    check_ids(ids, len(prompts))
    check_more(more)
    return GenerateArgs(prompts, max_new_tokens, batch, int(top_logprobs))


CALLBACKS = ("progress", "on_step", "on_token")
"""The keywords of ``generate`` / ``trace_answers`` that take a function."""


def check_more(options: dict[str, Any]) -> None:
    """The options ``generate`` and ``trace_answers`` share beyond counts: ``stop_strings``, ``hidden_layers`` and
    the `CALLBACKS` (absent ones skipped)."""
    if "stop_strings" in options:
        check_stop_strings(options["stop_strings"])
    check_hidden_layers(options.get("hidden_layers"))
    for name in CALLBACKS:
        check_callback(options.get(name), name)
