"""The gateway's contract through FastAPI's test client (no network): /score, the OpenAI routes, every bad input.

Bad requests answer 4xx JSON - ``{"detail": ...}`` (422) on /score, the OpenAI error object on /v1 - never a 500,
and the service keeps serving after each. A fake backend (fixed traces) covers the plumbing; the tiny random
model covers what needs a tokenizer (prompt-length limits).
"""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
from fastapi.testclient import TestClient

import tracecal
from tracecal.backends.http import HTTPBackendError, LogprobsUnavailableError
from tracecal.serve import ServeConfig, create_app
from tracecal.signals.operators import trace_confidence
from tracecal.traces.trace import Trace, TraceBatch

CHAT = {"model": "fake", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


def fake_trace(prompt: object, n: int = 3) -> Trace:
    s, h = np.array([0.5, 0.2, 1.0])[:n], np.array([1.0, 2.0, 3.0])[:n]
    return Trace(
        text="abc"[:n],
        token_ids=np.arange(n),
        surprisal=s,
        entropy=h,
        token_strings=list("abc"[:n]),
        offsets=np.arange(n),
        stop_reason="eos",
    )


class FakeModel:
    """A backend without step hooks: three fixed tokens per prompt ("empty" gives none)."""

    model_id = "fake"

    def __init__(self) -> None:
        self.seen: list[tuple[list[object], int]] = []

    def generate(self, prompts, max_new_tokens=32, **kwargs):  # type: ignore[no-untyped-def]
        self.seen.append((list(prompts), max_new_tokens))
        return [fake_trace(p, 0 if p == "empty" else min(3, max_new_tokens)) for p in prompts]


@pytest.fixture(scope="module")
def calibrator():  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(0)
    b = TraceBatch.from_lists([rng.random(5) for _ in range(40)], [rng.random(5) * 2 for _ in range(40)])
    return tracecal.TracePlus().fit(b, rng.integers(0, 2, 40))


@pytest.fixture()
def fake() -> FakeModel:
    return FakeModel()


@pytest.fixture()
def client(fake, calibrator):  # type: ignore[no-untyped-def]
    with TestClient(create_app(fake, calibrator, ServeConfig(abstain_below=0.5, max_prompts=3))) as c:
        yield c


def _msgs(r) -> str:  # type: ignore[no-untyped-def]
    """All messages of a 422 answer, with their field paths, as one string."""
    detail = r.json()["detail"]
    if isinstance(detail, str):
        return detail
    return " | ".join(f"{'.'.join(map(str, d['loc']))}: {d['msg']}" for d in detail)


# ------------------------------------------------------------------------------------------------ /score


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


# ------------------------------------------------------------------------------------------------ /v1


def test_chat_completion_carries_the_confidence(client: TestClient, fake: FakeModel, calibrator) -> None:  # type: ignore[no-untyped-def]
    chat = dict(
        CHAT,
        messages=[
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        ],
    )
    r = client.post("/v1/chat/completions", json=chat | {"return_trace": True, "logprobs": True})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["object"] == "chat.completion" and out["model"] == "fake" and out["id"].startswith("chatcmpl-")
    choice = out["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": "abc", "refusal": None}
    assert choice["finish_reason"] == "stop" and out["usage"]["completion_tokens"] == 3
    conf, t = choice["confidence"], fake_trace(None)
    assert conf["c_trace"] == pytest.approx(float(trace_confidence([t])[0]))
    assert conf["probability"] == pytest.approx(float(calibrator.predict_proba([t])[0]))
    assert conf["calibrator"] == "TracePlus" and conf["abstain"] == (conf["probability"] < 0.5)
    assert conf["trace"] == {"tokens": ["a", "b", "c"], "surprisal": [0.5, 0.2, 1.0], "entropy": [1.0, 2.0, 3.0]}
    assert [x["logprob"] for x in choice["logprobs"]["content"]] == [-0.5, -0.2, -1.0]
    # messages reach the backend as plain dicts (developer → system, text parts joined); max_tokens passed on
    assert fake.seen[-1] == ([[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]], 3)
    assert "trace" not in client.post("/v1/chat/completions", json=CHAT).json()["choices"][0]["confidence"]


def test_completions_and_models(client: TestClient, fake: FakeModel) -> None:
    r = client.post("/v1/completions", json={"model": "fake", "prompt": ["x", "empty"], "max_tokens": 2})
    assert r.status_code == 200, r.text
    a, b = r.json()["choices"]
    assert (a["text"], a["index"], b["text"], b["index"]) == ("ab", 0, "", 1)
    assert b["confidence"]["c_trace"] is None and b["confidence"]["abstain"] is True  # an empty answer abstains
    assert sorted(p for batch, _ in fake.seen for p in batch) == ["empty", "x"]
    models = client.get("/v1/models").json()
    assert models["object"] == "list" and [m["id"] for m in models["data"]] == ["fake"]
    assert client.get("/v1/models/fake").json()["id"] == "fake"
    assert client.get("/v1/models/other").status_code == 404


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


BAD_CHAT = [
    ({"model": "gpt-4"}, 404, "the model 'gpt-4' does not exist on this server; it serves 'fake'"),
    ({"messages": []}, 400, "messages: List should have at least 1 item"),
    ({"messages": [{"role": "bot", "content": "hi"}]}, 400, "messages[0].role: Input should be 'system'"),
    ({"messages": [{"role": "tool", "content": "x"}]}, 400, "messages[0].role: Input should be"),
    ({"messages": [{"role": "user"}]}, 400, "messages[0].content: Field required"),
    ({"messages": [{"role": "user", "content": 3}]}, 400, "messages[0].content"),
    (
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
        400,
        "messages[0].content",
    ),
    ({"messages": [{"role": "assistant", "content": "hi"}]}, 400, "the last message must not be the assistant's"),
    ({"messages": "hi"}, 400, "messages: Input should be a valid list"),
    ({"model": None}, 400, "model: Input should be a valid string"),
    ({"temperature": 0.7}, 400, "temperature=0.7 is not supported: this server decodes greedily"),
    ({"top_p": 0.9}, 400, "top_p=0.9 is not supported"),
    ({"n": 2}, 400, "n=2 is not supported: greedy decoding gives 2 identical answers"),
    ({"max_tokens": 0}, 400, "max_tokens: Input should be greater than or equal to 1"),
    ({"max_tokens": "8"}, 400, "max_tokens: Input should be a valid integer"),
    ({"max_tokens": 10_000}, 400, "max_tokens=10000 exceeds this server's limit of 512"),
    ({"presence_penalty": 1.0}, 400, "penalties are not supported"),
    ({"logit_bias": {"1": 5}}, 400, "logit_bias is not supported"),
    ({"top_logprobs": 3}, 400, "top_logprobs is not supported"),
    ({"stop": ["a", "b", "c", "d", "e"]}, 400, "stop"),
    ({"stop_on_risk": 2}, 400, "stop_on_risk: Input should be less than or equal to 1"),
    ({"return_trace": "yes"}, 400, "return_trace: Input should be a valid boolean"),
    ({"tools": []}, 400, "tools: Extra inputs are not permitted"),
]


@pytest.mark.parametrize(("change", "status", "message"), BAD_CHAT)
def test_chat_rejects_bad_input_and_keeps_serving(client: TestClient, fake, change, status, message) -> None:  # type: ignore[no-untyped-def]
    r = client.post("/v1/chat/completions", json=CHAT | change)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert message in err["message"] and set(err) == {"message", "type", "param", "code"}
    assert fake.seen == []  # the model never sees a bad request
    assert client.post("/v1/chat/completions", json=CHAT).status_code == 200  # and the service still serves


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (
            {"model": "fake", "prompt": ["a", "b", "c", "d"]},
            400,
            "4 prompts in one request; this server accepts at most 3",
        ),
        ({"model": "fake", "prompt": []}, 400, "prompt"),
        ({"model": "fake", "prompt": 5}, 400, "prompt"),
        ({"model": "fake", "prompt": "x", "echo": True}, 400, "echo is not supported"),
        ({"model": "fake", "prompt": "x", "best_of": 3}, 400, "best_of is not supported"),
        ({"model": "fake", "prompt": "x", "logprobs": 2}, 400, "logprobs is not supported"),
        ({"model": "fake"}, 400, "prompt: Field required"),
    ],
)
def test_completions_reject_bad_input(client: TestClient, fake, body, status, message) -> None:  # type: ignore[no-untyped-def]
    r = client.post("/v1/completions", json=body)
    assert r.status_code == status and message in r.json()["error"]["message"], r.text
    assert fake.seen == [] and client.post("/v1/completions", json={"model": "fake", "prompt": "x"}).status_code == 200


