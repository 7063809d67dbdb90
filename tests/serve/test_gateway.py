"""`tracecal.serve.gateway`: queue full (503, Retry-After), timeouts (504), prompt-token limits, calibrator provenance
and what a failed generation means for the client."""

from __future__ import annotations

import threading

import pytest
from fastapi.testclient import TestClient

from tests.serve.helpers import CHAT, BlockingModel
from tracecal.serve import ServeConfig, create_app


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


def test_calibrator_provenance_and_what_a_failure_means(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import hashlib

    from tracecal.backends.base import PromptTooLongError
    from tracecal.backends.http import HTTPBackendError
    from tracecal.serve.errors import APIError
    from tracecal.serve.gateway import calibrator_info, job_error

    assert calibrator_info(None) is None
    path = tmp_path / "cal.json"
    path.write_text("{}")
    info = calibrator_info(object(), path)
    assert info == {"kind": "object", "path": str(path.resolve()), "sha256": hashlib.sha256(b"{}").hexdigest()}
    own = APIError(409, "mine")
    assert job_error(own) is own
    assert job_error(HTTPBackendError("x")).status == 502
    assert job_error(PromptTooLongError("long")).code == "context_length_exceeded"
    assert (job_error(ValueError("odd")).status, job_error(RuntimeError("boom")).status) == (400, 500)


def test_the_gateway_checks_the_model_name_and_the_token_budget(fake) -> None:  # type: ignore[no-untyped-def]
    from tracecal.serve.errors import APIError
    from tracecal.serve.gateway import Gateway

    gw = Gateway(fake, config=ServeConfig(max_tokens=10, default_max_tokens=4))
    try:
        assert gw.model_id == "fake" and gw.model_dtype is None
        assert (gw.budget(None), gw.budget(10)) == (4, 10)
        with pytest.raises(APIError, match="exceeds this server's limit of 10"):
            gw.budget(11)
        assert gw.drift.detector.threshold == 8.0  # the drift detector takes ServeConfig's settings
    finally:
        gw.batcher.close()
