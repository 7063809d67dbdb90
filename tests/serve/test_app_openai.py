"""The gateway on a real uvicorn server (127.0.0.1, a free port, started and stopped here) with the real default
model, spoken to by the official ``openai`` client: answers equal ``model.generate``'s, streamed and non-streamed
confidences agree, a client that leaves cancels its generation, and a TriviaQA → SVAMP stream raises the drift
alarm after the switch and not before.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import openai
import pytest

from tests.serve.helpers import Server
from tracecal.backends.hf import DEFAULT_MODEL
from tracecal.serve import ServeConfig, create_app
from tracecal.signals.operators import trace_confidence
from tracecal.tasks import get_task
from tracecal.traces.io import load_traces

pytestmark = pytest.mark.integration

QUESTION = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]


@pytest.fixture(scope="module")
def server(model):  # type: ignore[no-untyped-def]
    with Server(create_app(model, config=ServeConfig(abstain_below=0.3))) as s:
        yield s


def _client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="not-needed", max_retries=0, timeout=300)


def test_openai_client_chat_equals_generate_and_streams_the_same_confidence(server, model) -> None:  # type: ignore[no-untyped-def]
    client = _client(server)
    assert [m.id for m in client.models.list().data] == [DEFAULT_MODEL]
    r = client.chat.completions.create(
        model=DEFAULT_MODEL,
        messages=QUESTION,
        max_tokens=24,  # type: ignore[arg-type]
        extra_body={"return_trace": True},
    )
    ref = model.generate([QUESTION], max_new_tokens=24)[0]  # what `tracecal generate` records for this prompt
    choice = r.choices[0]
    conf = choice.model_extra["confidence"]  # type: ignore[index]
    assert choice.message.content == ref.text and r.usage.completion_tokens == ref.length  # type: ignore[union-attr]
    assert "Paris" in ref.text
    assert conf["c_trace"] == pytest.approx(float(trace_confidence([ref])[0]), rel=1e-6)
    np.testing.assert_allclose(conf["trace"]["surprisal"], ref.surprisal, atol=1e-6)
    np.testing.assert_allclose(conf["trace"]["entropy"], ref.entropy, atol=1e-6)
    assert conf["abstain"] == (conf["c_trace"] < 0.3)

    stream = client.chat.completions.create(model=DEFAULT_MODEL, messages=QUESTION, max_tokens=24, stream=True)  # type: ignore[arg-type]
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    risks = [c.choices[0].model_extra["risk"] for c in chunks if c.choices and "risk" in c.choices[0].model_extra]  # type: ignore[operator,index]
    final = chunks[-1].choices[0]
    assert text == ref.text and final.finish_reason == choice.finish_reason
    streamed = final.model_extra["confidence"]  # type: ignore[index]
    assert streamed == {k: v for k, v in conf.items() if k != "trace"}  # the same numbers
    assert len(risks) == ref.length and risks[-1]["c_trace"] == pytest.approx(conf["c_trace"], rel=1e-12)

    done = client.completions.create(model=DEFAULT_MODEL, prompt="The capital of France is", max_tokens=5)
    assert done.choices[0].text and done.choices[0].model_extra["confidence"]["tokens"] == 5  # type: ignore[index]


def test_the_answer_is_the_one_tracecal_generate_records(server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The `tracecal generate` command itself (a fresh process, its own model load) on the same messages: the
    gateway's answer, tokens, s_t and H_t are the ones it writes to Parquet."""
    (tmp_path / "p.jsonl").write_text(json.dumps({"id": "q", "messages": QUESTION}) + "\n")
    cmd = [
        sys.executable,
        "-m",
        "tracecal.cli.app",
        "generate",
        "--prompts",
        str(tmp_path / "p.jsonl"),
        "--max-new-tokens",
        "24",
        "--dtype",
        "float32",  # the `model` fixture's weights
        "--out",
        str(tmp_path / "t.parquet"),
    ]
    env = os.environ | {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    (ref,) = load_traces(tmp_path / "t.parquet")
    r = _client(server).chat.completions.create(
        model=DEFAULT_MODEL,
        messages=QUESTION,
        max_tokens=24,  # type: ignore[arg-type]
        extra_body={"return_trace": True},
    )
    conf = r.choices[0].model_extra["confidence"]  # type: ignore[index]
    assert r.choices[0].message.content == ref.text and conf["trace"]["tokens"] == list(ref.token_strings)
    np.testing.assert_allclose(conf["trace"]["surprisal"], ref.surprisal, atol=1e-5)
    np.testing.assert_allclose(conf["trace"]["entropy"], ref.entropy, atol=1e-5)


def test_openai_client_sees_errors_as_openai_errors(server) -> None:  # type: ignore[no-untyped-def]
    client = _client(server)
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="gpt-4o", messages=QUESTION)  # type: ignore[arg-type]
    assert e.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError, match="decodes greedily"):
        client.chat.completions.create(model=DEFAULT_MODEL, messages=QUESTION, temperature=0.8)  # type: ignore[arg-type]
    with pytest.raises(openai.BadRequestError, match="messages"):
        client.chat.completions.create(model=DEFAULT_MODEL, messages=[])
    assert client.chat.completions.create(model=DEFAULT_MODEL, messages=QUESTION, max_tokens=2).choices  # type: ignore[arg-type]


