"""`tracecal.serve.schemas`: every bad request is a 400 OpenAI error naming the field, the model never sees it and the
service keeps serving; the greedy-only fields."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.serve.helpers import CHAT

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
    ({"messages": [{"role": "assistant", "content": "hi"}]}, 400, "the last message is the assistant's"),
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
    ({"stop_on_risk": 2}, 400, "stop_on_risk must be a finite number in [0, 1] or None, got 2"),
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


def test_the_request_models_read_their_fields() -> None:
    from pydantic import ValidationError

    from tracecal.serve.schemas import GREEDY_ONLY, ChatCompletionRequest, CompletionRequest, ScoreRequest

    chat = ChatCompletionRequest(
        model="m",
        messages=[{"role": "developer", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
        stop=["x", ""],
        max_tokens=5,
        max_completion_tokens=7,
        stream_options={"include_usage": True},
    )
    assert chat.prompt_messages() == [{"role": "system", "content": "ab"}]
    assert chat.stops == ("x",) and chat.token_budget == 7 and chat.include_usage
    text = CompletionRequest(model="m", prompt="p", temperature=0, top_p=1, n=1, presence_penalty=0)
    assert text.prompts() == ["p"] and text.token_budget is None and not text.include_usage
    for name, (neutral, _) in GREEDY_ONLY.items():  # the neutral value passes, any other is refused by name
        assert getattr(CompletionRequest(model="m", prompt="p", **{name: neutral}), name) == neutral
        other = 2 if name == "n" else 0.5
        try:
            CompletionRequest(model="m", prompt="p", **{name: other})
        except ValidationError as e:
            assert e.errors()[0]["loc"] == (name,)
        else:
            raise AssertionError(name)
    assert ScoreRequest(surprisal=[[0.1], []], entropy=[[0.2], []]).surprisal == [[0.1], []]


SURROGATE = "\\ud800"  # a JSON escape of a lone (high) surrogate: json.loads accepts it, UTF-8 cannot encode it


LONE = "lone surrogate"


@pytest.mark.parametrize(
    ("path", "raw", "param", "message"),
    [
        ("/v1/chat/completions", '"messages": [{"role": "user", "content": "a%sb"}]', "messages[0].content", LONE),
        (
            "/v1/chat/completions",
            '"messages": [{"role": "user", "content": [{"type": "text", "text": "%s"}]}]',
            "messages[0].content",
            LONE,
        ),
        ("/v1/chat/completions", '"messages": [{"role": "user", "content": "hi", "name": "%s"}]', "name", LONE),
        ("/v1/chat/completions", '"messages": [{"role": "user", "content": "hi"}], "stop": ["%s"]', "stop", LONE),
        ("/v1/completions", '"prompt": "%s"', "prompt", LONE),
        ("/v1/completions", '"prompt": ["ok", "%s"]', "prompt", LONE),
        ("/v1/completions", '"prompt": "ok", "user": "%s"', "user", LONE),
        ("/v1/completions", '"prompt": "ok", "%s": 1', None, "unable to parse raw data as a unicode string"),
    ],
)
def test_a_lone_surrogate_is_a_400_naming_the_field(
    client: TestClient, path: str, raw: str, param: str | None, message: str
) -> None:
    body = '{"model": "fake", "max_tokens": 2, ' + raw % SURROGATE + "}"
    r = client.post(path, content=body.encode(), headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert (param is None or param in (err["param"] or "")) and message in err["message"], err
    assert client.post("/v1/chat/completions", json=CHAT).status_code == 200  # still serving


def test_an_error_that_echoes_a_lone_surrogate_can_still_be_sent() -> None:
    from tracecal.serve.errors import error_body, printable, validation_detail

    assert printable("a\ud800b") == "a\\ud800b" and printable("ünï") == "ünï"
    assert error_body("bad \ud800", "t", "x\udfff")["error"] == {
        "message": "bad \\ud800",
        "type": "t",
        "param": "x\\udfff",
        "code": None,
    }
    assert validation_detail([{"loc": ("body", "\ud800"), "msg": "m\ud800"}])[0]["loc"] == ["body", "\\ud800"]
