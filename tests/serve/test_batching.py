"""`tracecal.serve.batching` (tiny random model, no network): the HF backend's ``on_step`` reports the very
s_t / H_t its traces hold; concurrent requests share one ``generate`` call; ``stop_on_risk`` and cancellation end
an answer at the next step; the gathering window follows arrivals."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
from fastapi.testclient import TestClient

from tests.serve.helpers import MODEL, PROMPTS, sse_events
from tracecal.serve import ServeConfig, create_app
from tracecal.serve.batching import Batcher, Job
from tracecal.traces.trace import Trace


def test_on_step_reports_the_values_the_traces_hold(tiny_model) -> None:  # type: ignore[no-untyped-def]
    base = tiny_model.generate(PROMPTS, max_new_tokens=10)
    seen: dict[int, list[tuple[int, float, float]]] = {}

    def on_step(rows, tokens, s, h):  # type: ignore[no-untyped-def]
        for r, t, a, b in zip(rows, tokens, s, h, strict=True):
            seen.setdefault(int(r), []).append((int(t), a, b))
        return np.array([r == 1 and len(seen[1]) >= 3 for r in rows])  # end answer 1 after 3 tokens

    out = tiny_model.generate(PROMPTS, max_new_tokens=10, on_step=on_step)
    assert out[1].length == 3 and out[1].stop_reason == "stopped"
    for i, (a, b) in enumerate(zip(base, out, strict=True)):
        steps = seen[i][: b.length]
        assert [t for t, _, _ in steps] == b.token_ids.tolist() == a.token_ids[: b.length].tolist()
        np.testing.assert_array_equal([s for _, s, _ in steps], b.surprisal)  # the same numbers, not recomputed
        np.testing.assert_array_equal([h for _, _, h in steps], b.entropy)
        np.testing.assert_allclose(b.surprisal, a.surprisal[: b.length], atol=1e-5)
    assert out[0].stop_reason == base[0].stop_reason and out[0].text == base[0].text


def test_stop_on_risk_ends_generation_early(tiny_model) -> None:  # type: ignore[no-untyped-def]
    body = {"model": MODEL, "messages": [{"role": "user", "content": PROMPTS[1]}], "max_tokens": 12}
    with TestClient(create_app(tiny_model, config=ServeConfig(risk_min_tokens=2))) as c:
        full = c.post("/v1/chat/completions", json=body).json()["choices"][0]
        assert full["confidence"]["tokens"] > 2, "the test needs an answer longer than risk_min_tokens"
        # c_TRACE < 1 always: stop_on_risk=1 stops as soon as allowed (after risk_min_tokens tokens)
        r = c.post("/v1/chat/completions", json=body | {"stop_on_risk": 1.0}).json()["choices"][0]
        assert r["finish_reason"] == "risk" and r["confidence"]["tokens"] == 2
        assert full["message"]["content"].startswith(r["message"]["content"])
        never = c.post("/v1/chat/completions", json=body | {"stop_on_risk": 0.0}).json()["choices"][0]
        assert never == full | {"confidence": never["confidence"]} and never["confidence"] == full["confidence"]
        s = sse_events(c.post("/v1/chat/completions", json=body | {"stop_on_risk": 1.0, "stream": True}).text)
        assert s[-2]["choices"][0]["finish_reason"] == "risk"  # type: ignore[index]
        assert 'tracecal_early_stops_total{reason="risk"} 2.0' in c.get("/metrics").text


def test_a_backend_without_step_hooks_stops_on_risk_after_the_fact() -> None:
    class Whole:
        model_id = "whole"

        def generate(self, prompts, max_new_tokens=32, **kw):  # type: ignore[no-untyped-def]
            u = [0.1, 0.1, 3, 3]
            return [
                Trace(
                    text="abcd",
                    token_ids=np.arange(4),
                    surprisal=u,
                    entropy=u,
                    token_strings=list("abcd"),
                    offsets=np.arange(4),
                    stop_reason="eos",
                )
                for _ in prompts
            ]

    body = {"model": "whole", "messages": [{"role": "user", "content": "q"}], "stop_on_risk": 0.5}
    with TestClient(create_app(Whole())) as c:
        r = c.post("/v1/chat/completions", json=body).json()["choices"][0]
        assert r["finish_reason"] == "risk" and r["message"]["content"] == "abc"  # c_TRACE drops under 0.5 at token 3
        events = sse_events(c.post("/v1/chat/completions", json=body | {"stream": True}).text)
        text = "".join(e["choices"][0]["delta"].get("content", "") for e in events[1:-1])  # type: ignore[index]
        assert text == "abc" and events[-2]["choices"][0]["finish_reason"] == "risk"  # type: ignore[index]


def test_concurrent_requests_share_one_batch(tiny_model) -> None:  # type: ignore[no-untyped-def]
    calls: list[int] = []

    class Spy:
        model_id, tokenizer, context_length = tiny_model.model_id, tiny_model.tokenizer, tiny_model.context_length

        def encode_prompt(self, p):  # type: ignore[no-untyped-def]
            return tiny_model.encode_prompt(p)

        def generate(self, prompts, max_new_tokens=32, on_step=None, **kw):  # type: ignore[no-untyped-def]
            calls.append(len(prompts))
            return tiny_model.generate(prompts, max_new_tokens, on_step=on_step, **kw)

    alone = [t.text for t in tiny_model.generate(PROMPTS, max_new_tokens=6, batch_size=1)]
    with TestClient(create_app(Spy(), config=ServeConfig(batch_wait_ms=300))) as c:
        out: dict[int, str] = {}

        def ask(i: int) -> None:
            body = {"model": MODEL, "messages": [{"role": "user", "content": PROMPTS[i]}], "max_tokens": 6}
            out[i] = c.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]["content"]

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert calls == [3], calls  # one generate call for the three requests
    assert [out[i] for i in range(3)] == alone  # batching changes no greedy answer


def test_cancelled_jobs_stop_at_the_next_step(tiny_model) -> None:  # type: ignore[no-untyped-def]
    cfg = ServeConfig()
    batcher = Batcher({"chat": tiny_model}, cfg, trace_config=None)

    async def run() -> tuple[Trace, str, int]:
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[object] = asyncio.Queue()
        ids = tiny_model.encode_prompt(PROMPTS[0])
        job = Job(prompt={"prompt_ids": ids}, max_tokens=200, loop=loop, future=loop.create_future(), events=events)
        batcher.submit([job])
        n = 0
        while True:
            _, kind, payload = await events.get()  # type: ignore[misc]
            if kind == "done":
                return (*payload, n)  # type: ignore[return-value]
            n += 1
            if n == 2:
                job.cancelled = True  # as when the client goes away

    trace, finish, n_events = asyncio.run(run())
    batcher.close()
    # the decoding thread runs ahead of the event loop by as many steps as the loop lags (one or two on a loaded
    # machine: CI saw 4 tokens); without the cancellation check it would decode all 200
    assert finish == "cancelled" and trace.length <= 12 and n_events <= 12


def test_the_gathering_window_follows_arrivals_and_grows_with_the_last_batch() -> None:
    def job(i: int) -> Job:
        return Job(prompt=str(i), max_tokens=1, loop=None, future=None)  # type: ignore[arg-type]

    def gather(last_batch_s: float) -> int:
        b = Batcher({"chat": object()}, ServeConfig(batch_wait_ms=5, batch_wait_share=0.05), trace_config=None)
        b._last_batch_s = last_batch_s

        def feed() -> None:  # three more requests, 40 ms apart (a burst slower than batch_wait_ms)
            for i in range(1, 4):
                threading.Event().wait(0.04)
                b._q.put(job(i))

        t = threading.Thread(target=feed)
        t.start()
        n = len(b._gather(job(0)))
        t.join()
        return n

    assert gather(0.0) == 1  # a 5 ms window: the next request, 40 ms later, waits for the next batch
    assert gather(6.0) == 4  # after a 6 s batch the window is 300 ms (sliding): the burst forms one batch


def test_a_remote_backend_answers_each_request_when_it_arrives() -> None:
    """Proxy mode (`remote_concurrency`): no batch, so a quick answer does not wait for a slow one sent before it,
    and at most ``max_concurrency`` prompts are upstream at once."""
    from tests.serve.helpers import CHAT, FakeModel

    class Remote(FakeModel):
        max_concurrency = 2

        def __init__(self) -> None:
            super().__init__()
            self.release, self.lock, self.busy, self.most = threading.Event(), threading.Lock(), 0, 0

        def generate(self, prompts, max_new_tokens=32, **kwargs):  # type: ignore[no-untyped-def]
            with self.lock:
                self.busy += 1
                self.most = max(self.most, self.busy)
            if prompts[0][0]["content"] == "slow":
                self.release.wait(10)
            with self.lock:
                self.busy -= 1
            return super().generate(prompts, max_new_tokens)

    from tracecal.serve.batching import remote_concurrency

    model = Remote()
    assert remote_concurrency({"chat": model, "text": model}, {"chat": False, "text": False}) == 2
    assert remote_concurrency({"chat": FakeModel()}, {"chat": False}) == 0  # in-process: batched
    slow = dict(CHAT, messages=[{"role": "user", "content": "slow"}])
    with TestClient(create_app(model)) as c:
        pending = threading.Thread(target=lambda: c.post("/v1/chat/completions", json=slow))
        pending.start()
        while not model.busy:
            threading.Event().wait(0.01)
        quick = [c.post("/v1/chat/completions", json=CHAT) for _ in range(3)]  # answered while "slow" waits
        assert all(r.status_code == 200 for r in quick) and model.busy == 1  # "slow" still upstream
        model.release.set()
        pending.join(10)
    assert [len(b) for b, _ in model.seen] == [1, 1, 1, 1] and model.most <= 2
