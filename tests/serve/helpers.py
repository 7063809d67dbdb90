"""Shared by the gateway tests: a fake backend (fixed traces, no step hooks), a blocking one, the SSE reader, and a
uvicorn server on a free 127.0.0.1 port."""

from __future__ import annotations

import json
import threading
import time

import numpy as np

from tracecal.traces.trace import Trace

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


class BlockingModel(FakeModel):
    """Holds every generate call until released (queue and timeout tests)."""

    def __init__(self) -> None:
        super().__init__()
        self.release, self.entered = threading.Event(), threading.Event()

    def generate(self, prompts, max_new_tokens=32, **kwargs):  # type: ignore[no-untyped-def]
        self.entered.set()
        self.release.wait(10)
        return super().generate(prompts, max_new_tokens)


def error_messages(r) -> str:  # type: ignore[no-untyped-def]
    """The message of an error answer (OpenAI's shape, on every route), its field paths included."""
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    return str(body["error"]["message"])


PROMPTS = ["What is the capital of France?", "Name a colour.", "hi"]


MODEL = "tiny-random-llama"


def sse_events(text: str) -> list[object]:
    """The JSON payloads of an SSE body, and the final "[DONE]" marker as a string."""
    out: list[object] = []
    for block in text.split("\n\n"):
        if block.startswith("data: "):
            data = block[len("data: ") :]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


class TokenizedModel(FakeModel):
    """`FakeModel` with a real tokenizer: the gateway encodes prompts with `prompt_ids` (chat template), and
    ``seen`` holds the ids the backend would have decoded from."""

    def __init__(self, tokenizer) -> None:  # type: ignore[no-untyped-def]
        super().__init__()
        self.tokenizer = tokenizer

    def encode_prompt(self, prompt):  # type: ignore[no-untyped-def]
        from tracecal.backends.prompting import prompt_ids

        return prompt_ids(self.tokenizer, prompt, chat=True)


class Server:
    """A uvicorn server for ``app`` on a free 127.0.0.1 port, in a thread."""

    def __init__(self, app) -> None:  # type: ignore[no-untyped-def]
        import uvicorn

        from tracecal.serve.app import listening_socket

        self.sock = listening_socket("127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> Server:
        self.thread.start()
        for _ in range(600):
            if self.server.started:
                return self
            time.sleep(0.05)
        raise RuntimeError("uvicorn did not start")

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(60)
        self.sock.close()
