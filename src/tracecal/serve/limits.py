"""Request limits and auth: the body-size cap (an ASGI middleware, 413) and optional bearer-token auth (401).

The token is read once, when the app is built, from the environment variable ``ServeConfig.auth_token_env``
(default ``TRACECAL_SERVE_TOKEN``); unset or empty means no auth. Comparison is constant-time
(`hmac.compare_digest`); the token is never logged or echoed. ``/health`` and ``/metrics`` stay open (probes
and scrapers); ``/v1/*`` and ``/score`` need ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import hmac
import json
import os
from typing import Any

from fastapi import Request

from tracecal.serve.errors import APIError, error_body

__all__ = ["BearerAuth", "BodyLimitMiddleware"]


class BearerAuth:
    """``check(request)`` raises a 401 `APIError` unless the request carries the configured bearer token."""

    def __init__(self, env_name: str) -> None:
        token = os.environ.get(env_name) or ""
        self._token = token.encode() if token else None
        self.env_name = env_name

    @property
    def enabled(self) -> bool:
        return self._token is not None

    def check(self, request: Request) -> None:
        if self._token is None:
            return
        scheme, _, value = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), self._token):
            raise APIError(
                401,
                "missing or wrong bearer token: send 'Authorization: Bearer <token>' (the token the "
                f"operator set in {self.env_name})",
                code="invalid_api_key",
                headers={"WWW-Authenticate": "Bearer"},
            )


class BodyLimitMiddleware:
    """Refuses request bodies over ``max_bytes`` with a 413 before any handler reads them (pure ASGI)."""

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def _refuse(self, scope: dict[str, Any], send: Any, status: int, message: str) -> None:
        if scope.get("path", "").startswith("/v1/"):
            body = error_body(message, "invalid_request_error", None, "request_too_large" if status == 413 else None)
        else:
            body = {"detail": message}
        raw = json.dumps(body).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": raw})

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        too_big = f"the request body exceeds {self.max_bytes} bytes (the server's limit, --max-body-bytes)"
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None:
            try:
                n = int(declared)
            except ValueError:
                await self._refuse(scope, send, 400, "invalid Content-Length header")
                return
            if n > self.max_bytes:
                await self._refuse(scope, send, 413, too_big)
                return
        chunks, total = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left before sending its body
                return
            chunks.append(message.get("body", b""))
            total += len(chunks[-1])
            if total > self.max_bytes:
                await self._refuse(scope, send, 413, too_big)
                return
            if not message.get("more_body", False):
                break
        body, replayed = b"".join(chunks), False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # later: http.disconnect, for cancellation

        await self.app(scope, replay, send)
