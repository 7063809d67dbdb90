"""`tracecal.serve.limits`: the body-size limit (with and without Content-Length) and bearer-token auth."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.serve.helpers import CHAT, FakeModel
from tracecal.serve import ServeConfig, create_app


def test_body_size_limit(fake: FakeModel) -> None:
    with TestClient(create_app(fake, config=ServeConfig(max_body_bytes=200))) as c:
        big = CHAT | {"messages": [{"role": "user", "content": "x" * 500}]}
        r = c.post("/v1/chat/completions", json=big)
        assert r.status_code == 413 and "exceeds 200 bytes" in r.json()["error"]["message"]
        # no Content-Length (chunked upload): counted while reading
        r = c.post(
            "/v1/chat/completions",
            content=iter([b'{"model": "fake", ', b'"x": "' + b"y" * 300 + b'"}']),
            headers={"content-type": "application/json"},
        )
        assert r.status_code == 413
        assert c.post("/score", content=b"{" + b" " * 300 + b"}").status_code == 413
        assert c.post("/v1/chat/completions", json=CHAT).status_code == 200 and fake.seen


def test_bearer_token_auth(fake: FakeModel, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACECAL_SERVE_TOKEN", "s3cret")
    with TestClient(create_app(fake)) as c:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic s3cret"}):
            r = c.post("/v1/chat/completions", json=CHAT, headers=headers)
            assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
            assert "s3cret" not in r.text
        assert c.post("/score", json={"surprisal": [[0.1]], "entropy": [[0.1]]}).status_code == 401
        ok = {"Authorization": "Bearer s3cret"}
        assert c.post("/v1/chat/completions", json=CHAT, headers=ok).status_code == 200
        assert c.get("/health").json()["auth"] is True and c.get("/metrics").status_code == 200
    assert fake.seen and len(fake.seen) == 1


def test_bearer_auth_reads_its_token_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from tracecal.serve.limits import BearerAuth

    monkeypatch.delenv("MY_TOKEN", raising=False)
    assert not BearerAuth("MY_TOKEN").enabled
    monkeypatch.setenv("MY_TOKEN", "")
    assert not BearerAuth("MY_TOKEN").enabled  # empty: no auth
    monkeypatch.setenv("MY_TOKEN", "t")
    assert BearerAuth("MY_TOKEN").enabled
