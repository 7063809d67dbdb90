"""`tracecal.serve.answers`: ``POST /v1/score-answers`` gives the traces ``trace_answers`` gives (tiny random model),
their summary and confidence (calibrated with the loaded calibrator), and refuses malformed items and items over a
limit with an OpenAI error naming the item."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fastapi.testclient import TestClient

from tests.serve.helpers import MODEL, PROMPTS, FakeModel, fake_trace
from tracecal.backends.base import BackendUnsupportedError
from tracecal.serve import ServeConfig, create_app
from tracecal.signals.operators import trace_confidence

ANSWERS = ["Paris.", "Blue", ""]


class AnswerModel(FakeModel):
    """`FakeModel` that scores answers: the fixed three-token trace for each (``fail``: cannot score at all)."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.fail, self.scored = fail, []  # type: ignore[var-annotated]

    def trace_answers(self, prompts, answers, **options):  # type: ignore[no-untyped-def]
        if self.fail:
            raise BackendUnsupportedError("this server cannot score given answers")
        self.scored.append((list(prompts), list(answers), options))
        return [fake_trace(p) for p in prompts]


def _body(items: list[dict], model: str = MODEL, **extra: object) -> dict:  # type: ignore[type-arg]
    return {"model": model, "items": items} | extra


def test_scores_equal_trace_answers_and_carry_the_calibrated_probability(tiny_model, calibrator) -> None:  # type: ignore[no-untyped-def]
    items = [
        {"prompt": PROMPTS[0], "answer": ANSWERS[0], "id": "q1"},
        {
            "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": PROMPTS[1]}],
            "answer": ANSWERS[1],
        },
        {"prompt": PROMPTS[2], "answer": ANSWERS[2]},
    ]
    with TestClient(create_app(tiny_model, calibrator)) as c:
        r = c.post("/v1/score-answers", json=_body(items, return_trace=True))
    assert r.status_code == 200, r.text
    out = r.json()
    msgs = [
        PROMPTS[0],
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": PROMPTS[1]}],
        PROMPTS[2],
    ]
    ref = tiny_model.trace_answers(msgs, ANSWERS)
    assert out["object"] == "list" and out["model"] == MODEL and [d["index"] for d in out["data"]] == [0, 1, 2]
    assert [d["id"] for d in out["data"]] == ["q1", None, None]
    want_c, want_p = trace_confidence(ref), calibrator.predict_proba(ref)
    for d, t, c, p in zip(out["data"], ref, want_c, want_p, strict=True):
        assert d["tokens"] == t.length and d["stop_reason"] == t.stop_reason
        assert d["end_prob"] == pytest.approx(t.meta["end_prob"], rel=1e-9)
        conf = d["confidence"]
        assert conf["trace"]["surprisal"] == pytest.approx(t.surprisal.tolist(), abs=1e-9)
        if t.length:
            assert d["mean_surprisal"] == pytest.approx(float(np.mean(t.surprisal)), rel=1e-9)
            assert d["mean_entropy"] == pytest.approx(float(np.mean(t.entropy)), rel=1e-9)
            assert conf["c_trace"] == pytest.approx(float(c), rel=1e-9)
            assert conf["probability"] == pytest.approx(float(p), rel=1e-9) and conf["calibrator"] == "TracePlus"
        else:  # the empty answer: no means, no c_TRACE, abstains under a threshold
            assert d["mean_surprisal"] is None and d["mean_entropy"] is None and conf["c_trace"] is None
    assert out["usage"]["answer_tokens"] == sum(t.length for t in ref)
    assert out["usage"]["prompt_tokens"] == sum(len(t.prompt_ids) for t in ref)


