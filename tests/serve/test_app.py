"""`tracecal.serve.app`: /score (the library's numbers, every bad input a 422 naming the field), /health, /metrics,
the score-only app and the OpenAPI schema."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.serve.helpers import CHAT, FakeModel, error_messages
from tracecal.serve import ServeConfig, create_app


def test_score_matches_library(client: TestClient) -> None:
    body = {"surprisal": [[0.5, 0.5, 1.0], []], "entropy": [[1.0, 2.0, 3.0], []]}
    r = client.post("/score", json=body)
    assert r.status_code == 200
    out = r.json()
    assert out["trace_confidence"][0] == pytest.approx(0.16933579087618955)
    assert out["trace_confidence"][1] is None and out["trace_plus"][1] is None
    assert 0 < out["trace_plus"][0] < 1


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"surprisal": [[0.1]], "entropy": [[0.1, 0.2]]}, "answer 0: 1 surprisal values but 2 entropy values"),
        ({"surprisal": [[0.1]], "entropy": [[0.1], [0.2]]}, "surprisal has 1 answers but entropy has 2"),
        ({"surprisal": [[-1.0]], "entropy": [[0.1]]}, "surprisal[0][0]: Input should be greater than or equal to 0"),
        ({"surprisal": [["0.1"]], "entropy": [[0.1]]}, "surprisal[0][0]: Input should be a valid number"),
        ({"surprisal": [[True]], "entropy": [[0.1]]}, "surprisal[0][0]: Input should be a valid number"),
        ({"surprisal": [], "entropy": []}, "surprisal: List should have at least 1 item"),
        ({"surprisal": "x"}, "surprisal: Input should be a valid list"),
        ({"surprisal": [[0.1]]}, "entropy: Field required"),
        ({"surprisal": [[0.1]], "entropy": [[0.1]], "extra": 1}, "extra: Extra inputs are not permitted"),
        ({"surprisal": [[1e308]], "entropy": [[0.1]]}, "surprisal[0][0]: Input should be less than or equal to 10000"),
        (
            {"surprisal": [[0.1]], "entropy": [[0.1, 1e300]]},
            "entropy[0][1]: Input should be less than or equal to 10000",
        ),
    ],
)
def test_score_rejects_bad_input(client: TestClient, body: dict, message: str) -> None:
    r = client.post("/score", json=body)
    assert r.status_code == 422 and message in error_messages(r), error_messages(r)


def test_score_at_the_largest_accepted_value_is_a_number_without_warnings(client: TestClient) -> None:
    """Up to `MAX_TOKEN_NATS` every operator and the calibrator stay finite: numbers, no overflow warning."""
    import warnings

    from tracecal.traces.segments import MAX_TOKEN_NATS

    body = {
        "surprisal": [[MAX_TOKEN_NATS] * 300, [0.1, MAX_TOKEN_NATS]],
        "entropy": [[MAX_TOKEN_NATS] * 300, [MAX_TOKEN_NATS, 0.0]],
    }
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = client.post("/score", json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert all(isinstance(x, float) and 0 <= x <= 1 for x in out["trace_confidence"] + out["trace_plus"]), out


def test_score_rejects_non_finite_numbers_as_json(client: TestClient) -> None:
    # NaN / Infinity are accepted by Python's JSON parser: they must give a 422, and the 422 must be valid JSON
    for raw in ('{"surprisal": [[NaN]], "entropy": [[0.1]]}', '{"surprisal": [[0.1]], "entropy": [[Infinity]]}'):
        r = client.post("/score", content=raw, headers={"content-type": "application/json"})
        assert r.status_code == 422 and "finite number" in error_messages(r)
    r = client.post("/score", content='{"surprisal": [[', headers={"content-type": "application/json"})
    assert r.status_code == 400 and "the body is not valid JSON: Expecting value at line 1 column 17" in error_messages(
        r
    )


def test_health_and_metrics(fake: FakeModel, calibrator, tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = calibrator.save(tmp_path / "cal.json")
    with TestClient(create_app(fake, calibrator, ServeConfig(abstain_below=0.99), calibrator_path=path)) as c:
        fresh = c.get("/metrics").text  # the known label values are series at 0 before anything happened
        zero = ('tracecal_tokens_total{kind="completion"} 0.0', 'tracecal_early_stops_total{reason="cancelled"} 0.0')
        assert all(line in fresh for line in zero), fresh
        assert c.post("/v1/chat/completions", json=CHAT).status_code == 200
        assert c.post("/v1/chat/completions", json=CHAT | {"model": "nope"}).status_code == 404
        h = c.get("/health").json()
        import hashlib

        assert h["status"] == "ok" and h["model"] == "fake" and h["drift"]["alarm"] is False and h["dtype"] is None
        assert h["calibrator"] == {
            "kind": "TracePlus",
            "path": str(path.resolve()),
            "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "provenance": None,  # fitted here, on no model's recorded answers
        }
        m = c.get("/metrics")
        assert m.headers["content-type"].startswith("text/plain")
        text = m.text
    for line in (
        'tracecal_requests_total{endpoint="/v1/chat/completions",status="200"} 1.0',
        'tracecal_requests_total{endpoint="/v1/chat/completions",status="404"} 1.0',
        'tracecal_tokens_total{kind="completion"} 3.0',
        "tracecal_abstentions_total 1.0",
        "tracecal_confidence_count 1.0",
        "tracecal_drift_alarms_total 0.0",
    ):
        assert line in text, line


def test_no_model_serves_score_only() -> None:
    with TestClient(create_app(None)) as c:
        r = c.post("/v1/chat/completions", json=CHAT)
        assert r.status_code == 404 and r.json()["error"]["code"] == "no_model"  # permanent: never a retried 503
        assert "started without a model (--no-model)" in r.json()["error"]["message"]
        assert c.get("/v1/models").json()["data"] == []
        assert c.post("/score", json={"surprisal": [[0.1]], "entropy": [[0.1]]}).status_code == 200


def test_the_openapi_schema_names_the_served_model(fake: FakeModel) -> None:
    with TestClient(create_app(fake)) as c:
        schemas = c.get("/openapi.json").json()["components"]["schemas"]
    assert schemas["ChatCompletionRequest"]["properties"]["model"]["enum"] == ["fake"]
    assert schemas["CompletionRequest"]["properties"]["model"]["enum"] == ["fake"]
    with TestClient(create_app(None)) as c:
        schemas = c.get("/openapi.json").json()["components"]["schemas"]
    assert "enum" not in schemas.get("ChatCompletionRequest", {}).get("properties", {}).get("model", {})


def test_create_app_passes_the_gateway_options_on(fake: FakeModel) -> None:
    text = FakeModel()
    with TestClient(create_app(fake, text_model=text)) as c:
        assert c.post("/v1/completions", json={"model": "fake", "prompt": "x", "max_tokens": 2}).status_code == 200
    assert text.seen and not fake.seen  # raw-text prompts went to the text backend


def test_the_listening_socket_sends_without_delay_and_names_a_taken_port() -> None:
    """`listening_socket`: accepted connections inherit TCP_NODELAY (no ~40 ms delayed-ACK stall per answer)."""
    import socket

    from tracecal.serve.app import listening_socket

    with listening_socket("127.0.0.1", 0) as sock:
        sock.listen(1)
        port = sock.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)):
            conn, _ = sock.accept()
            with conn:
                assert conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{port}"):
            listening_socket("127.0.0.1", port)
