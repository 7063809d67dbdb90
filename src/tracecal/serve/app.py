"""`create_app`: the FastAPI app of the confidence gateway.

Endpoints:

* ``POST /v1/chat/completions``, ``POST /v1/completions``, ``GET /v1/models`` — OpenAI-compatible, each choice
  with a ``confidence`` object; streaming with the running risk (`tracecal.serve.routes`, `.streaming`).
* ``POST /v1/score-answers`` — trace summary and confidence of answers a user already has, each with its prompt
  (teacher forcing through the served model; `tracecal.serve.answers`).
* ``POST /score`` — ``{"surprisal": [[…], …], "entropy": [[…], …]}`` (per-token nats, one list per answer)
  → ``{"trace_confidence": […], "trace_plus": […] | null}``; zero-token answers give ``null``. Bad values
  (not a number, negative, above `tracecal.traces.segments.MAX_TOKEN_NATS`): 422 with a JSON ``detail`` naming
  the field.
* ``GET /health`` — model, calibrator provenance (kind, path, sha256), drift state, limits.
* ``GET /metrics`` — Prometheus text format (`tracecal.serve.metrics`).

Middleware (outermost first): metrics and arrival time, then the body-size limit. The batching worker starts
with the first request and stops with the app (lifespan).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Unpack

from fastapi import FastAPI, Request, Response
from fastapi.openapi.utils import get_openapi

from tracecal.errors import ValidationError
from tracecal.serve.answers import answers_router
from tracecal.serve.config import ServeConfig
from tracecal.serve.errors import APIError, install_error_handlers
from tracecal.serve.gateway import Gateway, GatewayOptions
from tracecal.serve.limits import BodyLimitMiddleware
from tracecal.serve.metrics import CONTENT_TYPE_LATEST, MetricsMiddleware
from tracecal.serve.routes import openai_router
from tracecal.serve.schemas import ScoreRequest
from tracecal.traces.trace import TraceBatch
from tracecal.version import __version__

__all__ = ["create_app", "listening_socket", "narrow_openapi", "run"]


def create_app(
    model: Any = None, calibrator: Any = None, config: ServeConfig | None = None, **options: Unpack[GatewayOptions]
) -> FastAPI:
    """The gateway app.

    Args:
        model: a tracecal backend (HF, llama.cpp, or an HTTP backend for the proxy); None: /score only.
        calibrator: a fitted calibrator of any class (`tracecal.calibrators.load_calibrator`) or None.
        config: limits, batching, confidence policy, drift settings (`ServeConfig`; defaults when None).
        options: ``text_model`` (backend for /v1/completions' raw-text prompts, default ``model``) and
            ``calibrator_path`` (the calibrator's file, shown with its sha256 in /health): see `Gateway`.
    """
    gw = Gateway(model, calibrator, config, **options)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        gw.batcher.close()

    app = FastAPI(
        title="tracecal gateway",
        description="OpenAI-compatible completions with single-pass decoding-trace confidence (TRACE / TRACE+)",
        lifespan=lifespan,
    )
    app.state.gateway = gw
    install_error_handlers(app)
    app.include_router(openai_router(gw))
    app.include_router(answers_router(gw))

    @app.get("/health", summary="Model, calibrator provenance, drift flag, limits")
    def health() -> dict[str, Any]:
        return gw.health()

    @app.get("/metrics", summary="Prometheus metrics", response_class=Response)
    def metrics() -> Response:
        return Response(gw.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    @app.post("/score", summary="c_TRACE (and the calibrated probability) of traces you already have")
    def score(req: ScoreRequest, request: Request) -> dict[str, Any]:
        gw.auth.check(request)
        try:
            batch = TraceBatch.from_lists(req.surprisal, req.entropy)
        except ValueError as e:
            raise APIError(422, str(e), code="invalid_value") from e
        try:
            return gw.scorer.score_batch(batch)
        except ValidationError as e:  # a calibrator that reads more than numbers (a hidden-state probe)
            raise APIError(422, str(e), code="calibrator_input") from e

    narrow_openapi(app, gw)
    app.add_middleware(BodyLimitMiddleware, max_bytes=gw.config.max_body_bytes)
    app.add_middleware(MetricsMiddleware, metrics=gw.metrics)
    return app


def narrow_openapi(app: FastAPI, gw: Gateway) -> None:
    """Serve FastAPI's schema with the requests' ``model`` narrowed to the one name the gateway answers to (left
    open when it serves no model; the name is read when the schema is first asked for)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=__version__, description=app.description, routes=app.routes)
            for name in ("ChatCompletionRequest", "CompletionRequest", "ScoreAnswersRequest"):
                if gw.model is not None and name in schema.get("components", {}).get("schemas", {}):
                    schema["components"]["schemas"][name]["properties"]["model"]["enum"] = [gw.model_id]
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to customise the schema


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host``:``port`` whose connections send without delay (``TCP_NODELAY``).

    Why: uvicorn on the plain asyncio loop binds a socket with protocol 0, for which asyncio skips ``TCP_NODELAY``
    on accepted connections; every answer is written as two segments (headers, then body) and the second waits
    for the client's delayed ACK, ~40 ms per request (docs/benchmarks.md, "Proxy overhead"). Set on the listening
    socket, the option is inherited by each accepted one. ``OSError`` (port taken, bad address) names both.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    return sock


def run(app: FastAPI, host: str, port: int) -> None:
    """Serve ``app`` with uvicorn on ``host``:``port`` (`listening_socket`) until interrupted."""
    import uvicorn

    sock = listening_socket(host, port)
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port))  # the Config sets up uvicorn's logging
    logging.getLogger("uvicorn.error").info("tracecal gateway on http://%s:%d (CTRL+C to quit)", host, port)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
    if not server.started:  # as uvicorn.run: a start-up failure (the lifespan) is not a clean exit
        raise RuntimeError(f"the gateway did not start on {host}:{port} (see the log above)")
