"""Given answers scored by a vLLM server: the answer appended to the prompt, read back with ``prompt_logprobs``.

vLLM's OpenAI-compatible server takes ``prompt_logprobs=k`` on ``/v1/completions`` (one of its documented extra
parameters) and returns, for every prompt token, the log-prob of that token and of the k most likely tokens at its
position: ``choices[0].prompt_logprobs``, a list with ``null`` for the first token and then
``{"<token id>": {"logprob": …, "rank": …, "decoded_token": …}}`` per token. `HTTPModel.trace_answers
<tracecal.backends.http.model.HTTPModel.trace_answers>` uses it so:

1. the prompt's ids come from vLLM's ``/tokenize`` (at the server root, beside ``/v1``): ``messages`` with
   ``add_generation_prompt`` for chat prompts, the ``prompt`` text otherwise, as ``/chat/completions`` and
   ``/completions`` tokenize them when they generate; a text answer's ids likewise, without special tokens. With
   the backend's ``tokenizer`` both are tokenised here instead, user text as text
   (`tracecal.backends.http.prompt`); without one, a special-token string in them is refused;
2. prompt ids + answer ids go as the prompt of one ``/v1/completions`` request (``max_tokens=1``, temperature 0,
   ``prompt_logprobs=k``);
3. s_t = −logprob(a_t); H_t is estimated from the log-probs of rank ≤ k with the backend's ``entropy_estimator``,
   the same estimate as for generated answers (``entropy_kind="topk"``; exact with ``full_distribution``); the
   one generated token says whether the model would have ended the answer there (``finish_reason="stop"``).

A server without ``/tokenize`` or ``prompt_logprobs`` (llama.cpp's server, TGI, OpenAI's API) cannot score a given
answer: `BackendUnsupportedError`, naming what is missing and what to use instead.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from tracecal.backends.answers import AnswerArgs, end_reason
from tracecal.backends.arguments import Prompt
from tracecal.backends.base import BackendUnsupportedError, prompt_text
from tracecal.backends.defaults import END_OF_TURN_TOKENS
from tracecal.backends.http.client import HTTPBackendError, RetryingClient
from tracecal.backends.http.prompt import check_prompt
from tracecal.backends.http.reply import Reply, reply_trace
from tracecal.backends.http.settings import HTTPSettings
from tracecal.backends.prompting import prompt_ids, user_text_ids
from tracecal.traces.trace import Trace

__all__ = ["UNSUPPORTED", "ScoredAnswer", "answer_trace", "prompt_ids_of", "root_client", "score_answer", "tokenize"]

UNSUPPORTED = (
    "scoring given answers (trace_answers) over HTTP needs a vLLM server: its /tokenize endpoint and the "
    "prompt_logprobs parameter of /v1/completions. {server} {why}; llama.cpp's server, TGI and OpenAI's API offer "
    "no log-probs of a given text. Use the same weights in process instead (backend='hf' or 'llamacpp')."
)
"""The message of the `BackendUnsupportedError` of servers that cannot score answers."""


class ScoredAnswer(NamedTuple):
    """What vLLM returned for one prompt + answer."""

    prompt_ids: list[int]
    answer_ids: list[int]
    tokens: list[str]
    """The answer tokens' text (``decoded_token``), up to a trailing end-of-turn token."""
    logprobs: list[float]
    """log P(a_t | prompt, a_<t), nats."""
    top: list[list[float]]
    """Per answer token, the log-probs of rank ≤ k at its position."""
    next_text: str
    """The text of the greedy token after the answer ("" when it is a stop token)."""
    finish: str | None
    """``finish_reason`` of that one token: ``"stop"`` when the model would end the answer there."""
    ended: bool
    """The given answer held an end-of-turn token (the answer ends before it)."""


def root_client(http: RetryingClient) -> RetryingClient:
    """A client for the server root (``/tokenize``) with ``http``'s settings and connection pool."""
    root = http.base_url.removesuffix("/v1")
    return RetryingClient(
        root,
        http.timeout,
        http.max_retries,
        http.backoff,
        http.max_wait,
        http.client,
        1,
        http.sleep,
        http.clock,
        http.rng,
    )


def _unsupported(server: str, why: str) -> BackendUnsupportedError:
    return BackendUnsupportedError(UNSUPPORTED.format(server=server, why=why))


