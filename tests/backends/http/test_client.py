"""The HTTP client of the OpenAI-compatible backend (`tracecal.backends.http.client`): retries with backoff and
jitter, Retry-After, timeouts, which failures are retried and which are settings to fix, API keys."""

from __future__ import annotations

import email.utils
import json
from pathlib import Path

import httpx
import pytest

from tests.backends.http.test_model import Fake, flaky, make, raises, server, status
from tracecal.backends.http import HTTPBackendError, HTTPModel
from tracecal.traces.io import export_jsonl, save_traces


# ------------------------------------------------------------------------------------------ retries
def test_429_burst_then_success_backs_off_exponentially_with_jitter() -> None:
    fake = Fake()
    handler, seen = flaky([status(429)] * 4)
    (t,) = make(handler, fake, backoff=0.5, max_wait=60).generate(["q"])
    assert t.text == "Paris." and len(seen) == 5 and len(fake.waits) == 4
    for i, w in enumerate(fake.waits):  # backoff·2^i, jittered ×[0.5, 1]
        assert 0.5 * 0.5 * 2**i <= w <= 0.5 * 2**i


def test_503_then_success_and_waits_are_capped() -> None:
    fake = Fake()
    handler, seen = flaky([status(503), status(502), status(500)])
    (t,) = make(handler, fake, backoff=10.0, max_wait=12.0).generate(["q"])
    assert t.text == "Paris." and len(seen) == 4 and max(fake.waits) <= 12.0


def test_retries_are_bounded() -> None:
    fake = Fake()
    handler, seen = flaky([status(503)] * 100)
    with pytest.raises(HTTPBackendError, match=r"HTTP 503: busy \(gave up after 4 attempts"):
        make(handler, fake, max_retries=3).generate(["q"])
    assert len(seen) == 4 and len(fake.waits) == 3
    handler, seen = flaky([status(429)] * 100)
    with pytest.raises(HTTPBackendError, match="gave up after 1 attempt;"):
        make(handler, fake, max_retries=0).generate(["q"])
    assert len(seen) == 1


@pytest.mark.parametrize("exc", [httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError])
def test_connection_errors_are_retried(exc: type[Exception]) -> None:
    fake = Fake()
    handler, seen = flaky([raises(exc)] * 2)
    (t,) = make(handler, fake).generate(["q"])
    assert t.text == "Paris." and len(seen) == 3 and len(fake.waits) == 2
    handler, seen = flaky([raises(exc)] * 100)
    with pytest.raises(HTTPBackendError, match=r"could not reach the server .*gave up after 6 attempts"):
        make(handler, fake).generate(["q"])


def test_retry_after_is_honoured() -> None:
    fake = Fake()
    handler, _ = flaky([status(429, {"Retry-After": "7"}), status(503, {"Retry-After": "0.25"})])
    make(handler, fake).generate(["q"])
    assert fake.waits == [7.0, 0.25]
    # an HTTP date, read against the (fake) clock; and a Retry-After above max_wait is cut to it
    fake = Fake()
    date = email.utils.formatdate(fake.now + 30, usegmt=True)
    handler, _ = flaky([status(429, {"Retry-After": date}), status(429, {"Retry-After": "3600"})])
    make(handler, fake, max_wait=100.0).generate(["q"])
    assert fake.waits[0] == pytest.approx(30.0, abs=1.0) and fake.waits[1] == 100.0


def test_timeout_per_request_and_retried() -> None:
    fake = Fake()
    handler, seen = flaky([raises(httpx.ReadTimeout)])
    (t,) = make(handler, fake, timeout=3.5).generate(["q"])
    assert t.text == "Paris." and len(seen) == 2
    assert all(r.extensions["timeout"]["read"] == 3.5 for r in seen)
    handler, _ = flaky([raises(httpx.ReadTimeout)] * 100)
    with pytest.raises(HTTPBackendError, match=r"no answer within 3.5 s \(ReadTimeout\)"):
        make(handler, fake, timeout=3.5, max_retries=2).generate(["q"])


def test_a_busy_server_mentioning_logprobs_is_still_retried() -> None:
    fake = Fake()
    handler, seen = flaky([status(503, text="overloaded; logprobs requests queued")])
    (t,) = make(handler, fake).generate(["q"])
    assert t.text == "Paris." and len(seen) == 2


def test_client_errors_are_not_retried() -> None:
    for code in (400, 404, 422):
        handler, seen = flaky([status(code, text="bad request")] * 10)
        with pytest.raises(HTTPBackendError, match=f"HTTP {code}: bad request"):
            make(handler).generate(["q"])
        assert len(seen) == 1
    with pytest.raises(HTTPBackendError, match="404"):
        HTTPModel("http://127.0.0.1:9/v2", client=httpx.Client(transport=httpx.MockTransport(server))).generate(["x"])


# ------------------------------------------------------------------------------------------ API keys
def test_api_key_from_the_environment_at_request_time(monkeypatch: pytest.MonkeyPatch) -> None:
    handler, seen = flaky([])
    monkeypatch.delenv("TRACECAL_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    m = make(handler)
    m.generate(["q"])
    assert "authorization" not in seen[-1].headers
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-1")
    m.generate(["q"])
    assert seen[-1].headers["authorization"] == "Bearer sk-openai-1"
    monkeypatch.setenv("TRACECAL_API_KEY", "sk-tracecal-2")
    m.generate(["q"])
    assert seen[-1].headers["authorization"] == "Bearer sk-tracecal-2"


def test_api_key_is_never_an_argument_nor_in_the_url() -> None:
    with pytest.raises(ValueError, match="takes no api_key argument.*TRACECAL_API_KEY"):
        HTTPModel("http://x/v1", api_key="sk-secret")
    for url in ("http://user:sk-secret@x/v1", "http://x/v1?api_key=sk-secret"):
        with pytest.raises(ValueError, match="must not contain credentials or a query string") as err:
            HTTPModel(url)
        assert "sk-secret" not in str(err.value)


def test_api_key_never_reaches_traces_files_or_errors(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    key = "sk-tracecal-SECRET-0123456789"
    monkeypatch.setenv("TRACECAL_API_KEY", key)
    m = make()
    traces = m.generate(["q", "r"], ids=["a", "b"])
    blob = json.dumps([t.to_dict() for t in traces], default=str) + repr(traces) + repr(vars(m))
    assert key not in blob
    for path in (save_traces(traces, tmp_path / "t.parquet"), export_jsonl(traces, tmp_path / "t.jsonl")):
        assert key.encode() not in Path(path).read_bytes()
    with pytest.raises(HTTPBackendError, match="refused the request; set its API key in TRACECAL_API_KEY") as err:
        make(status(401, text="invalid key")).generate(["q"])
    assert key not in str(err.value)
