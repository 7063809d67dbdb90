"""A confidence service (FastAPI): generate answers with their confidence, or score traces you already have.

Endpoints:

* ``GET  /health`` — model id, whether a TRACE+ calibrator is loaded.
* ``POST /score``  — ``{"surprisal": [[…], …], "entropy": [[…], …]}`` (per-token nats, one list per answer)
  → ``{"trace_confidence": […], "trace_plus": […] | null}``. Zero-token answers give ``null``.
* ``POST /generate`` — ``{"prompts": [...], "max_new_tokens": 32}`` → per answer the text, token strings,
  s_t, H_t, c_TRACE and (with a calibrator) the TRACE+ probability. Needs a model. A prompt is a string
  or a list of ``{"role": "system"|"user"|"assistant", "content": str}``; ``max_new_tokens`` an integer
  1-4096 (not a string or a float).

Bad requests get 422 with a JSON ``detail`` that names the field (unknown fields are refused too): values
that are not finite non-negative numbers, an empty list of answers or prompts, surprisal and entropy of
different lengths, a malformed chat message, a prompt too long for the model.

Run: ``tracecal serve --port 8000 [--calibrator cal.json] [--model ID]`` (binds 127.0.0.1 by default).
"""

import math
from typing import Annotated, Any, Literal

import numpy as np
from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, model_validator

from tracecal.backends.http import HTTPBackendError
from tracecal.operators import trace_confidence
from tracecal.trace import TraceBatch

#: A per-token value in nats: a JSON number (not a string or a bool), finite, ≥ 0.
Nats = Annotated[float, Field(strict=True, ge=0, allow_inf_nan=False)]


class ScoreRequest(BaseModel):
    """Traces you already have: per answer, per token s_t and H_t (an empty list is a zero-token answer)."""

    model_config = ConfigDict(extra="forbid")

    surprisal: list[list[Nats]] = Field(..., min_length=1, description="per answer, per token s_t = −log p_t (nats)")
    entropy: list[list[Nats]] = Field(..., min_length=1, description="per answer, per token H_t (nats)")

    @model_validator(mode="after")
    def _same_shape(self) -> "ScoreRequest":
        if len(self.surprisal) != len(self.entropy):
            raise ValueError(
                f"surprisal has {len(self.surprisal)} answers but entropy has {len(self.entropy)}: send one list "
                "per answer in each"
            )
        for i, (s, h) in enumerate(zip(self.surprisal, self.entropy, strict=True)):
            if len(s) != len(h):
                raise ValueError(f"answer {i}: {len(s)} surprisal values but {len(h)} entropy values (one per token)")
        return self


class ChatMessage(BaseModel):
    """One chat message: ``{"role": "system" | "user" | "assistant", "content": "..."}``."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "user", "assistant"]
    content: StrictStr


class GenerateRequest(BaseModel):
    """Prompts (plain strings or chat message lists) and the answer length limit (an integer, 1-4096)."""

    model_config = ConfigDict(extra="forbid")

    prompts: list[StrictStr | Annotated[list[ChatMessage], Field(min_length=1)]] = Field(..., min_length=1)
    max_new_tokens: StrictInt = Field(32, ge=1, le=4096)


def _validation_detail(errors: Any) -> list[dict[str, Any]]:
    """pydantic's errors without the echoed input (which may be NaN, not valid JSON, or the whole body)."""
    out = []
    for e in errors:
        msg = str(e.get("msg", "invalid value")).removeprefix("Value error, ")
        loc = [x if isinstance(x, int | str) else str(x) for x in e.get("loc", ())]
        out.append({"loc": loc, "msg": msg, "type": str(e.get("type", ""))})
    return out


def _nullable(x: np.ndarray) -> list[float | None]:
    return [float(v) if math.isfinite(v) else None for v in np.asarray(x, dtype=np.float64)]


def create_app(model: Any = None, calibrator: Any = None, max_prompts: int = 256) -> Any:
    """The FastAPI app. ``model``: a tracecal backend (or None: /generate answers 503)."""
    app = FastAPI(title="tracecal", description="Single-pass decoding-trace confidence for LLM answers")

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(status_code=422, content={"detail": _validation_detail(exc.errors())})

    def scores(batch: TraceBatch) -> dict[str, Any]:
        out: dict[str, Any] = {"trace_confidence": _nullable(trace_confidence(batch))}
        out["trace_plus"] = _nullable(calibrator.predict_proba(batch)) if calibrator is not None else None
        return out

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {
            "status": "ok",
            "model": getattr(model, "model_id", None),
            "calibrator": calibrator is not None,
        }

    @app.post("/score")
    def score(req: ScoreRequest) -> dict[str, Any]:
        try:
            batch = TraceBatch.from_lists(req.surprisal, req.entropy)
        except ValueError as e:
            raise HTTPException(status_code=422, detail=str(e)) from e
        return scores(batch)

    @app.post("/generate")
    def generate(req: GenerateRequest) -> dict[str, Any]:
        if model is None:
            raise HTTPException(status_code=503, detail="this service was started without a model")
        if len(req.prompts) > max_prompts:
            raise HTTPException(status_code=422, detail=f"send between 1 and {max_prompts} prompts")
        prompts = [p if isinstance(p, str) else [m.model_dump() for m in p] for p in req.prompts]
        try:
            traces = model.generate(prompts, max_new_tokens=req.max_new_tokens)
        except HTTPBackendError as e:  # the upstream server failed (also: it sent no log-probs): not the client's fault
            raise HTTPException(status_code=502, detail=str(e)) from e
        except ValueError as e:  # a prompt too long for the context, an unsupported request, ...
            raise HTTPException(status_code=422, detail=str(e)) from e
        s = scores(TraceBatch.from_traces(traces))
        answers = []
        for i, t in enumerate(traces):
            answers.append(
                {
                    "text": t.text,
                    "tokens": list(t.token_strings),
                    "surprisal": t.surprisal.tolist(),
                    "entropy": t.entropy.tolist(),
                    "entropy_kind": t.entropy_kind,
                    "stop_reason": t.stop_reason,
                    "trace_confidence": s["trace_confidence"][i],
                    "trace_plus": None if s["trace_plus"] is None else s["trace_plus"][i],
                }
            )
        return {"model": model.model_id, "answers": answers}

    return app
