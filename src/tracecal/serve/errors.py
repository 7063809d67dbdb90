"""Errors as the OpenAI API sends them: ``{"error": {"message", "type", "param", "code"}}`` with a 4xx status.

`APIError` is raised by the handlers; `install_error_handlers` turns it, request validation errors (400 on
``/v1/*``, 422 on ``/score``), the framework's own errors (a body that is not JSON, not UTF-8, nested too deeply
or sent as another content type: `body_problem`, `parse_failure`) and any unexpected exception (a 500 with a
generic message, the exception logged, never a traceback to the client) into that one shape.

Status codes say what a client should do: 4xx for a request that will fail again as sent (never retried by the
openai clients), 429 / 503 (with ``Retry-After``) only for a condition that passes.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from tracecal.errors import TracecalError

__all__ = [
    "APIError",
    "body_problem",
    "error_body",
    "install_error_handlers",
    "parse_failure",
    "printable",
    "validation_detail",
]

log = logging.getLogger("tracecal.serve")

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "timeout",
    413: "invalid_request_error",
    415: "invalid_request_error",
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


def _openai_validation(exc: RequestValidationError, status: int = 400) -> JSONResponse:
    detail = validation_detail(exc.errors())
    first: dict[str, Any] = detail[0] if detail else {"loc": [], "msg": "invalid request"}
    param = _param(first["loc"])
    where = f"{param}: " if param and not first["msg"].startswith(f"{param} ") else ""  # the message names it
    message = where + first["msg"]
    if len(detail) > 1:
        message += (
            f" (and {len(detail) - 1} more: "
            + "; ".join(f"{_param(d['loc']) or 'body'}: {d['msg']}" for d in detail[1:4])
            + ")"
        )
    return JSONResponse(error_body(message, "invalid_request_error", param, "invalid_value"), status)


def _is_json(content_type: str | None) -> bool:
    """Whether a Content-Type names JSON (``application/json``, ``application/*+json``, parameters allowed)."""
    kind = (content_type or "").split(";")[0].strip().lower()
    return kind == "application/json" or (kind.startswith("application/") and kind.endswith("+json"))


def body_problem(request: Request, exc: RequestValidationError) -> APIError | None:
    """The error of a body the framework could not read as a JSON object, named for its cause: not JSON (the
    position as line, column and character), sent without a JSON Content-Type (415); None for a field error."""
    errors = list(exc.errors())
    first = errors[0] if errors else {}
    loc = list(first.get("loc", ()))
    if first.get("type") == "json_invalid":
        pos = loc[1] if len(loc) > 1 and isinstance(loc[1], int) else 0
        doc = exc.body if isinstance(exc.body, str) else ""
        line = doc.count("\n", 0, pos) + 1
        col = pos - (doc.rfind("\n", 0, pos) + 1) + 1
        why = (first.get("ctx") or {}).get("error", "invalid JSON")
        msg = f"the body is not valid JSON: {why} at line {line} column {col} (character {pos})"
        return APIError(400, msg, code="invalid_json")
    content_type = request.headers.get("content-type")
    if tuple(loc) == ("body",) and not _is_json(content_type):  # the body was not parsed: not sent as JSON
        got = f"got {printable(content_type)!r}" if content_type else "no Content-Type was sent"
        msg = f"send the body as JSON with the header Content-Type: application/json ({got})"
        return APIError(415, msg, code="unsupported_media_type")
    return None


def parse_failure(exc: StarletteHTTPException) -> APIError | None:
    """The framework's "There was an error parsing the body" (a 400 naming no cause) named for its cause: a body
    that is not UTF-8 (the byte), or JSON nested deeper than the parser follows; None for another HTTP error."""
    cause = exc.__cause__
    if exc.status_code != 400 or cause is None:
        return None
    if isinstance(cause, UnicodeDecodeError):
        byte = cause.object[cause.start : cause.start + 1]
        msg = f"the body is not UTF-8 text: byte {cause.start} ({byte!r}): {cause.reason}; send JSON encoded as UTF-8"
        return APIError(400, msg, code="invalid_encoding")
    if isinstance(cause, RecursionError):
        msg = "the body's JSON is nested too deeply (more levels than the parser follows, about 1,000): flatten it"
        return APIError(400, msg, code="too_deeply_nested")
    return APIError(400, f"the body could not be read as JSON: {printable(str(cause)) or type(cause).__name__}")


def install_error_handlers(app: FastAPI) -> None:
    """Every error answer in OpenAI's shape ``{"error": {"message", "type", "param", "code"}}``, the framework's
    own included (a body that is not JSON, not UTF-8, nested too deeply, or sent as another content type: named
    for its cause). A field error is a 400 on ``/v1/*`` and a 422 on ``/score`` (its documented status)."""

    @app.exception_handler(APIError)
    async def api_error(request: Request, exc: APIError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        if (problem := body_problem(request, exc)) is not None:
            return problem.response()
        return _openai_validation(exc, 400 if request.url.path.startswith("/v1/") else 422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if (problem := parse_failure(exc)) is not None:
            return problem.response()
        msg = printable(str(exc.detail)) if exc.status_code != 404 else f"no such endpoint: {request.url.path}"
        return APIError(exc.status_code, msg, headers=dict(exc.headers or {})).response()

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s", request.url.path)
        return APIError(500, "internal error (see the server log)", type="api_error").response()
