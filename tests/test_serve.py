"""The confidence service: /score and /generate through FastAPI's test client (no network).

Bad requests must answer 422 with a JSON ``detail`` naming the field - never a 500.
"""

from __future__ import annotations

import numpy as np
import pytest
from fastapi.testclient import TestClient

import tracecal
from tracecal.backends.base import PromptTooLongError
from tracecal.serve import create_app
from tracecal.trace import Trace, TraceBatch


class FakeModel:
    model_id = "fake"

    def __init__(self) -> None:
        self.seen: list[object] = []

    def generate(self, prompts, max_new_tokens=32):  # type: ignore[no-untyped-def]
        self.seen.append((prompts, max_new_tokens))
        out = []
        for p in prompts:
            n = 0 if p == "empty" else 3
            out.append(Trace(text="abc"[:n], token_ids=np.arange(n), surprisal=np.full(n, 0.5),
                             entropy=np.full(n, 1.0), token_strings=list("abc"[:n]), offsets=np.arange(n)))  # fmt: skip
        return out


@pytest.fixture(scope="module")
def calibrator():  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(0)
    b = TraceBatch.from_lists([rng.random(5) for _ in range(40)], [rng.random(5) * 2 for _ in range(40)])
    return tracecal.TracePlus().fit(b, rng.integers(0, 2, 40))


@pytest.fixture()
def fake() -> FakeModel:
    return FakeModel()


@pytest.fixture()
def client(fake, calibrator) -> TestClient:  # type: ignore[no-untyped-def]
    return TestClient(create_app(fake, calibrator))


def _msgs(r) -> str:  # type: ignore[no-untyped-def]
    """All messages of a 422 answer, with their field paths, as one string."""
    detail = r.json()["detail"]
    if isinstance(detail, str):
        return detail
    return " | ".join(f"{'.'.join(map(str, d['loc']))}: {d['msg']}" for d in detail)


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
        ({"surprisal": [[-1.0]], "entropy": [[0.1]]}, "surprisal.0.0: Input should be greater than or equal to 0"),
        ({"surprisal": [["0.1"]], "entropy": [[0.1]]}, "surprisal.0.0: Input should be a valid number"),
        ({"surprisal": [[True]], "entropy": [[0.1]]}, "surprisal.0.0: Input should be a valid number"),
        ({"surprisal": [], "entropy": []}, "surprisal: List should have at least 1 item"),
        ({"surprisal": "x"}, "surprisal: Input should be a valid list"),
        ({"surprisal": [[0.1]]}, "entropy: Field required"),
        ({"surprisal": [[0.1]], "entropy": [[0.1]], "extra": 1}, "extra: Extra inputs are not permitted"),
    ],
)
def test_score_rejects_bad_input(client: TestClient, body: dict, message: str) -> None:
    r = client.post("/score", json=body)
    assert r.status_code == 422 and message in _msgs(r), _msgs(r)


def test_score_rejects_non_finite_numbers_as_json(client: TestClient) -> None:
    # NaN / Infinity are accepted by Python's JSON parser: they must give a 422, and the 422 must be valid JSON
    for raw in ('{"surprisal": [[NaN]], "entropy": [[0.1]]}', '{"surprisal": [[0.1]], "entropy": [[Infinity]]}'):
        r = client.post("/score", content=raw, headers={"content-type": "application/json"})
        assert r.status_code == 422 and "finite number" in _msgs(r)
    r = client.post("/score", content='{"surprisal": [[', headers={"content-type": "application/json"})
    assert r.status_code == 422 and "JSON decode error" in _msgs(r)


