"""The confidence service: /score and /generate through FastAPI's test client (no network)."""

from __future__ import annotations

import numpy as np
import pytest
from fastapi.testclient import TestClient

import tracecal
from tracecal.serve import create_app
from tracecal.trace import Trace, TraceBatch


class FakeModel:
    model_id = "fake"

    def generate(self, prompts, max_new_tokens=32):  # type: ignore[no-untyped-def]
        out = []
        for p in prompts:
            n = 0 if p == "empty" else 3
            out.append(Trace(text="abc"[:n], token_ids=np.arange(n), surprisal=np.full(n, 0.5),
                             entropy=np.full(n, 1.0), token_strings=list("abc"[:n]), offsets=np.arange(n)))  # fmt: skip
        return out


@pytest.fixture()
def client() -> TestClient:
    rng = np.random.default_rng(0)
    b = TraceBatch.from_lists([rng.random(5) for _ in range(40)], [rng.random(5) * 2 for _ in range(40)])
    cal = tracecal.TracePlus().fit(b, rng.integers(0, 2, 40))
    return TestClient(create_app(FakeModel(), cal))


def test_score_matches_library(client: TestClient) -> None:
    body = {"surprisal": [[0.5, 0.5, 1.0], []], "entropy": [[1.0, 2.0, 3.0], []]}
    r = client.post("/score", json=body)
    assert r.status_code == 200
    out = r.json()
    assert out["trace_confidence"][0] == pytest.approx(0.16933579087618955)
    assert out["trace_confidence"][1] is None and out["trace_plus"][1] is None
    assert 0 < out["trace_plus"][0] < 1


def test_score_rejects_bad_input(client: TestClient) -> None:
    assert client.post("/score", json={"surprisal": [[0.1]], "entropy": [[0.1, 0.2]]}).status_code == 422
    assert client.post("/score", json={"surprisal": [[-1.0]], "entropy": [[0.1]]}).status_code == 422
    assert client.post("/score", json={"surprisal": "x"}).status_code == 422


def test_generate(client: TestClient) -> None:
    r = client.post("/generate", json={"prompts": ["hi", "empty"], "max_new_tokens": 3})
    assert r.status_code == 200
    a = r.json()["answers"]
    assert a[0]["tokens"] == ["a", "b", "c"] and a[0]["trace_confidence"] > 0
    assert a[1]["trace_confidence"] is None
    assert client.post("/generate", json={"prompts": []}).status_code == 422
    assert client.get("/health").json() == {"status": "ok", "model": "fake", "calibrator": True}
    assert TestClient(create_app(None)).post("/generate", json={"prompts": ["x"]}).status_code == 503
