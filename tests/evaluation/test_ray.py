"""``tracecal evaluate --ray``: the units of an evaluation on Ray actors, on a local 2-node Ray cluster started
here (`ray.cluster_utils.Cluster`, one CPU per node, every process on 127.0.0.1) and shut down after.

* through the CLI, 2 actors (one per node), TriviaQA + SVAMP, the generation and the P(True) pass that depends on
  it: the same answers, stats and scores (to 1e-12) as the single-process run of the same shards;
* a worker actor killed (SIGKILL of its process) mid-run: Ray restarts it and retries its unit; then the driver
  dies and a new one resumes from the run directory: every shard is written once in all, none is lost, and the
  results equal the single-process run's;
* the HTTP backend: actors are thin clients of one (fake, OpenAI-compatible) server on 127.0.0.1.

The model is the random-weight tiny Llama of ``tiny_model``, saved to a folder the actors load it from.
"""

from __future__ import annotations

import json
import math
import os
import signal
import threading
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # Ray's processes on 127.0.0.1 (read at import)
ray = pytest.importorskip("ray")

from tracecal.evaluation.config import EvalConfig, resolve_dtype  # noqa: E402
from tracecal.evaluation.ray import RayExecutor, RayOptions, ipc_to_table, table_to_ipc  # noqa: E402
from tracecal.evaluation.run import evaluate  # noqa: E402
from tracecal.evaluation.runstore import RunStore  # noqa: E402

pytestmark = pytest.mark.integration
TASKS = ["triviaqa", "svamp"]
FAST = dict(limit=12, n_seeds=3, shard_size=4, max_new_tokens=6, batch_size=4)
ESTIMATORS = ["trace-only", "extra"]  # the extra pass depends on the traces: shipped to the actors


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """Two Ray nodes (one CPU each) on this machine; the test process is the driver."""
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        c.add_node(num_cpus=1)
        ray.init(address=c.address, log_to_driver=False)
        c.wait_for_nodes()
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory, tiny_model) -> str:  # type: ignore[no-untyped-def]
    """The tiny random-weight model as a folder any process can `load_model` (weights + tokenizer)."""
    d = tmp_path_factory.mktemp("tiny") / "tiny-llama"
    tiny_model.model.save_pretrained(d)
    tiny_model.tokenizer.save_pretrained(d)
    return str(d)


@pytest.fixture(scope="module")
def local_run(tmp_path_factory, tiny_dir: str) -> Path:  # type: ignore[no-untyped-def]
    """The single-process run of the same settings (one torch thread, as each actor)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run = tmp_path_factory.mktemp("local") / "run"
        evaluate(run, EvalConfig(tasks=TASKS, model=tiny_dir, estimators=ESTIMATORS, **FAST))
    finally:
        torch.set_num_threads(threads)
    return run


def assert_same_run(a: Path, b: Path, passes: tuple[str, ...] = ("traces", "extra")) -> None:
    """Same shards (answers, token ids, s_t, H_t, pass stats) and the same scores and metrics to 1e-12."""
    sa, sb = RunStore(a), RunStore(b)
    for task in TASKS:
        ta, tb = sa.read_traces(task), sb.read_traces(task)
        assert [t.id for t in ta] == [t.id for t in tb] and [t.text for t in ta] == [t.text for t in tb]
        for x, y in zip(ta, tb, strict=True):
            assert list(x.token_ids) == list(y.token_ids)
            np.testing.assert_allclose(y.surprisal, x.surprisal, rtol=0, atol=1e-12)
            np.testing.assert_allclose(y.entropy, x.entropy, rtol=0, atol=1e-12)
        for p in passes[1:]:
            pa_, pb_ = sa.read_pass(p, task), sb.read_pass(p, task)
            assert pa_ is not None and pb_ is not None and pa_.column_names == pb_.column_names
            for col in pa_.column_names[1:]:
                np.testing.assert_allclose(pb_[col].to_numpy(), pa_[col].to_numpy(), rtol=0, atol=1e-12)
    ra, rb = sa.read_results()["metrics"], sb.read_results()["metrics"]
    assert ra.keys() == rb.keys()
    for task in ra:
        for est in ra[task]:
            for metric, v in ra[task][est].items():
                np.testing.assert_allclose(rb[task][est][metric]["mean"], v["mean"], rtol=0, atol=1e-12)
    sca, scb = sa.read_table("scores"), sb.read_table("scores")
    assert sca is not None and scb is not None and sca.column_names == scb.column_names
    for col in sca.column_names:
        if sca[col].type == scb[col].type and str(sca[col].type).startswith("double"):
            np.testing.assert_allclose(scb[col].to_numpy(), sca[col].to_numpy(), rtol=0, atol=1e-12)


def assert_every_shard_once(run: Path, written: dict[tuple[str, str, int], int], passes: tuple[str, ...]) -> None:
    """Each (pass, task, shard) is on disk, was written exactly once, and the answers are the questions, once."""
    store = RunStore(run)
    n_shards = math.ceil(FAST["limit"] / FAST["shard_size"])
    want = {(p, t, k) for p in passes for t in TASKS for k in range(n_shards)}
    assert set(written) == want and set(written.values()) == {1}
    for p, t, _ in want:
        assert store.shard_count(p, t) == n_shards
    for t in TASKS:
        ids = [tr.id for tr in store.read_traces(t)]
        assert len(ids) == len(set(ids)) == FAST["limit"]


def test_arrow_ipc_round_trip_keeps_schema_metadata() -> None:
    import pyarrow as pa

    t = pa.table({"id": ["a", "b"], "x": [[1.0], [2.0, 3.0]]}).replace_schema_metadata({b"v": b"2"})
    back = ipc_to_table(table_to_ipc(t))
    assert back.equals(t) and back.schema.metadata == {b"v": b"2"}


def test_an_actor_loads_the_backend_the_settings_name(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The body of a model actor (`ModelWorker`, no cluster started) loads llama.cpp for ``backend="llamacpp"``,
    and the driver leaves its dtype to the GGUF (an HF run's ``auto`` is pinned to what the actors compute)."""
    from types import SimpleNamespace

    from tracecal.backends.llamacpp import LlamaCppModel
    from tracecal.evaluation.ray import ModelWorker

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # what an actor without GPUs sets; restored after the test
    cfg = EvalConfig(TASKS, backend="llamacpp", batch_size=2)
    worker = ModelWorker(cfg)
    assert worker.prepare(["lm"])["units"] == 0 and isinstance(worker.res.get("lm"), LlamaCppModel)
    ex = RayExecutor(RayOptions())
    ex.ray = SimpleNamespace(cluster_resources=lambda: {"CPU": 2.0})  # `connect` returns it: no Ray started
    ex.pin(cfg)
    assert cfg.dtype == "auto" and cfg.identity()["dtype"] is None
    hf = EvalConfig(TASKS)
    ex.pin(hf)
    assert hf.dtype == resolve_dtype("auto", cuda=False)  # actors without GPUs: the CPU rule (bf16 on a bf16 CPU)


