"""Streamed answers of the OpenAI-compatible backend: each token handed to a hook as the server sends it.

When ``HTTPModel.generate`` gets ``on_token`` (a `TokenHook`), every request goes out with ``stream: true`` and
the server's server-sent events are read as they arrive: each chunk's tokens with their log-probs (chat:
``choices[0].logprobs.content[*]`` with ``token``, ``logprob``, ``top_logprobs``; completions:
``choices[0].logprobs.tokens / token_logprobs / top_logprobs``, as vLLM, llama.cpp's server and OpenAI send them)
go to the hook one by one, with s_t and the top-k estimate of H_t, and the chunks are assembled into the JSON the
same request without ``stream`` returns, so that the backend builds the very trace it builds from that answer.

A token the server lists after a ``stop`` but which is no part of the answer (``<|im_end|>``,
`tracecal.backends.http.reply.ends_with_end_of_turn`) is held back until a later token shows it is text, so the
hook sees exactly the trace's tokens. A hook that returns True ends the answer after that token: the connection
is closed (the server stops decoding it) and the answer is what came so far, with ``finish_reason`` ``stopped``.
Faults before the answer starts are retried (`tracecal.backends.http.client.RetryingClient.open_stream`); an error
event, a broken connection or an unreadable chunk after it started raise `HTTPBackendError`, never retried.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any, NamedTuple

import numpy as np

from tracecal.backends.http.client import LOGPROBS_HELP, HTTPBackendError, LogprobsUnavailableError, RetryingClient
from tracecal.backends.http.reply import ends_with_end_of_turn
from tracecal.backends.http.settings import HTTPSettings
from tracecal.backends.topk import topk_entropy

__all__ = ["StreamedToken", "TokenHook", "active_hook", "post_streamed", "streamed_each"]


class StreamedToken(NamedTuple):
    """One generated token as the server sent it."""

    row: int
    """The prompt's position among ``generate``'s prompts."""
    text: str
    """The answer's new text with this token (its string as a rule; "" while the server holds text back)."""
    token: str
    """The token's string as the server lists it."""
    surprisal: float
    """s_t = −logprob of the token (nats)."""
    entropy: float
    """H_t estimated from its top-k log-probs, as in the trace."""


TokenHook = Callable[[StreamedToken], bool]
"""Called once per token of an answer, in order, as the server sends it; True ends the answer after this token."""

_HOOK: ContextVar[tuple[TokenHook, int] | None] = ContextVar("tracecal_http_token_hook", default=None)


def active_hook() -> tuple[TokenHook, int] | None:
    """The hook and prompt index of the request being made in this context (`streamed_each`), else None."""
    return _HOOK.get()


def streamed_each(one: Callable[[int], Any], hook: TokenHook) -> Callable[[int], Any]:
    """``one(i)`` with its requests streamed to ``hook`` as prompt ``i``'s tokens (`post_streamed`)."""

    def run(i: int) -> Any:
        token = _HOOK.set((hook, i))
        try:
            return one(i)
        finally:
            _HOOK.reset(token)

    return run