def test_a_client_that_leaves_cancels_its_generation(server) -> None:  # type: ignore[no-untyped-def]
    def tokens_done() -> float:
        text = httpx.get(server.url + "/metrics").text
        line = next(x for x in text.splitlines() if x.startswith('tracecal_tokens_total{kind="completion"}'))
        return float(line.split()[-1])

    before = tokens_done()
    body = {
        "model": DEFAULT_MODEL,
        "messages": [{"role": "user", "content": "Write a long story about a dragon."}],
        "max_tokens": 400,
        "stream": True,
    }
    with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, timeout=60) as r:
        lines = r.iter_lines()
        got = [next(lines) for _ in range(6)]  # a few chunks, then hang up
    assert any("risk" in x for x in got)
    for _ in range(200):
        if 'tracecal_early_stops_total{reason="cancelled"} 1.0' in httpx.get(server.url + "/metrics").text:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the generation was not cancelled")
    assert tokens_done() - before < 50  # stopped within a few steps of the hang-up, far from 400 tokens


def test_drift_alarm_after_the_switch_from_triviaqa_to_svamp(model) -> None:  # type: ignore[no-untyped-def]
    """60 TriviaQA then 50 SVAMP questions, sent in groups of 10 concurrent requests (one batch each, so the test
    takes minutes, not a quarter of an hour); the switch falls between two groups, so "not before" stays exact."""
    n_before, n_after, group = 60, 50, 10
    tasks = {name: get_task(name) for name in ("triviaqa", "svamp")}
    stream = [tasks["triviaqa"].prompt(e) for e in tasks["triviaqa"].load(limit=n_before)]
    stream += [tasks["svamp"].prompt(e) for e in tasks["svamp"].load(limit=n_after)]
    cfg = ServeConfig(
        drift_statistic="mean_entropy",
        drift_threshold=8.0,
        drift_delta=0.25,
        drift_min_samples=20,
        max_batch=group,
        batch_wait_ms=50,
    )
    with Server(create_app(model, config=cfg)) as s, ThreadPoolExecutor(group) as pool:
        client = _client(s)
        alarm_after = None  # requests answered when /health first showed the alarm
        for start in range(0, len(stream), group):
            ask = lambda m: client.chat.completions.create(model=DEFAULT_MODEL, messages=m, max_tokens=24)  # noqa: E731
            list(pool.map(ask, stream[start : start + group]))
            if alarm_after is None and httpx.get(s.url + "/health").json()["drift"]["alarm"]:
                alarm_after = start + group
        drift = httpx.get(s.url + "/health").json()["drift"]
        metrics = httpx.get(s.url + "/metrics").text
    assert alarm_after is not None, f"no alarm: {drift}"
    assert n_before < alarm_after <= n_before + n_after, f"alarm after {alarm_after} requests (switch at {n_before})"
    assert n_before < drift["alarm_at_answers"][0] <= n_before + n_after, drift  # the answer that raised it
    assert f"tracecal_drift_alarms_total {float(drift['alarms'])}" in metrics