@pytest.mark.parametrize(
    ("items", "param", "msg"),
    [
        ([{"prompt": "q", "messages": [{"role": "user", "content": "q"}], "answer": "a"}], "items[0]", "exactly one"),
        ([{"prompt": "q", "answer": "a"}, {"answer": "a"}], "items[1]", "exactly one"),
        ([{"prompt": "q"}], "items[0].answer", "Field required"),
        ([{"prompt": "q", "answer": 3}], "items[0].answer", "valid string"),
        ([{"prompt": "q", "answer": "a", "score": 1}], "items[0].score", "Extra inputs"),
        ([{"messages": [{"role": "assistant", "content": "x"}], "answer": "a"}], "items[0].messages", "assistant"),
        ([{"prompt": "", "answer": "a"}], "items[0].prompt", "at least 1"),
        ([{"prompt": "\ud800", "answer": "a"}], "items[0].prompt", "surrogate"),
        ([], "items", "at least 1"),
        ([{"prompt": "q", "answer": "a"}] * 4, "items", "at most 3 (--max-prompts)"),
    ],
)
def test_malformed_items_are_400s_naming_the_item(items, param, msg) -> None:  # type: ignore[no-untyped-def]
    model = AnswerModel()
    with TestClient(create_app(model, config=ServeConfig(max_prompts=3))) as c:
        raw = json.dumps(_body(items, model="fake"))  # ASCII escapes: a lone surrogate is sent as JSON allows
        r = c.post("/v1/score-answers", content=raw, headers={"content-type": "application/json"})
        ok = c.post("/v1/score-answers", json=_body([{"prompt": "q", "answer": "a"}], model="fake"))
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and msg in err["message"] and err["type"] == "invalid_request_error", err
    assert ok.status_code == 200 and not model.scored[:-1]  # refused before the backend; the server keeps serving


def test_summary_of_a_backend_trace_and_the_other_refusals() -> None:
    model = AnswerModel()
    with TestClient(create_app(model, config=ServeConfig(max_body_bytes=2000))) as c:
        r = c.post("/v1/score-answers", json=_body([{"prompt": "q", "answer": "abc", "id": "x"}], model="fake"))
        assert c.post("/v1/score-answers", json=_body([{"prompt": "q", "answer": "a"}])).status_code == 404
        big = c.post("/v1/score-answers", json=_body([{"prompt": "q" * 3000, "answer": "a"}], model="fake"))
    assert r.status_code == 200, r.text
    d = r.json()["data"][0]
    assert d == {
        "index": 0,
        "id": "x",
        "tokens": 3,
        "stop_reason": "eos",
        "mean_surprisal": pytest.approx(0.5666666666),
        "mean_entropy": pytest.approx(2.0),
        "end_prob": None,
        "confidence": d["confidence"],
    }
    assert model.scored == [(["q"], ["abc"], {"ids": ["x"], "batch_size": 8})]  # the prompt as given: no tokenizer
    assert big.status_code == 413 and big.json()["error"]["code"] == "request_too_large"
    with TestClient(create_app(AnswerModel(fail=True))) as c:
        r = c.post("/v1/score-answers", json=_body([{"prompt": "q", "answer": "a"}], model="fake"))
    assert r.status_code == 400 and r.json()["error"]["code"] == "unsupported"  # permanent: not a retried 5xx
    assert "cannot score" in r.json()["error"]["message"]
    with TestClient(create_app(None)) as c:
        assert (
            c.post("/v1/score-answers", json=_body([{"prompt": "q", "answer": "a"}])).status_code == 404
        )  # --no-model: permanent, not a retried 503


def test_token_limits_name_the_item(tiny_model) -> None:  # type: ignore[no-untyped-def]
    cfg = ServeConfig(max_tokens=4, default_max_tokens=4, max_prompt_tokens=40)
    long_answer = "one two three four five six seven eight"
    with TestClient(create_app(tiny_model, config=cfg)) as c:
        r1 = c.post(
            "/v1/score-answers", json=_body([{"prompt": "q", "answer": "ok"}, {"prompt": "q", "answer": long_answer}])
        )
        r2 = c.post("/v1/score-answers", json=_body([{"prompt": "word " * 60, "answer": "ok"}]))
        ok = c.post("/v1/score-answers", json=_body([{"prompt": "q", "answer": "ok"}]))
    e1, e2 = r1.json()["error"], r2.json()["error"]
    assert r1.status_code == 400 and e1["param"] == "items[1].answer" and "at most 4 (--max-tokens)" in e1["message"]
    assert e1["code"] == "context_length_exceeded"
    assert (
        r2.status_code == 400 and e2["param"] == "items[0].prompt" and e2["message"].startswith("items[0]: the prompt")
    )
    assert "--max-prompt-tokens" in e2["message"] and ok.status_code == 200
