"""The HTTP backend against a REAL llama.cpp server (llama-cpp-python), directly and through a fault-injecting
proxy (429 bursts, dropped log-probs, malformed bodies, dropped connections), and an evaluation run whose
server is killed mid-run and restarted: the resumed run loses and duplicates nothing.

The server is started by a module fixture on a free port (``python -m llama_cpp.server``, the default GGUF,
one thread, ``--logits_all true``) and stopped after. Skipped when ``llama_cpp.server`` is not installed.
"""

from __future__ import annotations

import collections
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from tracecal.backends.http import HTTPBackendError, HTTPModel, LogprobsUnavailableError
from tracecal.backends.topk import topk_entropy

pytestmark = [pytest.mark.integration, pytest.mark.slow]
VOCAB = 49152
KEY = "sk-tracecal-integration-SECRET-42"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LlamaServer:
    """``python -m llama_cpp.server`` on 127.0.0.1:port, startable again on the same port."""

    def __init__(self, gguf: str, port: int, log: Path) -> None:
        self.gguf, self.port, self.log = gguf, port, log
        self.url = f"http://127.0.0.1:{port}/v1"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, wait_s: float = 180.0) -> None:
        cmd = [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            self.gguf,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--n_threads",
            "1",
            "--logits_all",
            "true",
            "--model_alias",
            "smollm2",
            "--n_ctx",
            "2048",
        ]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log.read_text()[-2000:]
                raise RuntimeError(f"llama.cpp server exited with {self.proc.returncode}: {tail}")
            try:
                if httpx.get(f"{self.url}/models", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"llama.cpp server not ready after {wait_s:.0f} s: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        self.proc = None


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    pytest.importorskip("llama_cpp.server", reason="llama-cpp-python[server] is not installed")
    from tracecal.backends.hf import default_gguf_path

    gguf = default_gguf_path()
    if not Path(gguf).exists():
        pytest.skip(f"the default GGUF is missing: {gguf}")
    server = LlamaServer(str(gguf), free_port(), tmp_path_factory.mktemp("llama") / "server.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()


class FaultProxy(ThreadingHTTPServer):
    """Forwards every request to ``upstream``; ``faults`` (a queue) injects one fault per request first:
    ``429`` (Retry-After: 1), ``drop_logprobs``, ``malformed`` (half the body), ``close`` (no answer)."""

    daemon_threads = True

    def __init__(self, upstream: str) -> None:
        super().__init__(("127.0.0.1", 0), ProxyHandler)
        self.upstream = upstream.rstrip("/")
        self.faults: collections.deque[str] = collections.deque()
        self.seen_auth: list[str | None] = []
        self.posts = 0
        self.before_post: Callable[[int], None] | None = None  # called with the POST's number (1, 2, …)
        self.lock = threading.Lock()
        self.client = httpx.Client(timeout=120.0)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def next_fault(self) -> str | None:
        with self.lock:
            return self.faults.popleft() if self.faults else None


class ProxyHandler(BaseHTTPRequestHandler):
    server: FaultProxy

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for k, v in ({"Content-Type": "application/json", "Content-Length": str(len(body))} | (headers or {})).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _forward(self, method: str) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) if method == "POST" else None
        self.server.seen_auth.append(self.headers.get("Authorization"))
        if method == "POST" and self.server.before_post is not None:
            with self.server.lock:
                self.server.posts += 1
                n = self.server.posts
            self.server.before_post(n)
        fault = self.server.next_fault()
        if fault == "429":
            return self._send(429, b'{"error": "rate limited"}', {"Retry-After": "1"})
        if fault == "close":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return None
        path = self.path[len("/v1") :] if self.path.startswith("/v1") else self.path
        try:
            r = self.server.client.request(
                method, self.server.upstream + path, content=body, headers={"Content-Type": "application/json"}
            )
        except httpx.HTTPError as e:  # upstream down: what a reverse proxy answers
            return self._send(502, json.dumps({"error": f"bad gateway: {type(e).__name__}"}).encode())
        out = r.content
        if fault == "drop_logprobs":
            data = r.json()
            for choice in data.get("choices", []):
                choice.pop("logprobs", None)
            out = json.dumps(data).encode()
        elif fault == "malformed":
            out = out[: len(out) // 2]
        return self._send(r.status_code, out)

    def do_GET(self) -> None:  # noqa: N802
        self._forward("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._forward("POST")


@pytest.fixture
def proxy(llama: LlamaServer) -> Iterator[FaultProxy]:
    p = FaultProxy(llama.url)
    thread = threading.Thread(target=p.serve_forever, daemon=True)
    thread.start()
    try:
        yield p
    finally:
        p.shutdown()
        p.server_close()
        p.client.close()


class FakeSleep:
    def __init__(self) -> None:
        self.waits: list[float] = []

    def __call__(self, s: float) -> None:
        self.waits.append(s)


QUESTIONS = ["What is the capital of France?", "Who wrote Hamlet?", "What is 2 + 2?"]


def model(url: str, **kw: Any) -> HTTPModel:
    return HTTPModel(url, vocab_size=VOCAB, max_concurrency=2, timeout=120.0, **kw)


@pytest.fixture(scope="module")
def direct(llama: LlamaServer) -> list[Any]:
    return model(llama.url).generate(QUESTIONS, max_new_tokens=8)


def test_real_server_traces(llama: LlamaServer, direct: list[Any]) -> None:
    m = model(llama.url)
    assert m.model_id == "smollm2"  # asked from GET /v1/models
    for t in direct:
        assert t.length > 0 and t.entropy_kind == "topk" and t.model_id == "smollm2"
        assert t.topk_logprobs is not None and t.topk_logprobs.shape == (t.length, 20)
        lo = topk_entropy(t.topk_logprobs, VOCAB, "capped_tail")
        hi = topk_entropy(t.topk_logprobs, VOCAB, "uniform_tail")
        assert ((lo - 1e-9 <= t.entropy) & (t.entropy <= hi + 1e-9)).all()
        assert "".join(t.token_strings) == t.text


def test_429_burst_through_the_proxy(proxy: FaultProxy, direct: list[Any]) -> None:
    proxy.faults.extend(["429"] * 4)
    sleep = FakeSleep()
    traces = model(proxy.url, model="smollm2", sleep=sleep).generate(QUESTIONS, max_new_tokens=8)
    assert sleep.waits == [1.0] * 4  # Retry-After honoured
    assert len(proxy.seen_auth) == 4 + len(QUESTIONS)  # every prompt answered once after the burst
    # (texts are not compared: llama-cpp-python reuses the previous request's KV prefix, so its greedy
    # answers vary with what it served before)
    assert len(traces) == len(direct) and all(t.length > 0 and t.model_id == "smollm2" for t in traces)


def test_dropped_connection_through_the_proxy(proxy: FaultProxy, direct: list[Any]) -> None:
    proxy.faults.extend(["close", "close"])
    sleep = FakeSleep()
    traces = model(proxy.url, model="smollm2", sleep=sleep).generate(QUESTIONS[:1], max_new_tokens=8)
    assert len(sleep.waits) == 2 and len(proxy.seen_auth) == 3 and traces[0].length > 0


def test_dropped_logprobs_through_the_proxy(proxy: FaultProxy) -> None:
    proxy.faults.append("drop_logprobs")
    with pytest.raises(LogprobsUnavailableError, match="--logits_all true"):
        model(proxy.url, model="smollm2", max_retries=0).generate(QUESTIONS[:1], max_new_tokens=4)


def test_malformed_body_through_the_proxy(proxy: FaultProxy) -> None:
    proxy.faults.append("malformed")
    with pytest.raises(HTTPBackendError, match="no JSON"):
        model(proxy.url, model="smollm2", max_retries=0).generate(QUESTIONS[:1], max_new_tokens=4)


@pytest.mark.filterwarnings("ignore:.*AUROC is undefined")
def test_server_killed_mid_run_and_restarted_resumes(
    llama: LlamaServer, proxy: FaultProxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run over the real server; the server dies when the second shard's first request arrives; the run fails;
    the server comes back; the same command resumes: every question answered once, the first shard untouched.
    (The run's scores are not the point: 8 short answers, often all wrong.)"""
    from tracecal.evaluation.config import EvalConfig
    from tracecal.evaluation.run import evaluate
    from tracecal.evaluation.runstore import RunStore
    from tracecal.tasks import get_task

    monkeypatch.setenv("TRACECAL_API_KEY", KEY)
    run = tmp_path / "run"

    def cfg() -> EvalConfig:
        return EvalConfig(
            tasks=["triviaqa"],
            limit=8,
            estimators=["trace", "neg_mean_entropy"],
            n_seeds=2,
            shard_size=4,
            batch_size=2,
            max_new_tokens=8,
        )

    def kill_at_shard_2(n: int) -> None:  # the 5th answer request (shard 1 = 4 requests) reaches the proxy
        if n == 5:
            llama.stop()

    proxy.before_post = kill_at_shard_2
    try:
        flaky = model(proxy.url, model="smollm2", max_retries=1, backoff=0.05)
        with pytest.raises(HTTPBackendError, match=r"HTTP 502.*gave up after 2 attempts"):
            evaluate(run, cfg(), model=flaky)
        store = RunStore(run)
        assert store.has("traces", "triviaqa", 0) and not store.has("traces", "triviaqa", 1)
        first = {p: p.read_bytes() for p in run.rglob("*.parquet")}
    finally:
        proxy.before_post = None
        llama.start()  # the rest of the module needs it too
    assert evaluate(run, cfg(), model=model(proxy.url, model="smollm2")) is not None
    store = RunStore(run)
    task = get_task("triviaqa")
    examples = task.load(limit=8)
    assert [t.id for t in store.read_traces("triviaqa")] == [ex.id for ex in examples]  # none lost, none twice
    assert all(p.read_bytes() == b for p, b in first.items())  # the first shard was not recomputed
    resumed = store.read_traces_shard("triviaqa", 1)
    assert len(resumed) == 4 and all(t.model_id == "smollm2" and t.entropy_kind == "topk" for t in resumed)
    assert set(proxy.seen_auth) == {f"Bearer {KEY}"}  # the key was sent …
    for path in run.rglob("*"):  # … and written nowhere
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


@pytest.mark.filterwarnings("ignore:.*AUROC is undefined")
def test_tracecal_evaluate_with_a_server_url(llama: LlamaServer, tmp_path: Path) -> None:
    """``tracecal evaluate --model http://…/v1 --estimators trace-only``: the run's traces come from the server."""
    from typer.testing import CliRunner

    from tracecal.cli.app import app
    from tracecal.evaluation.config import EvalConfig
    from tracecal.evaluation.runstore import RunStore
    from tracecal.evaluation.scheduler import Resources

    lm = Resources(EvalConfig(tasks=["triviaqa"], model=llama.url)).get("lm")
    assert isinstance(lm, HTTPModel)  # a URL is served by the HTTP backend
    run = tmp_path / "run"
    args = [
        "evaluate",
        "--model",
        llama.url,
        "--tasks",
        "triviaqa",
        "--limit",
        "4",
        "--estimators",
        "trace",
        "--seeds",
        "2",
        "--shard-size",
        "2",
        "--max-new-tokens",
        "8",
        "--run-dir",
        str(run),
        "--no-report",
    ]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    traces = RunStore(run).read_traces("triviaqa")
    assert len(traces) == 4 and {t.entropy_kind for t in traces} == {"topk"}
    assert {t.model_id for t in traces} == {"smollm2"}