def tokenize(root: RetryingClient, body: dict[str, Any]) -> list[int]:
    """The ids vLLM's ``POST /tokenize`` gives for ``body``; `BackendUnsupportedError` if the server has none."""
    try:
        out = root.request("POST", "/tokenize", body)
    except HTTPBackendError as e:
        if any(f"HTTP {code}" in str(e) for code in (404, 405, 501)):
            raise _unsupported(root.base_url, "has no /tokenize endpoint") from e
        raise
    tokens = out.get("tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
        raise _unsupported(root.base_url, f"answered /tokenize without a list of token ids ({str(out)[:80]})")
    return tokens


def prompt_ids_of(root: RetryingClient, model: str, prompt: Prompt, chat: bool) -> list[int]:
    """The ids vLLM feeds for ``prompt`` (already-encoded ``prompt_ids`` are taken as given)."""
    if isinstance(prompt, dict):
        if prompt.get("prompt_ids") is not None:
            return [int(i) for i in prompt["prompt_ids"]]
        prompt = prompt.get("messages") or prompt.get("prompt") or ""
    if isinstance(prompt, list) or chat:
        messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
        return tokenize(root, {"model": model, "messages": messages, "add_generation_prompt": True})
    return tokenize(root, {"model": model, "prompt": prompt})


def _answer_rows(entries: list[Any], answer_ids: list[int], k: int) -> tuple[list[str], list[float], list[list[float]]]:
    tokens, logprobs, top = [], [], []
    for a, entry in zip(answer_ids, entries, strict=True):
        mine = entry[str(a)]
        if mine.get("decoded_token") in END_OF_TURN_TOKENS:
            break  # an end-of-turn token ends the answer, as in generated traces
        tokens.append(str(mine.get("decoded_token") or ""))
        logprobs.append(float(mine["logprob"]))
        ranked = [v for v in entry.values() if v.get("rank") is None or int(v["rank"]) <= k]
        top.append(sorted((float(v["logprob"]) for v in ranked), reverse=True))
    return tokens, logprobs, top


def score_answer(
    http: RetryingClient,
    root: RetryingClient,
    body: dict[str, Any],
    prompt_ids: list[int],
    answer_ids: list[int],
    k: int,
) -> ScoredAnswer:
    """One ``/v1/completions`` request over prompt + answer with ``prompt_logprobs=k`` (``body``: the model name
    and the backend's extra fields); the answer's rows of what it returns."""
    req = body | {"prompt": [*prompt_ids, *answer_ids], "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": k}
    out = http.request("POST", "/completions", req)
    choice = (out.get("choices") or [{}])[0]
    entries = choice.get("prompt_logprobs") or out.get("prompt_logprobs")
    if not isinstance(entries, list) or len(entries) != len(prompt_ids) + len(answer_ids):
        raise _unsupported(http.base_url, "returned no prompt_logprobs (one entry per prompt token)")
    try:
        tokens, logprobs, top = _answer_rows(entries[len(prompt_ids) :], answer_ids, k)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise HTTPBackendError(f"unexpected prompt_logprobs from {http.base_url}: {type(e).__name__}: {e}") from e
    finish = choice.get("finish_reason")
    next_text = "" if finish == "stop" else str(choice.get("text") or "")
    ended = len(tokens) < len(answer_ids)
    return ScoredAnswer(prompt_ids, answer_ids[: len(tokens)], tokens, logprobs, top, next_text, finish, ended)


def answer_trace(
    settings: HTTPSettings, http: RetryingClient, root: RetryingClient, name: str, args: AnswerArgs, i: int
) -> Trace:
    """The trace of answer ``i`` of ``args`` from the server of ``settings`` serving ``name`` (``http``: its API,
    ``root``: its root, `root_client`), by `score_answer` (module docstring): `reply_trace`'s top-k entropy estimate,
    vLLM's token ids, the stop reason of `tracecal.backends.answers`. With the settings' ``tokenizer`` the prompt and
    a text answer are tokenised here, as text (`tracecal.backends.prompting.prompt_ids`, `user_text_ids`), not by
    ``/tokenize``; without one a special-token string in them is refused (`tracecal.backends.http.prompt`)."""
    prompt, answer = args.prompts[i], args.answers[i]
    tok = settings.tokenizer
    check_prompt(settings, prompt, answer)  # without a tokenizer: no special-token string sent as text
    p_ids = (
        prompt_ids(tok, prompt, settings.chat) if tok is not None else prompt_ids_of(root, name, prompt, settings.chat)
    )
    if isinstance(answer, str):
        a_ids = (
            user_text_ids(tok, answer, "the answer")
            if tok is not None
            else tokenize(root, {"model": name, "prompt": answer, "add_special_tokens": False})
        )
    else:
        a_ids = [int(x) for x in answer]
    body = settings.extra_body | {"model": name}
    sc = score_answer(http, root, body, p_ids, a_ids, settings.requested_logprobs)
    text = answer if isinstance(answer, str) and not sc.ended else "".join(sc.tokens)
    reply = Reply(text, sc.tokens, sc.logprobs, sc.top, "length", prompt_text(prompt), "completions")
    t = reply_trace(reply, settings, name, args.max_new_tokens, 0.0)
    t.token_ids, t.prompt_ids = np.asarray(sc.answer_ids, np.int64), np.asarray(p_ids, np.int64)
    t.stop_reason = end_reason(len(sc.answer_ids), sc.ended, sc.finish == "stop", lambda: text + sc.next_text, args)
    t.decoding |= {"strategy": "teacher_forced", "endpoint": "completions (prompt_logprobs)"}
    t.decoding |= {"stop_strings": list(args.stop_strings)}
    return t
