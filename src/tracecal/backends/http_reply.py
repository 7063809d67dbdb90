"""What an OpenAI-compatible server returned for one answer (`Reply`), and the `Trace` made from it.

Endpoint-independent: the HTTP backend's chat and completions requests (`tracecal.backends.http`) and its scoring
of given answers through vLLM's ``prompt_logprobs`` (`tracecal.backends.http_answers`) all end in `reply_trace`,
so every server trace gets the same top-k entropy estimate: H_t from the k log-probs of each step, sorted, with the
backend's ``entropy_estimator`` over |V| = ``vocab_size`` (`tracecal.backends.topk`); s_t = −logprob(chosen).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from tracecal.backends.defaults import END_OF_TURN_TOKENS
from tracecal.backends.http_client import LOGPROBS_HELP, HTTPBackendError, LogprobsUnavailableError
from tracecal.backends.topk import topk_entropy
from tracecal.traces.trace import Trace

__all__ = ["STOP_REASONS", "Reply", "drop_end_of_turn", "ends_with_end_of_turn", "reply_trace"]

STOP_REASONS = {"stop": "eos", "length": "length", "stopped": "stopped"}
"""A trace's ``stop_reason`` per OpenAI ``finish_reason`` (``stopped``: the caller ended a streamed answer,
`tracecal.backends.http_stream`); any other: ``unknown``."""


class Reply(NamedTuple):
    """What one request returned, endpoint-independent."""

    text: str
    tokens: list[str]
    logprobs: list[float]
    top: list[list[float]]  # per token, the top-k log-probs (any order)
    finish: str | None
    prompt_text: str
    endpoint: str


def ends_with_end_of_turn(text: str, tokens: list[str], finish: str | None) -> bool:
    """Whether the last of ``tokens`` is the end-of-turn token some servers list after a ``stop`` (vLLM:
    ``<|im_end|>``) that is not part of the answer's ``text``."""
    return finish == "stop" and bool(tokens) and tokens[-1] in END_OF_TURN_TOKENS and not text.endswith(tokens[-1])


def drop_end_of_turn(reply: Reply) -> Reply:
    """Without the end-of-turn token some servers list last (`ends_with_end_of_turn`), as the in-process backends'
    traces end before it: it is not part of the answer's text."""
    t = reply.tokens
    if ends_with_end_of_turn(reply.text, t, reply.finish):
        return reply._replace(tokens=t[:-1], logprobs=reply.logprobs[:-1], top=reply.top[: len(t) - 1])
    return reply


def reply_trace(reply: Reply, backend: Any, max_new_tokens: int | None, temperature: float) -> Trace:
    """The trace of one reply of ``backend`` (an `HTTPModel`: ``vocab_size``, ``entropy_estimator``,
    ``top_logprobs``, ``full_distribution``, ``model_id``, ``base_url``); token ids unknown (−1)."""
    reply = drop_end_of_turn(reply)
    T = len(reply.tokens)
    if len(reply.logprobs) != T:
        raise HTTPBackendError(
            f"unexpected answer from {backend.base_url}: {T} tokens but {len(reply.logprobs)} log-probs"
        )
    k = max((len(t) for t in reply.top), default=0)
    if T and not k:
        raise LogprobsUnavailableError(
            f"{backend.base_url} returned the chosen tokens' log-probs but no top-k alternatives (top_logprobs). "
            + LOGPROBS_HELP
        )
    top = np.full((T, max(k, 1)), -np.inf)
    for i, t in enumerate(reply.top[:T]):
        top[i, : len(t)] = t
    top = -np.sort(-top, axis=1)  # descending per step
    entropy = topk_entropy(top, backend.vocab_size, backend.entropy_estimator) if T else np.zeros(0)
    complete = backend.full_distribution and k >= backend.vocab_size and bool(np.isfinite(top).all())
    top = top[:, : backend.top_logprobs]  # stored per step: the head only, whatever was requested
    k = min(k, backend.top_logprobs)
    offsets = (
        np.concatenate([[0], np.cumsum([len(t) for t in reply.tokens])[:-1]]).astype(np.int64)
        if T
        else np.zeros(0, np.int64)
    )
    return Trace(
        text=reply.text,
        token_ids=np.full(T, -1, dtype=np.int64),
        surprisal=-np.asarray(reply.logprobs, dtype=np.float64),
        entropy=entropy,
        token_strings=reply.tokens,
        offsets=offsets,
        prompt=reply.prompt_text,
        entropy_kind="exact" if complete else "topk",
        stop_reason=STOP_REASONS.get(reply.finish or "", "unknown"),
        model_id=backend.model_id,
        decoding={
            "strategy": "greedy" if temperature == 0 else "sample",
            "temperature": temperature,
            "max_new_tokens": max_new_tokens,
            "top_logprobs": backend.top_logprobs,
            "full_distribution": backend.full_distribution,
            "entropy_estimator": backend.entropy_estimator,
            "vocab_size_for_tail": backend.vocab_size,
            "endpoint": reply.endpoint,
            "server": backend.base_url,
        },
        topk_logprobs=top if T and k else None,
        topk_ids=np.full((T, max(k, 1)), -1, dtype=np.int64) if T and k else None,
    )