def test_cli_ray_run_equals_the_single_process_run(cluster, tiny_dir: str, local_run: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from typer.testing import CliRunner

    from tracecal.cli.app import app

    run = tmp_path / "run"
    args = [
        "evaluate",
        "--run-dir",
        str(run),
        "--tasks",
        ",".join(TASKS),
        "--model",
        tiny_dir,
        "--limit",
        "12",
        "--shard-size",
        "4",
        "--seeds",
        "3",
        "--max-new-tokens",
        "6",
        "--batch-size",
        "4",
        "--estimators",
        ",".join(ESTIMATORS),
        "--no-report",
        "--ray",
        "--ray-address",
        cluster.address,
        "--ray-actors",
        "2",
        "--threads",
        "1",
    ]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "AUROC" in r.output
    assert ray.is_initialized()  # the driver joined the test's cluster and left it running
    assert_same_run(local_run, run)
    doc = json.loads((run / "config.json").read_text())
    # auto, resolved as the actors run (and as the single-process run did: the CPU rule)
    assert doc["identity"]["dtype"] == doc["config"]["dtype"] == resolve_dtype("auto", cuda=False)
    # a bad Ray option is a clear error, before anything is written
    r = CliRunner().invoke(app, [*args[:2], str(tmp_path / "bad"), *args[3:-4], "--ray-actors", "0"])
    assert r.exit_code == 2 and "--ray-actors must be a whole number ≥ 1, got 0" in r.output, r.output
    assert "Traceback" not in r.output and not (tmp_path / "bad").exists()
    r = CliRunner().invoke(app, [*args[:2], str(tmp_path / "bad"), *args[3:], "--ray-gpus", "1"])
    assert r.exit_code == 2 and "needs 1 GPUs but the Ray cluster has 0" in r.output, r.output
    assert not (tmp_path / "bad").exists()
    # a model the actors cannot load: the actor's own error, and no run directory
    typo = str(tmp_path / "typo.gguf")
    bad = [*args[:2], str(tmp_path / "bad"), *[typo if a == tiny_dir else a for a in args[3:-4]], "--ray-actors", "1"]
    r = CliRunner().invoke(app, bad)
    assert r.exit_code == 2 and "GGUF file not found" in r.output, r.output
    assert "Traceback" not in r.output and not (tmp_path / "bad").exists()


def test_a_killed_worker_loses_and_duplicates_no_shard(cluster, tiny_dir: str, local_run: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A worker is SIGKILLed after the first shard; then the driver dies (an interrupt) after the sixth; a new
    driver resumes: every shard is written once in all, none is lost, and the results are the local run's."""
    run = tmp_path / "run"
    cfg = lambda: EvalConfig(tasks=TASKS, model=tiny_dir, estimators=ESTIMATORS, **FAST)  # noqa: E731
    ex = RayExecutor(RayOptions(actors=2, num_cpus=1, max_restarts=2, max_task_retries=2))
    seen: dict[str, Any] = {}

    def progress(desc: str, done: int, total: int) -> None:
        if desc != "run":
            return
        if "pids" not in seen:  # the run starts: the actors are up, idle
            seen["pids"] = [i["pid"] for i in ex.info()]
        elif done > 0 and "killed" not in seen:  # the first shard is written: kill a worker while it computes
            seen["killed"] = seen["pids"][0]
            os.kill(seen["killed"], signal.SIGKILL)
        elif sum(ex.written.values()) >= 6:
            seen["after"] = [i["pid"] for i in ex.info()]
            raise KeyboardInterrupt("the driver dies")

    with ex, pytest.raises(KeyboardInterrupt):
        evaluate(run, cfg(), progress, executor=ex)
    assert seen["killed"] not in seen["after"] and len(seen["after"]) == 2  # restarted by Ray, then went on
    first = dict(ex.written)
    resumed = RayExecutor(RayOptions(actors=2))
    with resumed:
        evaluate(run, cfg(), executor=resumed)
    assert not set(first) & set(resumed.written)  # what the dead driver wrote is not computed again
    assert_every_shard_once(run, first | resumed.written, ("traces", "extra"))
    assert_same_run(local_run, run)
    # a driver on the finished run computes nothing and starts no actor
    again = RayExecutor(RayOptions(actors=2))
    with again:
        evaluate(run, cfg(), executor=again)
        assert again.written == {} and again.actors == []


# ----------------------------------------------------------------------------------------- HTTP: thin clients
WORDS = ["Paris", "seven", "London", "42", "blue", "Rome", "no", "yes"]


class FakeOpenAI(BaseHTTPRequestHandler):
    """``/v1/models`` and ``/v1/chat/completions`` with log-probs: a deterministic answer per prompt."""

    requests: list[str] = []
    lock = threading.Lock()

    def log_message(self, *args: Any) -> None:
        return None

    def reply(self, obj: Any) -> None:
        body = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        self.reply({"object": "list", "data": [{"id": "fake", "object": "model"}]})

    def do_POST(self) -> None:  # noqa: N802
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = json.dumps(req["messages"], sort_keys=True)
        with self.lock:
            self.requests.append(prompt)
        h = zlib.crc32(prompt.encode())
        toks = [WORDS[(h >> (3 * i)) % len(WORDS)] for i in range(1 + h % 3)]
        content = []
        for i, tok in enumerate(toks):
            p = 0.3 + 0.6 * (((h >> (5 * i)) % 97) / 97)
            alt = {"token": "x", "logprob": math.log((1 - p) / 2)}
            content.append(
                {"token": tok, "logprob": math.log(p), "top_logprobs": [{"token": tok, "logprob": math.log(p)}, alt]}
            )
        msg = {"message": {"content": "".join(toks)}, "finish_reason": "stop", "logprobs": {"content": content}}
        self.reply({"choices": [msg]})


@pytest.fixture
def server() -> Iterator[str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), FakeOpenAI)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    FakeOpenAI.requests = []
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    finally:
        srv.shutdown()
        srv.server_close()


def test_http_backend_actors_are_clients_of_one_server(cluster, server: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cfg = lambda: EvalConfig(tasks=TASKS, model=server, estimators=["trace", "neg_mean_entropy"], **FAST)  # noqa: E731
    evaluate(tmp_path / "local", cfg())
    n_local = len(FakeOpenAI.requests)
    assert n_local == 2 * FAST["limit"]
    ex = RayExecutor(RayOptions(actors=2, num_cpus=0.5))
    with ex:
        evaluate(tmp_path / "ray", cfg(), executor=ex)
        units = [i["units"] for i in ex.info()]
    assert len(FakeOpenAI.requests) == 2 * n_local  # every prompt once more, from the actors
    assert sorted(FakeOpenAI.requests[n_local:]) == sorted(FakeOpenAI.requests[:n_local])
    assert len(units) == 2 and all(n > 0 for n in units)  # both actors were clients
    assert_same_run(tmp_path / "local", tmp_path / "ray", passes=("traces",))
    stored = json.loads((tmp_path / "ray" / "config.json").read_text())["config"]
    assert stored["dtype"] == "auto"  # a server decides its own dtype: nothing pinned