def test_generate(client: TestClient, fake: FakeModel) -> None:
    r = client.post("/generate", json={"prompts": ["hi", "empty"], "max_new_tokens": 3})
    assert r.status_code == 200
    a = r.json()["answers"]
    assert a[0]["tokens"] == ["a", "b", "c"] and a[0]["trace_confidence"] > 0
    assert a[1]["trace_confidence"] is None
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert client.post("/generate", json={"prompts": [chat]}).status_code == 200
    assert fake.seen[-1] == ([chat], 32)  # messages reach the model as plain dicts
    assert client.get("/health").json() == {"status": "ok", "model": "fake", "calibrator": True}
    assert TestClient(create_app(None)).post("/generate", json={"prompts": ["x"]}).status_code == 503


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"prompts": [[{"role": "user"}]]}, "prompts.0.list[ChatMessage].0.content: Field required"),
        ({"prompts": [[{"content": "hi"}]]}, "prompts.0.list[ChatMessage].0.role: Field required"),
        ({"prompts": [[{"role": "bot", "content": "hi"}]]}, "Input should be 'system', 'user' or 'assistant'"),
        ({"prompts": [[{"role": "user", "content": 3}]]}, "0.content: Input should be a valid string"),
        ({"prompts": [[]]}, "List should have at least 1 item"),
        ({"prompts": []}, "prompts: List should have at least 1 item"),
        ({"prompts": [3]}, "prompts.0.str: Input should be a valid string"),
        ({"prompts": ["x"], "max_new_tokens": "8"}, "max_new_tokens: Input should be a valid integer"),
        ({"prompts": ["x"], "max_new_tokens": 2.5}, "max_new_tokens: Input should be a valid integer"),
        ({"prompts": ["x"], "max_new_tokens": True}, "max_new_tokens: Input should be a valid integer"),
        ({"prompts": ["x"], "max_new_tokens": 0}, "max_new_tokens: Input should be greater than or equal to 1"),
        ({"prompts": ["x"], "max_tokens": 8}, "max_tokens: Extra inputs are not permitted"),
        ({"prompt": "x"}, "prompts: Field required"),
    ],
)
def test_generate_rejects_bad_input(client: TestClient, fake: FakeModel, body: dict, message: str) -> None:
    r = client.post("/generate", json=body)
    assert r.status_code == 422 and message in _msgs(r), _msgs(r)
    assert fake.seen == []  # the model is never called with a bad request


def test_generate_limits_and_model_errors(fake: FakeModel) -> None:
    small = TestClient(create_app(fake, max_prompts=2))
    r = small.post("/generate", json={"prompts": ["a", "b", "c"]})
    assert r.status_code == 422 and r.json()["detail"] == "send between 1 and 2 prompts"

    class TooLong(FakeModel):
        def generate(self, prompts, max_new_tokens=32):  # type: ignore[no-untyped-def]
            raise PromptTooLongError("prompt 0 has 9000 tokens; ... Shorten it")

    r = TestClient(create_app(TooLong())).post("/generate", json={"prompts": ["x"]})
    assert r.status_code == 422 and "Shorten it" in r.json()["detail"]


def test_generate_with_a_real_backend(tiny_model) -> None:  # type: ignore[no-untyped-def]
    client = TestClient(create_app(tiny_model))
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."}]
    r = client.post("/generate", json={"prompts": ["Capital of France?", chat], "max_new_tokens": 4})
    assert r.status_code == 200
    out = r.json()
    assert out["model"] == "tiny-random-llama" and len(out["answers"]) == 2
    for a in out["answers"]:
        assert a["entropy_kind"] == "exact" and len(a["tokens"]) == len(a["surprisal"]) == len(a["entropy"]) <= 4
        assert a["trace_plus"] is None and (a["trace_confidence"] is None or 0 < a["trace_confidence"] <= 1)
    too_long = client.post("/generate", json={"prompts": ["word " * 3000], "max_new_tokens": 4})
    assert too_long.status_code == 422 and "context" in too_long.json()["detail"]


def test_an_upstream_server_without_log_probs_is_a_502_not_a_422() -> None:
    from fastapi.testclient import TestClient

    from tracecal.backends.http import LogprobsUnavailableError
    from tracecal.serve import create_app

    class NoLogprobs:
        model_id = "upstream"

        def generate(self, prompts, max_new_tokens=32):  # type: ignore[no-untyped-def]
            raise LogprobsUnavailableError("the server returned no log-probs: start it with --logits_all true")

    r = TestClient(create_app(NoLogprobs())).post("/generate", json={"prompts": ["hi"], "max_new_tokens": 4})
    assert r.status_code == 502 and "--logits_all" in r.json()["detail"]
