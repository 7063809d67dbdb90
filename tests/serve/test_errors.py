"""`tracecal.serve.errors`: malformed bodies, unknown routes and backend failures as OpenAI error objects (never a
traceback), and the error vocabulary itself."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from tests.serve.helpers import CHAT, FakeModel
from tracecal.backends.http import HTTPBackendError, LogprobsUnavailableError
from tracecal.serve import ServeConfig, create_app


def test_malformed_bodies_and_unknown_routes(client: TestClient) -> None:
    r = client.post("/v1/chat/completions", content=b'{"model": ', headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["message"] == (
        "the body is not valid JSON: Expecting value at line 1 column 11 (character 10)"
    )
    r = client.post("/v1/chat/completions", content=b"[1, 2]", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    r = client.post("/v1/embeddings", json={})
    assert r.status_code == 404 and "no such endpoint" in r.json()["error"]["message"]
    assert client.get("/v1/chat/completions").status_code == 405
    assert client.post("/v1/chat/completions", json=CHAT).status_code == 200


@pytest.mark.parametrize(
    ("error", "status", "message"),
    [
        (HTTPBackendError("upstream: HTTP 500"), 502, "the upstream server failed"),
        (LogprobsUnavailableError("no log-probs: start it with --logits_all true"), 502, "--logits_all"),
        (ValueError("prompt 0 is odd"), 400, "prompt 0 is odd"),
        (RuntimeError("boom"), 500, "internal error"),
    ],
)
def test_backend_failures_map_to_statuses(error: Exception, status: int, message: str) -> None:
    class Failing(FakeModel):
        def generate(self, prompts, max_new_tokens=32, **kwargs):  # type: ignore[no-untyped-def]
            raise error

    with TestClient(create_app(Failing(), config=ServeConfig(max_batch=1))) as c:
        r = c.post("/v1/chat/completions", json=CHAT)
        assert r.status_code == status and message in r.json()["error"]["message"]
        assert "boom" not in r.text


def test_api_errors_are_tracecal_errors_with_an_openai_body() -> None:
    import json

    from tracecal.errors import TracecalError
    from tracecal.serve.errors import APIError, error_body, validation_detail

    e = APIError(429, "slow down", param="n", headers={"Retry-After": "2"})
    assert isinstance(e, TracecalError) and e.type == "rate_limit_error" and APIError(418, "x").type == "api_error"
    r = e.response()
    assert r.status_code == 429 and r.headers["retry-after"] == "2"
    assert (
        json.loads(r.body)
        == error_body("slow down", "rate_limit_error", "n")
        == {"error": {"message": "slow down", "type": "rate_limit_error", "param": "n", "code": None}}
    )
    errors = [{"loc": ("body", "messages", 0), "msg": "Value error, bad", "type": "value_error", "input": float("nan")}]
    assert validation_detail(errors) == [{"loc": ["body", "messages", 0], "msg": "bad", "type": "value_error"}]


def test_framework_errors_name_their_cause_in_the_openai_shape(client: TestClient) -> None:
    """Malformed JSON said only "[28]: JSON decode error", text/plain or no content type "Input should be a valid
    dictionary", invalid UTF-8 or 50,000-deep nesting "There was an error parsing the body", and /score answered
    in FastAPI's {"detail": ...}: every answer now has OpenAI's shape and names the cause."""
    json_ct = {"content-type": "application/json"}
    cases = [
        (
            "/v1/chat/completions",
            b'{"model": "m",\n "messages": [}',
            json_ct,
            400,
            "invalid_json",
            "the body is not valid JSON: Expecting value at line 2 column 15 (character 29)",
        ),
        (
            "/v1/chat/completions",
            json.dumps(CHAT).encode(),
            {"content-type": "text/plain"},
            415,
            "unsupported_media_type",
            "send the body as JSON with the header Content-Type: application/json (got 'text/plain')",
        ),
        (
            "/v1/chat/completions",
            json.dumps(CHAT).encode(),
            {},
            415,
            "unsupported_media_type",
            "no Content-Type was sent",
        ),
        (
            "/v1/chat/completions",
            b'{"model": "\xff"}',
            json_ct,
            400,
            "invalid_encoding",
            "the body is not UTF-8 text: byte 11 (b'\\xff'): invalid start byte",
        ),
        ("/v1/chat/completions", b"[" * 50_000 + b"]" * 50_000, json_ct, 400, "too_deeply_nested", "nested too deeply"),
        ("/score", b'{"surprisal": [[1]], "entropy": [[1]]', json_ct, 400, "invalid_json", "not valid JSON"),
        (
            "/score",
            b'{"surprisal": [[-1]], "entropy": [[1]]}',
            json_ct,
            422,
            "invalid_value",
            "surprisal[0][0]: Input should be greater than or equal to 0",
        ),
    ]
    for path, body, headers, status, code, message in cases:
        r = client.post(path, content=body, headers=headers)
        doc = r.json()
        assert r.status_code == status and set(doc) == {"error"}, (path, r.status_code, doc)
        assert set(doc["error"]) == {"message", "type", "param", "code"} and doc["error"]["code"] == code, doc
        assert message in doc["error"]["message"], doc
