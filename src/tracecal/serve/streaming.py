"""Server-sent events as OpenAI sends them (``data: {chunk}\\n\\n`` … ``data: [DONE]\\n\\n``), with the running risk.

Every token chunk's choice carries ``risk``: ``{"c_trace": c_t, "risk": R_t, "tokens": t}``, the TRACE operators
over the tokens so far (`tracecal.serve.scoring`), so a client can stop reading once c_t is too low; and ``span``
(a risky span, character offsets into the content streamed so far) on the chunk whose token closed it
(`tracecal.serve.scoring.SpanTracker`: provisional; the final ``confidence.spans`` are the non-streamed ones). The last
chunk of each choice has its ``finish_reason`` (``stop``, ``length``, or ``risk`` when the server stopped on
risk) and the answer's final ``confidence`` object, identical to the non-streamed one; on chat streams also as
``logprobs.confidence`` (the token chunks' ``logprobs`` stay null unless asked for), which LangChain's
``ChatOpenAI.stream`` keeps in the last chunk's ``response_metadata`` and in the aggregated message. A failure after the
stream started is sent as ``data: {"error": {...}}`` (what the OpenAI client raises on), then the stream ends.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import numpy as np

from tracecal.serve.batching import Job
from tracecal.serve.errors import APIError
from tracecal.serve.gateway import Gateway, job_error
from tracecal.serve.scoring import SpanTracker, prefix_risks
from tracecal.traces.trace import Trace

__all__ = ["Stream", "sse"]


def sse(obj: Any) -> str:
    """One event: ``data: <json>`` and a blank line."""
    return f"data: {json.dumps(obj, ensure_ascii=False, allow_nan=False)}\n\n"


def _risk(c: float | None, r: float | None, t: int) -> dict[str, Any]:
    return {"c_trace": c, "risk": r, "tokens": t}


class Stream:
    """The event stream of one request (``chat``: chat.completion.chunk; ``text``: text_completion)."""

    def __init__(
        self, gw: Gateway, jobs: list[Job], events: asyncio.Queue[Any], req: Any, kind: str, deadline: float
    ) -> None:
        self.gw, self.jobs, self.events, self.req, self.kind, self.deadline = gw, jobs, events, req, kind, deadline
        self.id = gw.new_id("chatcmpl" if kind == "chat" else "cmpl")
        self.created = int(time.time())
        self.streamed = [0] * len(jobs)  # token chunks sent per choice
        self.usage = [0, 0]
        scorer = gw.scorer
        self.trackers = [SpanTracker(scorer.span_threshold, scorer.config) if scorer.spans else None for _ in jobs]

    def chunk(self, index: int, delta: str | None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
        if self.kind == "chat":
            d: dict[str, Any] = {} if delta is None else {"content": delta}
            choice: dict[str, Any] = {
                "index": index,
                "delta": d,
                "logprobs": extra.pop("logprobs", None),
                "finish_reason": finish,
            }
            obj = "chat.completion.chunk"
        else:
            extra.pop("logprobs", None)
            choice = {"index": index, "text": delta or "", "logprobs": None, "finish_reason": finish}
            obj = "text_completion"
        choice.update(extra)
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.gw.model_id,
            "system_fingerprint": None,
            "choices": [choice],
        }

    def token_chunk(self, index: int, text: str, logprob: float, entropy: float, risk: dict[str, Any]) -> str:
        self.streamed[index] += 1
        lp = None
        if self.kind == "chat" and getattr(self.req, "logprobs", None):
            lp = {"content": [{"token": text, "logprob": logprob, "bytes": list(text.encode()), "top_logprobs": []}]}
        tracker = self.trackers[index]
        span = None if tracker is None else tracker.add(text, -logprob, entropy)
        extra: dict[str, Any] = {"risk": risk} if span is None else {"risk": risk, "span": span}
        return sse(self.chunk(index, text, logprobs=lp, **extra))

    def replay(self, index: int, trace: Trace) -> list[str]:
        """Token chunks of a trace decoded without step hooks (llama.cpp): same risks, sent afterwards (none when the
        tokens were streamed already: step hooks, or a proxy's `tracecal.serve.relay`)."""
        if self.streamed[index] or not trace.length:
            return []
        r = prefix_risks([trace], self.gw.scorer.config)[0]
        c = np.exp(-r)
        return [
            self.token_chunk(index, tok, -float(s), float(h), _risk(float(c[t]), float(r[t]), t + 1))
            for t, (tok, s, h) in enumerate(zip(trace.token_strings, trace.surprisal, trace.entropy, strict=True))
        ]

    def final(self, job: Job, trace: Trace, finish: str) -> list[str]:
        out = self.replay(job.index, trace)
        if out:
            job.sent = "".join(trace.token_strings)
        conf = self.gw.record([(trace, finish)], [job.n_prompt], self.req.return_trace)[0]
        rest = trace.text[len(job.sent) :] if trace.text.startswith(job.sent) else ""
        self.usage[0] += job.n_prompt
        self.usage[1] += trace.length
        if rest and self.streamed[job.index]:
            out.append(sse(self.chunk(job.index, rest)))
        last = {"content": [], "confidence": conf}  # where LangChain keeps it (tracecal.serve.routes)
        out.append(
            sse(self.chunk(job.index, None if self.kind == "chat" else "", finish, confidence=conf, logprobs=last))
        )
        return out

    async def events_iter(self) -> AsyncIterator[str]:
        """The SSE body; cancels the generations when the client goes away (the generator is closed)."""
        try:
            if self.kind == "chat":
                for j in self.jobs:
                    first = self.chunk(j.index, None)
                    first["choices"][0]["delta"] = {"role": "assistant", "content": ""}
                    yield sse(first)
            pending = len(self.jobs)
            while pending:
                left = self.deadline - time.monotonic()
                if left <= 0:
                    raise APIError(
                        504,
                        f"no answer within {self.gw.config.request_timeout:g} s (--request-timeout)",
                        code="timeout",
                    )
                try:
                    index, kind, payload = await asyncio.wait_for(self.events.get(), timeout=left)
                except TimeoutError:
                    continue
                if kind == "token":
                    c, r = payload["c_trace"], payload["risk"]
                    text, lp, h = payload["text"], payload["logprob"], payload["entropy"]
                    yield self.token_chunk(index, text, lp, h, _risk(c, r, payload["tokens"]))
                    continue
                if isinstance(payload, BaseException):
                    raise job_error(payload)
                pending -= 1
                for item in self.final(self.jobs[index], *payload):
                    yield item
            if self.req.include_usage:
                usage = {
                    "prompt_tokens": self.usage[0],
                    "completion_tokens": self.usage[1],
                    "total_tokens": sum(self.usage),
                }
                yield sse(
                    {
                        "id": self.id,
                        "object": self.chunk(0, None)["object"],
                        "created": self.created,
                        "model": self.gw.model_id,
                        "choices": [],
                        "usage": usage,
                    }
                )
            yield "data: [DONE]\n\n"
        except APIError as e:
            yield sse({"error": {"message": e.message, "type": e.type, "param": e.param, "code": e.code}})
        finally:
            for j in self.jobs:
                if not j.finished:
                    j.cancelled = True
