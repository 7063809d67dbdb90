"""Errors as the OpenAI API sends them: ``{"error": {"message", "type", "param", "code"}}`` with a 4xx status.

`APIError` is raised by the handlers; `install_error_handlers` turns it, request validation errors (400 on
``/v1/*``; ``/score`` keeps its 422 ``{"detail": [...]}`` answers) and any unexpected exception (a 500 with a
generic message, the exception logged, never a traceback to the client) into JSON.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from tracecal.errors import TracecalError

__all__ = ["APIError", "error_body", "install_error_handlers", "printable", "validation_detail"]

log = logging.getLogger("tracecal.serve")

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "timeout",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    502: "upstream_error",
    503: "overloaded",
    504: "timeout",
}


class APIError(TracecalError):
    """An answer with an OpenAI-style error body; ``headers`` e.g. ``Retry-After`` (a `TracecalError`)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        type: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.type = type or _TYPES.get(status, "api_error")
        self.headers = headers or {}

    def response(self) -> JSONResponse:
        return JSONResponse(error_body(self.message, self.type, self.param, self.code), self.status, self.headers)


def printable(text: str) -> str:
    """``text`` with what UTF-8 cannot encode (lone surrogates a client sent, echoed in a message or a field
    name) written as a ``\\udXXX`` escape, so that every error body can be sent."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def error_body(message: str, type: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """The OpenAI error object (message and param made `printable`)."""
    where = None if param is None else printable(param)
    return {"error": {"message": printable(message), "type": type, "param": where, "code": code}}


def validation_detail(errors: Any) -> list[dict[str, Any]]:
    """pydantic's errors without the echoed input (which may be NaN, not valid JSON, or the whole body)."""
    out = []
    for e in errors:
        msg = printable(str(e.get("msg", "invalid value")).removeprefix("Value error, "))
        loc = [x if isinstance(x, int) else printable(str(x)) for x in e.get("loc", ())]
        out.append({"loc": loc, "msg": msg, "type": str(e.get("type", ""))})
    return out


def _param(loc: list[Any]) -> str | None:
    """``["body", "messages", 0, "role"]`` → ``messages[0].role`` (OpenAI's way of naming a parameter)."""
    out = ""
    for x in loc[1:] if loc and loc[0] == "body" else loc:
        if isinstance(x, int):
            out += f"[{x}]"
        elif x not in ("str", "int", "float", "bool", "dict", "list") and not any(c in str(x) for c in "[]()"):
            out += ("." if out else "") + str(x)  # union members (``str``, ``list[TextPart]``) are not fields
    return out or None


def _openai_validation(exc: RequestValidationError) -> JSONResponse:
    detail = validation_detail(exc.errors())
    first: dict[str, Any] = detail[0] if detail else {"loc": [], "msg": "invalid request"}
    param = _param(first["loc"])
    where = f"{param}: " if param else ""
    message = where + first["msg"]
    if len(detail) > 1:
        message += (
            f" (and {len(detail) - 1} more: "
            + "; ".join(f"{_param(d['loc']) or 'body'}: {d['msg']}" for d in detail[1:4])
            + ")"
        )
    return JSONResponse(error_body(message, "invalid_request_error", param, "invalid_value"), 400)


def install_error_handlers(app: FastAPI) -> None:
    """OpenAI-style errors on ``/v1/*``; ``{"detail": ...}`` elsewhere (the /score contract)."""

    @app.exception_handler(APIError)
    async def api_error(request: Request, exc: APIError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        if request.url.path.startswith("/v1/"):
            return _openai_validation(exc)
        return JSONResponse(status_code=422, content={"detail": validation_detail(exc.errors())})

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if request.url.path.startswith("/v1/"):
            msg = str(exc.detail) if exc.status_code != 404 else f"no such endpoint: {request.url.path}"
            return APIError(exc.status_code, msg, headers=dict(exc.headers or {})).response()
        detail = printable(exc.detail) if isinstance(exc.detail, str) else exc.detail
        return JSONResponse({"detail": detail}, exc.status_code, dict(exc.headers or {}))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s", request.url.path)
        return APIError(500, "internal error (see the server log)", type="api_error").response()
