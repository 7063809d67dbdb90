"""The OpenAI-compatible routes: ``POST /v1/chat/completions``, ``POST /v1/completions``, ``GET /v1/models``.

Responses are OpenAI's, and each choice gains ``confidence`` (`tracecal.serve.scoring.Scorer.confidence`):
``{"c_trace", "risk", "probability", "calibrator", "abstain", "abstain_below", "tokens", "entropy_kind", "spans"}``
(``spans``: the risky spans, character offsets into the returned content, `tracecal.signals.spans`)
plus ``trace`` (tokens, surprisal, entropy) when the request sets ``return_trace``. A chat choice's ``logprobs``
is always an object, ``{"content": [...], "confidence": {...}}`` (the token list empty unless ``logprobs: true``),
so that clients which keep only OpenAI's fields (LangChain) still carry the confidence.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from tracecal.serve.errors import APIError
from tracecal.serve.gateway import Gateway
from tracecal.serve.schemas import ChatCompletionRequest, CompletionRequest
from tracecal.serve.streaming import Stream
from tracecal.traces.trace import Trace

__all__ = ["openai_router"]

ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"description": what}
    for code, what in (
        (400, "invalid request (OpenAI error object)"),
        (401, "missing or wrong bearer token"),
        (404, "unknown model, or a server without one (--no-model)"),
        (413, "request body too large"),
        (415, "body not sent as JSON (Content-Type: application/json)"),
        (503, "queue full (Retry-After)"),
        (504, "request timeout"),
    )
}


def _logprobs(trace: Trace, conf: dict[str, Any], tokens: bool) -> dict[str, Any]:
    """A chat choice's ``logprobs``: each token's log-prob when the request asks (``logprobs: true``; else an empty
    list) and the choice's ``confidence`` again, the one place LangChain's ``ChatOpenAI`` keeps (it drops unknown
    choice fields; ``AIMessage.response_metadata["logprobs"]["confidence"]``, see `tracecal.serve.streaming`)."""
    content = [
        {"token": tok, "logprob": -float(s), "bytes": list(tok.encode()), "top_logprobs": []}
        for tok, s in zip(trace.token_strings, trace.surprisal, strict=True)
    ]
    return {"content": content if tokens else [], "confidence": conf}


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


async def _run(gw: Gateway, request: Request, req: Any, kind: str, prompts: list[Any]) -> Any:
    """Encode, queue, then answer (a JSON body) or stream (SSE); the common part of both endpoints."""
    gw.check(request, req.model)
    if len(prompts) > gw.config.max_prompts:
        raise APIError(
            400,
            f"{len(prompts)} prompts in one request; this server accepts at most "
            f"{gw.config.max_prompts} (--max-prompts)",
            param="prompt",
            code="invalid_value",
        )
    max_tokens = gw.budget(req.token_budget)
    encoded = [await gw.encode(p, kind, max_tokens) for p in prompts]
    events: asyncio.Queue[Any] | None = asyncio.Queue() if req.stream else None
    jobs = [gw.job(p, n, kind, req, max_tokens, i, events) for i, (p, n) in enumerate(encoded)]
    gw.batcher.submit(jobs)
    if events is not None:
        stream = Stream(gw, jobs, events, req, kind, gw.deadline(request))
        return StreamingResponse(
            stream.events_iter(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    results = await gw.wait(jobs, request)
    confs = gw.record(results, [n for _, n in encoded], req.return_trace)
    return results, confs, sum(n for _, n in encoded)


def _completion(
    gw: Gateway, request: Request, kind: str, choices: list[dict[str, Any]], n_prompt: int, results: list[Any]
) -> dict[str, Any]:
    """The OpenAI response object of either endpoint (``kind``: ``chat.completion`` or ``text_completion``)."""
    return {
        "id": gw.new_id("chatcmpl" if kind == "chat.completion" else "cmpl"),
        "object": kind,
        "created": int(request.state.created),
        "model": gw.model_id,
        "system_fingerprint": None,
        "choices": choices,
        "usage": _usage(n_prompt, sum(t.length for t, _ in results)),
    }


def openai_router(gw: Gateway) -> APIRouter:
    """The /v1 routes bound to one gateway."""
    router = APIRouter(prefix="/v1", responses=ERRORS)

    @router.post("/chat/completions", summary="Chat completion with a confidence per choice")
    async def chat_completions(req: ChatCompletionRequest, request: Request) -> Any:
        out = await _run(gw, request, req, "chat", [req.prompt_messages()])
        if isinstance(out, StreamingResponse):
            return out
        results, confs, n_prompt = out
        choices = [
            {
                "index": i,
                "message": {"role": "assistant", "content": t.text, "refusal": None},
                "logprobs": _logprobs(t, conf, bool(req.logprobs)),
                "finish_reason": finish,
                "confidence": conf,
            }
            for i, ((t, finish), conf) in enumerate(zip(results, confs, strict=True))
        ]
        return _completion(gw, request, "chat.completion", choices, n_prompt, results)

    @router.post("/completions", summary="Text completion (no chat template) with a confidence per choice")
    async def completions(req: CompletionRequest, request: Request) -> Any:
        out = await _run(gw, request, req, "text", req.prompts())
        if isinstance(out, StreamingResponse):
            return out
        results, confs, n_prompt = out
        choices = [
            {"index": i, "text": t.text, "logprobs": None, "finish_reason": finish, "confidence": conf}
            for i, ((t, finish), conf) in enumerate(zip(results, confs, strict=True))
        ]
        return _completion(gw, request, "text_completion", choices, n_prompt, results)

    def card() -> dict[str, Any]:
        return {"id": gw.model_id, "object": "model", "created": gw.created, "owned_by": "tracecal"}

    @router.get("/models", summary="The served model")
    async def models(request: Request) -> dict[str, Any]:
        gw.auth.check(request)
        return {"object": "list", "data": [] if gw.model is None else [card()]}

    @router.get("/models/{model_id:path}", summary="One model")
    async def model(model_id: str, request: Request) -> dict[str, Any]:
        gw.auth.check(request)
        if gw.model is None or model_id != gw.model_id:
            raise APIError(
                404, f"the model '{model_id}' does not exist on this server", param="model", code="model_not_found"
            )
        return card()

    return router
