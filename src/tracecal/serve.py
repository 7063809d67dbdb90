"""A confidence service (FastAPI): generate answers with their confidence, or score traces you already have.

Endpoints:

* ``GET  /health`` — model id, whether a TRACE+ calibrator is loaded.
* ``POST /score``  — ``{"surprisal": [[…], …], "entropy": [[…], …]}`` (per-token nats, one list per answer)
  → ``{"trace_confidence": […], "trace_plus": […] | null}``. Zero-token answers give ``null``.
* ``POST /generate`` — ``{"prompts": [...], "max_new_tokens": 32}`` → per answer the text, token strings,
  s_t, H_t, c_TRACE and (with a calibrator) the TRACE+ probability. Needs a model.

Run: ``tracecal serve --port 8000 [--calibrator cal.json] [--model ID]`` (binds 127.0.0.1 by default).
"""

import math
from typing import Any

import numpy as np
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, Field

from tracecal.operators import trace_confidence
from tracecal.trace import TraceBatch


class ScoreRequest(BaseModel):
    surprisal: list[list[float]] = Field(..., description="per answer, per token s_t = −log p_t (nats)")
    entropy: list[list[float]] = Field(..., description="per answer, per token H_t (nats)")


class GenerateRequest(BaseModel):
    prompts: list[str | list[dict[str, str]]]
    max_new_tokens: int = Field(32, ge=1, le=4096)


def _nullable(x: np.ndarray) -> list[float | None]:
    return [float(v) if math.isfinite(v) else None for v in np.asarray(x, dtype=np.float64)]


def create_app(model: Any = None, calibrator: Any = None, max_prompts: int = 256) -> Any:
    """The FastAPI app. ``model``: a tracecal backend (or None: /generate answers 503)."""
    app = FastAPI(title="tracecal", description="Single-pass decoding-trace confidence for LLM answers")

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
        if not (np.all(np.isfinite(batch.surprisal)) and np.all(np.isfinite(batch.entropy))):
            raise HTTPException(status_code=422, detail="surprisal and entropy must be finite numbers")
        if np.any(batch.surprisal < 0) or np.any(batch.entropy < 0):
            raise HTTPException(status_code=422, detail="surprisal and entropy are non-negative (nats)")
        return scores(batch)

    @app.post("/generate")
    def generate(req: GenerateRequest) -> dict[str, Any]:
        if model is None:
            raise HTTPException(status_code=503, detail="this service was started without a model")
        if not req.prompts or len(req.prompts) > max_prompts:
            raise HTTPException(status_code=422, detail=f"send between 1 and {max_prompts} prompts")
        try:
            traces = model.generate(req.prompts, max_new_tokens=req.max_new_tokens)
        except ValueError as e:
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