def test_malformed_bodies_and_unknown_routes(client: TestClient) -> None:
    r = client.post("/v1/chat/completions", content=b'{"model": ', headers={"content-type": "application/json"})
    assert r.status_code == 400 and "JSON decode error" in r.json()["error"]["message"]
    r = client.post("/v1/chat/completions", content=b"[1, 2]", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    r = client.post("/v1/embeddings", json={})
    assert r.status_code == 404 and "no such endpoint" in r.json()["error"]["message"]
    assert client.get("/v1/chat/completions").status_code == 405
    assert client.post("/v1/chat/completions", json=CHAT).status_code == 200


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


class BlockingModel(FakeModel):
    """Holds every generate call until released (queue and timeout tests)."""

    def __init__(self) -> None:
        super().__init__()
        self.release, self.entered = threading.Event(), threading.Event()

    def generate(self, prompts, max_new_tokens=32, **kwargs):  # type: ignore[no-untyped-def]
        self.entered.set()
        self.release.wait(10)
        return super().generate(prompts, max_new_tokens)


def test_queue_full_is_a_503_with_retry_after_and_timeouts_a_504() -> None:
    model = BlockingModel()
    cfg = ServeConfig(max_batch=1, max_queue=1, request_timeout=1.5, batch_wait_ms=0)
    with TestClient(create_app(model, config=cfg)) as c:
        results: list[int] = []
        first = threading.Thread(target=lambda: results.append(c.post("/v1/chat/completions", json=CHAT).status_code))
        first.start()
        assert model.entered.wait(5)  # the first request is being decoded; the next one waits in the queue
        second = threading.Thread(target=lambda: results.append(c.post("/v1/chat/completions", json=CHAT).status_code))
        second.start()
        for _ in range(100):
            if c.app.state.gateway.batcher._q.qsize() == 1:  # type: ignore[attr-defined]
                break
            threading.Event().wait(0.02)
        r = c.post("/v1/chat/completions", json=CHAT)
        assert r.status_code == 503 and r.headers["retry-after"] == "1" and r.json()["error"]["code"] == "queue_full"
        first.join()
        second.join()
        assert sorted(results) == [504, 504]  # neither could finish within 1.5 s
        model.release.set()
        assert c.post("/v1/chat/completions", json=CHAT).status_code == 200  # still serving


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


def test_no_model_serves_score_only() -> None:
    with TestClient(create_app(None)) as c:
        r = c.post("/v1/chat/completions", json=CHAT)
        assert r.status_code == 503 and r.json()["error"]["code"] == "no_model"
        assert c.get("/v1/models").json()["data"] == []
        assert c.post("/score", json={"surprisal": [[0.1]], "entropy": [[0.1]]}).status_code == 200


def test_prompt_token_limits_with_a_tokenizer(tiny_model) -> None:  # type: ignore[no-untyped-def]
    with TestClient(create_app(tiny_model, config=ServeConfig(max_prompt_tokens=40))) as c:
        body = {"model": "tiny-random-llama", "messages": [{"role": "user", "content": "word " * 100}], "max_tokens": 2}
        r = c.post("/v1/chat/completions", json=body)
        assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
        assert "this server accepts at most 40" in r.json()["error"]["message"]
        r = c.post("/v1/completions", json={"model": "tiny-random-llama", "prompt": "", "max_tokens": 2})
        assert r.status_code == 400 and "zero tokens" in r.json()["error"]["message"]
        r = c.post("/v1/completions", json={"model": "tiny-random-llama", "prompt": "Paris is", "max_tokens": 2})
        assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == len(
            tiny_model.tokenizer("Paris is")["input_ids"]
        )
        assert c.get("/health").json()["dtype"] == "float32"


def test_config_validates_every_limit() -> None:
    for bad in (
        {"max_batch": 0},
        {"max_queue": True},
        {"request_timeout": 0},
        {"abstain_below": 1.5},
        {"stop_on_risk": -0.1},
        {"drift_statistic": "x"},
        {"drift_direction": "sideways"},
        {"default_max_tokens": 600},
        {"batch_wait_ms": float("nan")},
        {"auth_token_env": ""},
    ):
        with pytest.raises(ValueError):
            ServeConfig(**bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-batch", "0"], "max_batch must be a positive integer"),
        (["--abstain-below", "2"], "abstain_below must be a finite number in [0, 1]"),
        (["--drift-statistic", "perplexity"], "drift_statistic must be one of mean_entropy, c_trace"),
        (["--request-timeout", "0"], "request_timeout must be a finite number"),
        (["--upstream", "ftp://host/v1"], "base_url must be an http(s) URL"),
        (["--upstream", "http://h/v1", "--model", "x"], "leave out --model"),
        (["--backend", "vllm"], "--backend must be hf or llamacpp"),
        (["--dtype", "int8"], "--dtype must be auto, float32, bfloat16 or float16"),
        (["--dtype", "bfloat16", "--backend", "llamacpp"], "--dtype applies to the in-process HF backend only"),
    ],
)
def test_serve_command_refuses_bad_options_with_a_message(args: list[str], message: str) -> None:
    from typer.testing import CliRunner

    from tracecal.cli.app import app

    r = CliRunner().invoke(app, ["serve", *args])
    assert r.exit_code == 2 and message in " ".join(r.output.split()), r.output
    assert "Traceback" not in r.output


