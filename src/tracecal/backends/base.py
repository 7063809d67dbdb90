"""What every backend provides, and helpers shared between backends.

A backend turns prompts into `Trace` objects recorded during its own decoding pass. Nothing downstream knows
which backend produced a trace; what differs is written in the trace (``entropy_kind``, ``decoding``, ``model_id``).

The checks of the arguments every backend method takes are `tracecal.backends.arguments`.

>>> from tracecal.backends.base import stop_string_hit
>>> stop_string_hit(" ", [" "]), stop_string_hit(" Paris. Question", ["Question"])
(False, True)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol, TypedDict, Unpack, runtime_checkable

import numpy as np

from tracecal.backends.arguments import Prompt
from tracecal.backends.topk import topk_entropy as topk_entropy_of
from tracecal.errors import TracecalError
from tracecal.traces.trace import Trace

__all__ = [
    "SampleSet",
    "Backend",
    "BackendUnsupportedError",
    "GenerateOptions",
    "LocalBackend",
    "char_offsets",
    "decoded_prefixes",
    "local_trace",
    "name_trace",
    "prompt_text",
    "stop_string_hit",
    "supports_on_step",
    "topk_entropy",
]

"""A prompt: plain text, a list of chat messages, or a dict with ``prompt``/``messages`` (+ ``id``)."""


class SampleSet(NamedTuple):
    """A prompt's answers drawn by ``sample_answers`` and their cost: prefill_tokens, decode_tokens, answer_tokens,
    forward_passes, cpu_seconds, wall_seconds (the backends' ``sample_answers`` docstrings define them)."""

    traces: list[Trace]
    cost: dict[str, float]


class GenerateOptions(TypedDict, total=False):
    """The keywords every backend's ``generate`` takes (each optional; the defaults are the backends')."""

    top_logprobs: int
    """k ≥ 0 alternatives stored per step (default 0: none)."""
    stop_strings: Sequence[str]
    """Answers end before the first of these strings (default: none)."""
    batch_size: int | None
    """Prompts per batch or concurrent requests (default: the backend's ``batch_size``)."""
    ids: Sequence[str] | None
    """One id per prompt, stored in its trace (default: the prompt's position)."""
    progress: Callable[[int], None] | None
    """Called with the number of prompts finished since the last call."""


@runtime_checkable
class Backend(Protocol):
    """What the harness (evaluate, SECL, selfeval, the service, the CLI) calls on a model.

    ``isinstance(obj, Backend)`` checks that every member exists. A backend that cannot do something (a
    server cannot run beam search or a teacher-forced pass) still has the method and raises
    :class:`BackendUnsupportedError` saying so.
    """

    model_id: str
    """Name recorded in every trace (and compared when a cached pass is reused)."""

    chat: bool
    """Format plain-string prompts as one user chat message (settable: tasks prompt by it)."""

    batch_size: int
    """Default prompts per batch (or per set of concurrent requests)."""

    @property
    def vocab_size(self) -> int:
        """|V|: the size of the output distribution (for top-k entropy tails and bounds)."""
        ...

    @property
    def context_length(self) -> int | None:
        """Prompt + answer tokens the model accepts (None when unknown, e.g. a server)."""
        ...

    def generate(
        self, prompts: Sequence[Prompt], max_new_tokens: int = 32, **options: Unpack[GenerateOptions]
    ) -> list[Trace]:
        """Decode one answer per prompt and return its trace (same order as ``prompts``). Every backend takes the
        keywords of `GenerateOptions`; backends take more (the HF backend's sampling keywords), and one that reports
        each decoding step takes ``on_step`` (HF: `tracecal.backends.recorder.StepHook`), which callers check for
        with :func:`supports_on_step`."""
        ...

    def beam_scores(self, prompts: Sequence[Prompt], num_beams: int = 5, max_new_tokens: int = 32) -> np.ndarray:
        """Length-normalised log-scores of the final ``num_beams`` beams per prompt, best first: (B, num_beams)."""
        ...

    def encode_prompt(self, prompt: Prompt) -> list[int]:
        """The exact token ids fed to the model for ``prompt`` (chat template applied when ``chat``)."""
        ...

    def next_token_logprobs(
        self, prompt_ids: Sequence[Sequence[int]], token_ids: Sequence[int], batch_size: int | None = None
    ) -> np.ndarray:
        """log P(v | prompt) of the next token for each prompt and each v in ``token_ids``: shape (B, K)."""
        ...

    def teacher_forced(self, prompt_ids: Sequence[int], answer_ids: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """(s_t, H_t) of ``answer_ids`` after ``prompt_ids`` from one forward pass, nats."""
        ...

    def trace_answers(self, prompts: Sequence[Prompt], answers: Sequence[Any], **options: Any) -> list[Trace]:
        """The trace of each given answer (text or token ids) after its prompt, as if this model had generated it
        (teacher forcing; options and what differs for answers it did not generate: `tracecal.backends.answers`)."""
        ...


@runtime_checkable
class LocalBackend(Backend, Protocol):
    """A :class:`Backend` whose weights and tokenizer live in this process (the Hugging Face backend).

    Needed by what reads or trains the network itself: verbalised confidence (``selfeval``: one shared
    prefill for the ten digit continuations) and SECL (LoRA on ``model``, gradients).
    """

    model: Any
    """The torch module (``transformers`` causal LM)."""

    tokenizer: Any
    """Its tokenizer (``encode``, ``decode``, ``apply_chat_template``)."""

    @property
    def device(self) -> Any:
        """The torch device of the weights."""
        ...

    def left_pad(self, seqs: Sequence[Sequence[int]]) -> tuple[Any, Any]:
        """(input_ids, attention_mask) of token-id lists, left padded to the longest, on ``device``."""
        ...

    def cache_kw(self) -> str:
        """The name of the KV-cache argument of ``model.forward`` (``cache`` or ``past_key_values``)."""
        ...


class BackendUnsupportedError(TracecalError, ValueError, NotImplementedError):
    """A backend cannot do what was asked (e.g. beam search on an OpenAI-compatible server)."""


def supports_on_step(model: Any, hook: str = "on_step") -> bool:
    """Whether ``model.generate`` takes an ``on_step`` callback (per-step tokens with s_t, H_t; early stop), or the
    callback named ``hook`` (the HTTP backend's ``on_token``: `tracecal.backends.http.stream.TokenHook`)."""
    import inspect

    try:
        return hook in inspect.signature(model.generate).parameters
    except (TypeError, ValueError, AttributeError):
        return False


def topk_entropy(topk_logprobs: np.ndarray, vocab_size: int, estimator: str = "uniform_tail") -> np.ndarray:
    """Estimated entropy from top-k log-probs (docs/method.md §1), nats, one value per row (``-inf`` = missing entry).

    The default is docs/method.md §1's truncated estimate: H ≈ −Σ_{top-k} p log p − r log(r / (|V| − k)),
    r = 1 − Σ_{top-k} p, the tail mass spread uniformly over the |V| − k remaining tokens (an upper bound).
    ``estimator`` picks another one of `tracecal.backends.topk.TOPK_ESTIMATORS` (the same as
    `tracecal.backends.topk.topk_entropy`).
    """
    return topk_entropy_of(topk_logprobs, vocab_size, estimator)


def char_offsets(prefix_texts: Sequence[str], text: str) -> tuple[np.ndarray, list[str]]:
    """Start offsets of each token in ``text`` and the token strings, from decoded prefixes.
    ``prefix_texts[i]`` is the decode of the first ``i`` tokens (``prefix_texts[0] == ""``), length T+1.
    A prefix that ends inside a multi-byte character decodes with a replacement character; its offset is
    the longest common prefix with ``text``, so offsets stay monotone and token strings tile ``text``."""
    T = len(prefix_texts) - 1
    starts = np.zeros(T + 1, dtype=np.int64)
    for i, pre in enumerate(prefix_texts):
        if text.startswith(pre):
            starts[i] = len(pre)
        else:
            n = 0
            for a, b in zip(pre, text, strict=False):
                if a != b:
                    break
                n += 1
            starts[i] = n
    starts[T] = len(text)
    starts = np.maximum.accumulate(starts)
    strings = [text[starts[i] : starts[i + 1]] for i in range(T)]
    return starts[:T], strings


def prompt_text(prompt: Prompt) -> str:
    """The prompt as the user gave it, for ``Trace.prompt`` (the same text the HF backend records)."""
    if isinstance(prompt, dict) and prompt.get("prompt_ids") is not None and not prompt.get("prompt"):
        return ""
    if isinstance(prompt, dict):
        prompt = prompt.get("messages") or prompt.get("prompt") or ""
    if isinstance(prompt, list):
        return "\n".join(f"{m.get('role')}: {m.get('content')}" for m in prompt)
    return prompt


def stop_string_hit(text: str, stop_strings: Sequence[str]) -> bool:
    """Whether a generated ``text`` has reached one of ``stop_strings``, the one rule of every local backend.

    An occurrence that lies wholly inside the answer's leading whitespace does not count: a base model that
    opens its answer to ``"Answer:"`` with ``"\\n"`` or ``" \\n"`` goes on to the answer (and stops at the
    newline after it) instead of returning zero tokens. Any occurrence that reaches past the leading
    whitespace counts (``" is"``, ``"\\nQuestion:"``).
    """
    lead = len(text) - len(text.lstrip())
    return any(ss and text.find(ss, max(0, lead - len(ss) + 1)) >= 0 for ss in stop_strings)


def name_trace(trace: Trace, prompt: Prompt, index: int, ids: Sequence[str] | None) -> Trace:
    """``trace`` with the user's prompt text (`prompt_text`) and its id (``ids[index]``, else the position)."""
    trace.prompt = prompt_text(prompt)
    trace.id = str(ids[index]) if ids is not None else str(index)
    return trace


def decoded_prefixes(tokenizer: Any, answer_ids: Sequence[int] | np.ndarray) -> list[str]:
    """``[decode(ids[:0]), …, decode(ids[:T])]``: the text of every prefix of an answer (for `char_offsets`)."""
    T = len(answer_ids)
    return list(tokenizer.batch_decode([answer_ids[:i] for i in range(T + 1)])) if T else [""]


def local_trace(
    prefixes: Sequence[str],
    answer_ids: Any,
    s: Any,
    h: Any,
    prompt_ids: Sequence[int],
    stop_reason: str,
    model_id: str,
    decoding: dict[str, Any],
    topk: tuple[np.ndarray | None, np.ndarray | None] = (None, None),
) -> Trace:
    """The trace of one answer decoded in this process (exact full-vocabulary H_t, ``entropy_kind="exact"``).
    ``prefixes`` are the decoded prefixes of the T answer tokens (`decoded_prefixes`); ``s`` / ``h`` hold
    s_t and H_t in nats (at least T values: the first T are kept); ``topk`` the optional (ids, log-probs)."""
    T = len(prefixes) - 1
    text = prefixes[T]
    offsets, strings = char_offsets(prefixes, text)
    return Trace(
        text=text,
        token_ids=np.asarray(answer_ids, dtype=np.int64)[:T],
        surprisal=np.asarray(s, dtype=np.float64)[:T],
        entropy=np.asarray(h, dtype=np.float64)[:T],
        token_strings=strings,
        offsets=offsets,
        prompt_ids=np.asarray(prompt_ids, dtype=np.int64),
        entropy_kind="exact",
        stop_reason=stop_reason,
        model_id=model_id,
        decoding=dict(decoding),
        topk_ids=topk[0],
        topk_logprobs=topk[1],
    )
