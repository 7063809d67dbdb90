"""``POST /v1/score-answers``: the confidence of answers a user already has (logged, written by a person, another
model's), by teacher forcing through the served model (`tracecal.backends.answers`: what such a trace means).

Body: ``{"model", "items": [{"prompt": text | "messages": [...], "answer": text, "id"?}, ...], "return_trace"?}``
(`tracecal.serve.schemas.ScoreAnswersRequest`; ``prompt`` text is one user turn in the chat template, as
``tracecal score-answers`` reads it). Answer, per item in order::

    {"index", "id", "tokens", "stop_reason", "mean_surprisal", "mean_entropy", "end_prob", "confidence"}

``tokens`` T of the answer; ``stop_reason`` what greedy decoding would have recorded (``eos``, ``unknown``: the
model would have gone on, …); ``mean_surprisal`` = (1/T) Σ_t s_t and ``mean_entropy`` = (1/T) Σ_t H_t in nats
(null for an empty answer); ``end_prob`` = Σ_{v ∈ stop ids} P(v | prompt, answer) (null where the backend does
not give it); ``confidence`` the object the chat endpoint gives (c_TRACE, the calibrated probability when a
calibrator is loaded, abstain; ``trace`` with ``return_trace``). Plus ``usage``: prompt and answer tokens.

Limits, each a 400 OpenAI error naming the item (``param`` ``items[i].answer`` …): at most ``--max-prompts`` items,
prompts of at most ``--max-prompt-tokens`` tokens, answers of at most ``--max-tokens`` tokens, prompt + answer
within the model's context (counted where the backend has a tokenizer: in-process); the body size as everywhere
(413). The answers are traced in the batching worker, between generation batches (one job per request; queue
full: 503; ``--request-timeout``: 504). Scored answers do not feed the drift alarm (they need not come from the
served traffic).
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import numpy as np
from fastapi import APIRouter, Request

from tracecal.backends.answers import answer_token_ids
from tracecal.serve.batching import Job
from tracecal.serve.errors import APIError
from tracecal.serve.gateway import Gateway
from tracecal.serve.routes import ERRORS
from tracecal.serve.schemas import AnswerItem, ScoreAnswersRequest
from tracecal.traces.trace import Trace

__all__ = ["answers_router", "trace_summary"]


def _mean(x: np.ndarray) -> float | None:
    return float(np.mean(x)) if len(x) else None


def trace_summary(t: Trace) -> dict[str, Any]:
    """``tokens``, ``stop_reason``, ``mean_surprisal`` and ``mean_entropy`` (nats, null when empty), ``end_prob``."""
    end = t.meta.get("end_prob")
    return {
        "tokens": t.length,
        "stop_reason": t.stop_reason,
        "mean_surprisal": _mean(t.surprisal),
        "mean_entropy": _mean(t.entropy),
        "end_prob": None if end is None or not np.isfinite(end) else float(end),
    }


def _item_error(i: int, field: str, e: APIError) -> APIError:
    return APIError(e.status, f"items[{i}]: {e.message}", param=f"items[{i}].{field}", code=e.code)


async def _encode(gw: Gateway, i: int, item: AnswerItem) -> tuple[Any, int, int, str | list[int]]:
    """(what the backend gets as the prompt, prompt tokens, answer tokens, the answer as the backend gets it) of
    item ``i``, the limits checked. With a tokenizer (in-process) the answer is tokenised here once and handed on as
    ids; without one (behind ``--upstream``) it stays text, the token counts are 0 and the upstream counts."""
    field = "prompt" if item.prompt is not None else "messages"
    tok, check = getattr(gw.model, "tokenizer", None), getattr(gw.model, "check_prompt", None)
    try:
        if tok is None and check is not None:  # behind --upstream without --tokenizer: no special-token string
            check([], item.answer)
        answer = item.answer if tok is None else await asyncio.to_thread(answer_token_ids, tok, item.answer)
    except ValueError as e:  # text the tokenizer refuses
        raise APIError(400, f"items[{i}]: {e}", param=f"items[{i}].answer", code="invalid_value") from e
    n_answer = 0 if tok is None else len(answer)
    limit = gw.config.max_tokens
    if n_answer > limit:
        raise APIError(
            400,
            f"items[{i}]: the answer has {n_answer} tokens; this server scores at most {limit} (--max-tokens)",
            param=f"items[{i}].answer",
            code="context_length_exceeded",
        )
    try:
        prompt, n_prompt = await gw.encode(item.prompt_value(), "chat", 0)
    except APIError as e:
        raise _item_error(i, field, e) from e
    ctx = getattr(gw.model, "context_length", None)
    if n_prompt and isinstance(ctx, int) and n_prompt + n_answer + 1 > ctx:
        raise APIError(
            400,
            f"items[{i}]: the prompt ({n_prompt} tokens) and the answer ({n_answer}) with the position after it "
            f"exceed the model's context of {ctx} tokens",
            param=f"items[{i}].answer",
            code="context_length_exceeded",
        )
    return prompt, n_prompt, n_answer, answer


def answers_router(gw: Gateway) -> APIRouter:
    """``POST /v1/score-answers`` bound to one gateway."""
    router = APIRouter(prefix="/v1", responses=ERRORS)  # 400 unsupported: cannot score answers

    @router.post("/score-answers", summary="Trace summary and confidence of answers you already have")
    async def score_answers(req: ScoreAnswersRequest, request: Request) -> dict[str, Any]:
        gw.check(request, req.model)
        if len(req.items) > gw.config.max_prompts:
            raise APIError(
                400,
                f"{len(req.items)} items in one request; this server accepts at most {gw.config.max_prompts} "
                "(--max-prompts)",
                param="items",
                code="invalid_value",
            )
        encoded = [await _encode(gw, i, item) for i, item in enumerate(req.items)]
        ids = [item.id if item.id is not None else str(i) for i, item in enumerate(req.items)]
        loop = asyncio.get_running_loop()
        job = Job(
            prompt=([e[0] for e in encoded], [e[3] for e in encoded], ids),
            max_tokens=max(e[2] for e in encoded),
            loop=loop,
            future=loop.create_future(),
            kind="answers",
            n_prompt=sum(e[1] for e in encoded),
        )
        gw.batcher.submit([job])
        traces = cast(list[Trace], (await gw.wait([job], request))[0])
        confs = gw.scorer.confidence(traces, req.return_trace)
        data = [
            {"index": i, "id": item.id, **trace_summary(t), "confidence": conf}
            for i, (item, t, conf) in enumerate(zip(req.items, traces, confs, strict=True))
        ]
        n_prompt, n_answer = job.n_prompt, sum(t.length for t in traces)
        usage = {"prompt_tokens": n_prompt, "answer_tokens": n_answer, "total_tokens": n_prompt + n_answer}
        return {"object": "list", "model": gw.model_id, "data": data, "usage": usage}

    return router