# ------------------------------------------------------------------ abstain threshold from `tracecal selective`
@pytest.fixture(scope="module")
def selective_file(tmp_path_factory):  # type: ignore[no-untyped-def]
    from tracecal.analysis.selective import run_selective
    from tracecal.testing import write_synthetic_run

    run = write_synthetic_run(tmp_path_factory.mktemp("sel") / "run", tasks=("triviaqa", "svamp"), n_per_task=400)
    doc = run_selective(run, alpha=0.4, delta=0.1, estimators=["trace"], n_splits=2)
    (run / "selective_none.json").write_text(json.dumps(doc))  # certifies nothing: errors among the top answers
    doc["tasks"]["triviaqa"]["trace"]["deploy"]["threshold"] = 0.3  # a file as a model that certifies one would have
    (run / "selective_0.4.json").write_text(json.dumps(doc))
    return run


def test_the_abstain_threshold_can_come_from_tracecal_selective(selective_file, fake: FakeModel, calibrator) -> None:  # type: ignore[no-untyped-def]
    """--abstain-from: the guaranteed c_TRACE threshold of the run's `trace` estimator, applied to c_TRACE even with a
    calibrator loaded, its provenance in /health; the same threshold as the file's."""
    from tracecal.analysis.selective import deployed_threshold
    from tracecal.cli.serve import _abstain_from

    path = selective_file / "selective_0.4.json"
    info = deployed_threshold(path, "trace", "triviaqa")
    want = json.loads(path.read_text())["tasks"]["triviaqa"]["trace"]["deploy"]["threshold"]
    assert info["threshold"] == want == 0.3 and info["model"] == "synthetic" and info["alpha"] == 0.4
    settings = _abstain_from(path, "triviaqa", None, "synthetic", "auto", None, "hf")
    assert settings["abstain_below"] == want and settings["abstain_on"] == "c_trace"
    with TestClient(create_app(fake, calibrator, ServeConfig(**settings))) as c:
        conf = c.post("/v1/chat/completions", json=CHAT).json()["choices"][0]["confidence"]
        assert conf["abstain_on"] == "c_trace" and conf["abstain_below"] == want
        assert conf["abstain"] == (conf["c_trace"] < want) and conf["probability"] is not None
        assert info["sha256"][:16] in c.get("/health").json()["limits"]["abstain_source"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--abstain-from", "{run}/nope.json"], "cannot read"),
        (["--abstain-from", "{run}/config.json"], "is not a selective.json"),
        (["--abstain-from", "{run}/selective_0.4.json"], "holds the tasks svamp, triviaqa: name one"),
        (["--abstain-from", "{run}/selective_0.4.json", "--abstain-task", "mlqa"], "has no task 'mlqa'"),
        (["--abstain-from", "{run}/selective_none.json", "--abstain-task", "svamp"], "every answer would abstain"),
        (["--abstain-from", "{run}/selective_0.4.json", "--abstain-task", "triviaqa"], "answers of 'synthetic'"),
        (["--abstain-from", "{run}/selective_0.4.json", "--abstain-below", "0.5"], "not both"),
        (["--abstain-task", "svamp"], "--abstain-task goes with --abstain-from"),
    ],
)
def test_bad_abstain_sources_are_refused_with_a_message(selective_file, args: list[str], message: str) -> None:  # type: ignore[no-untyped-def]
    from typer.testing import CliRunner

    from tracecal.cli.app import app

    r = CliRunner().invoke(app, ["serve", *[a.format(run=selective_file) for a in args]])
    assert r.exit_code == 2 and message in " ".join(r.output.split()), r.output
    assert "Traceback" not in r.output


def test_abstain_on_probability_needs_a_calibrator(fake: FakeModel) -> None:
    with pytest.raises(ValueError, match="abstain_on must be"):
        ServeConfig(abstain_on="p")
    with pytest.raises(ValueError, match="needs a calibrator"):
        create_app(fake, None, ServeConfig(abstain_on="probability"))
