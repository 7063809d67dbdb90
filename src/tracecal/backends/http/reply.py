"""What an OpenAI-compatible server returned for one answer (`Reply`, read from a chat or a completions choice), and
the `Trace` made from it.

Endpoint-independent: the HTTP backend's chat and completions requests (`tracecal.backends.http.model`) and its
scoring of given answers through vLLM's ``prompt_logprobs`` (`tracecal.backends.http.answers`) all end in
`reply_trace`, so every server trace gets the same top-k entropy estimate: H_t from the k log-probs of each step,
sorted, with the settings' ``entropy_estimator`` over |V| = ``vocab_size`` (`tracecal.backends.topk`);
s_t = −logprob(chosen).
"""

from __future__ import annotations

from typing import Any, NamedTuple, NoReturn

import numpy as np

from tracecal.backends.defaults import END_OF_TURN_TOKENS
from tracecal.backends.http.client import LOGPROBS_HELP, HTTPBackendError, LogprobsUnavailableError
from tracecal.backends.http.settings import HTTPSettings
from tracecal.backends.topk import topk_entropy
from tracecal.traces.trace import Trace

__all__ = [
    "STOP_REASONS",
    "Reply",
    "chat_reply",
    "completion_reply",
    "drop_end_of_turn",
    "ends_with_end_of_turn",
    "no_logprobs",
    "reply_trace",
]

STOP_REASONS = {"stop": "eos", "length": "length", "stopped": "stopped"}
"""A trace's ``stop_reason`` per OpenAI ``finish_reason`` (``stopped``: the caller ended a streamed answer,
`tracecal.backends.http.stream`); any other: ``unknown``."""


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


def no_logprobs(settings: HTTPSettings, what: str) -> NoReturn:
    """`LogprobsUnavailableError`: the server at ``settings.base_url`` returned ``what`` instead of log-probs."""
    raise LogprobsUnavailableError(f"{settings.base_url} returned {what}. {LOGPROBS_HELP}")


def chat_reply(choice: dict[str, Any], messages: list[dict[str, str]], settings: HTTPSettings) -> Reply:
    """The `Reply` of a ``/chat/completions`` choice (``logprobs.content``: token, logprob, top_logprobs)."""
    content = (choice.get("logprobs") or {}).get("content")
    text = (choice.get("message") or {}).get("content") or ""
    if content is None or (not content and text):
        no_logprobs(settings, "no log-probs (choices[0].logprobs.content is missing)")
    return Reply(
        text=text,
        tokens=[c["token"] for c in content],
        logprobs=[float(c["logprob"]) for c in content],
        top=[[float(t["logprob"]) for t in c.get("top_logprobs") or []] for c in content],
        finish=choice.get("finish_reason"),
        prompt_text="\n".join(f"{m['role']}: {m['content']}" for m in messages),
        endpoint="chat",
    )


def completion_reply(choice: dict[str, Any], prompt_text: str, settings: HTTPSettings) -> Reply:
    """The `Reply` of a ``/completions`` choice (``logprobs``: tokens, token_logprobs, top_logprobs)."""
    lp = choice.get("logprobs")
    if not lp or lp.get("token_logprobs") is None:
        no_logprobs(settings, "no log-probs (choices[0].logprobs.token_logprobs is missing)")
    return Reply(
        text=choice.get("text") or "",
        tokens=list(lp["tokens"]),
        logprobs=[float(x) for x in lp["token_logprobs"]],
        top=[[float(v) for v in (d or {}).values()] for d in lp.get("top_logprobs") or []],
        finish=choice.get("finish_reason"),
        prompt_text=prompt_text,
        endpoint="completions",
    )


def reply_trace(
    reply: Reply, settings: HTTPSettings, model_id: str, max_new_tokens: int | None, temperature: float
) -> Trace:
    """The trace of one reply from the server of ``settings`` (``vocab_size``, ``entropy_estimator``,
    ``top_logprobs``, ``full_distribution``, ``base_url``), serving ``model_id``; token ids unknown (−1)."""
    reply = drop_end_of_turn(reply)
    T = len(reply.tokens)
    if len(reply.logprobs) != T:
        raise HTTPBackendError(
            f"unexpected answer from {settings.base_url}: {T} tokens but {len(reply.logprobs)} log-probs"
        )
    k = max((len(t) for t in reply.top), default=0)
    if T and not k:
        raise LogprobsUnavailableError(
            f"{settings.base_url} returned the chosen tokens' log-probs but no top-k alternatives (top_logprobs). "
            + LOGPROBS_HELP
        )
    top = np.full((T, max(k, 1)), -np.inf)
    for i, t in enumerate(reply.top[:T]):
        top[i, : len(t)] = t
    top = -np.sort(-top, axis=1)  # descending per step
    entropy = topk_entropy(top, settings.vocab_size, settings.entropy_estimator) if T else np.zeros(0)
    complete = settings.full_distribution and k >= settings.vocab_size and bool(np.isfinite(top).all())
    top = top[:, : settings.top_logprobs]  # stored per step: the head only, whatever was requested
    k = min(k, settings.top_logprobs)
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
        model_id=model_id,
        decoding={
            "strategy": "greedy" if temperature == 0 else "sample",
            "temperature": temperature,
            "max_new_tokens": max_new_tokens,
            "top_logprobs": settings.top_logprobs,
            "full_distribution": settings.full_distribution,
            "entropy_estimator": settings.entropy_estimator,
            "vocab_size_for_tail": settings.vocab_size,
            "endpoint": reply.endpoint,
            "server": settings.base_url,
        },
        topk_logprobs=top if T and k else None,
        topk_ids=np.full((T, max(k, 1)), -1, dtype=np.int64) if T and k else None,
    )