class _Answer:
    """The chunks of one streamed answer so far, and what the hook has been given of them."""

    def __init__(self, settings: HTTPSettings, chat: bool, hook: TokenHook, index: int) -> None:
        self.settings, self.chat, self.hook, self.index = settings, chat, hook, index
        self.texts: list[str] = []
        self.raw: list[Any] = []  # chat: the logprobs.content items; completions: (token, logprob, top) triples
        self.tokens: list[str] = []
        self.with_logprobs = False
        self.finish: str | None = None
        self.held: list[StreamedToken] = []
        self.reported: list[str] = []  # the texts given with the tokens reported so far
        self.seen_choice = False
        self.complete = False  # [DONE] or a finish_reason came

    def event(self, data: str) -> bool:
        """One ``data:`` payload; True at ``[DONE]`` or when the hook ended the answer (after the finish chunk the
        rest is still read, so that the connection goes back to the pool)."""
        if data == "[DONE]":
            self.complete = True
            return True
        try:
            obj = json.loads(data)
        except ValueError:
            raise HTTPBackendError(f"unreadable event from the server mid-answer: {data[:200]!r}") from None
        if not isinstance(obj, dict):
            raise HTTPBackendError(f"unexpected event from the server mid-answer: {data[:200]!r}")
        if "error" in obj or obj.get("object") == "error":
            err = obj.get("error", obj)
            message = err.get("message", err) if isinstance(err, dict) else err
            raise HTTPBackendError(f"the server failed mid-answer ({len(self.reported)} tokens in): {message}")
        choices = obj.get("choices") or []
        return self.choice(choices[0], "delta") if choices else False  # no choices: a usage chunk

    def choice(self, choice: dict[str, Any], field: str) -> bool:
        """One chunk's choice (``field``: ``delta`` for a chunk, ``message`` for a whole chat answer)."""
        self.seen_choice = True
        text = ((choice.get(field) or {}).get("content") if self.chat else choice.get("text")) or ""
        self.texts.append(text)
        self.finish = choice.get("finish_reason") or self.finish
        if self.finish == "error":
            raise HTTPBackendError(f"the server failed mid-answer ({len(self.reported)} tokens in): finish 'error'")
        new = self._tokens(choice.get("logprobs"))
        strings = [t for t, _, _ in new]
        per = strings if "".join(strings) == text or not new else [""] * (len(new) - 1) + [text]
        for (tok, lp, top), piece in zip(new, per, strict=True):
            if not top:
                raise LogprobsUnavailableError(
                    f"{self.settings.base_url} streamed a token's log-prob but no top-k alternatives. " + LOGPROBS_HELP
                )
            top_sorted = -np.sort(-np.asarray([top], dtype=np.float64))
            h = topk_entropy(top_sorted, self.settings.vocab_size, self.settings.entropy_estimator)[0]
            if self._offer(StreamedToken(self.index, piece, tok, -lp, float(h))):
                return True
        if self.finish is not None and not self.complete:
            self.complete = True
            self._end()
        return False

    def _tokens(self, logprobs: Any) -> list[tuple[str, float, list[float]]]:
        """The chunk's tokens (string, log-prob, top-k log-probs), kept raw for the assembled answer."""
        if not logprobs:
            return []
        self.with_logprobs = True
        if self.chat:
            items = list(logprobs.get("content") or [])
            self.raw += items
            new = [
                (c["token"], float(c["logprob"]), [float(t["logprob"]) for t in c.get("top_logprobs") or []])
                for c in items
            ]
        else:
            tops = logprobs.get("top_logprobs") or [None] * len(logprobs.get("tokens") or [])
            triples = list(zip(logprobs.get("tokens") or [], logprobs.get("token_logprobs") or [], tops, strict=True))
            self.raw += triples
            new = [(t, float(lp), [float(v) for v in (d or {}).values()]) for t, lp, d in triples]
        self.tokens += [t for t, _, _ in new]
        return new

    def _offer(self, tok: StreamedToken) -> bool:
        """Report ``tok`` (and the held tokens before it); hold an end-of-turn token until its fate is known."""
        for held in self.held:
            if self._report(held):
                return True
        self.held = []
        if ends_with_end_of_turn("", [tok.token], "stop"):
            self.held = [tok]
            return False
        return self._report(tok)

    def _report(self, tok: StreamedToken) -> bool:
        self.reported.append(tok.text)
        if self.hook(tok):
            self.finish = "stopped"
            return True
        return False

    def _end(self) -> None:
        """The answer is complete: report a held token unless the trace drops it."""
        held, self.held = self.held, []
        if held and not ends_with_end_of_turn("".join(self.texts), self.tokens, self.finish):
            self._report(held[0])

    def answer(self) -> dict[str, Any]:
        """The JSON the same request without ``stream`` returns (cut at the last reported token when stopped)."""
        if not self.seen_choice:
            return {"choices": []}
        raw, text = self.raw, "".join(self.texts)
        if self.finish == "stopped":
            raw, text = raw[: len(self.reported)], "".join(self.reported)
        elif self.finish is None:
            self._end()
        listed = self.with_logprobs or not text
        if self.chat:
            lp: Any = {"content": raw} if listed else None
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": lp}
        else:
            tokens, logprobs, tops = (list(x) for x in zip(*raw, strict=True)) if raw else ([], [], [])
            lp = {"tokens": tokens, "token_logprobs": logprobs, "top_logprobs": tops} if listed else None
            choice = {"index": 0, "text": text, "logprobs": lp}
        return {"choices": [choice | {"finish_reason": self.finish}]}


def post_streamed(
    http: RetryingClient, settings: HTTPSettings, path: str, body: dict[str, Any], hook: TokenHook, index: int
) -> dict[str, Any]:
    """``POST path`` with ``stream: true`` through ``http``, each token to ``hook`` as prompt ``index``'s while the
    events arrive (H_t estimated as ``settings`` say); the answer as the same request without ``stream`` returns it
    (a server that answers with one JSON object instead of events is read as one chunk)."""
    import httpx

    answer = _Answer(settings, path.endswith("/chat/completions"), hook, index)
    r = http.open_stream(path, body | {"stream": True})
    try:
        if not r.headers.get("content-type", "").startswith("text/event-stream"):
            r.read()
            choices = http.decode(path, r).get("choices") or []
            if choices:
                answer.choice(choices[0], "message")
        else:
            for line in _data(r.iter_lines()):
                if answer.event(line):
                    break
            if not answer.complete and answer.finish != "stopped":
                raise HTTPBackendError(
                    f"{settings.base_url}{path}: the stream ended after {len(answer.reported)} tokens without a "
                    "finish_reason or [DONE]"
                )
    except httpx.HTTPError as e:
        raise HTTPBackendError(
            f"{settings.base_url}{path}: the stream broke after {len(answer.reported)} tokens ({type(e).__name__}: {e})"
        ) from e
    finally:
        r.close()
    return answer.answer()


def _data(lines: Iterator[str]) -> Iterator[str]:
    """The ``data:`` payloads of server-sent event lines (comments, ``event:`` and blank lines skipped)."""
    for line in lines:
        if line.startswith("data:"):
            yield line[5:].strip()
