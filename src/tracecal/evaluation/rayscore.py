"""``tracecal evaluate --score-only --ray``: the scoring blocks of a stored run as Ray tasks, merged by the driver.

`tracecal.evaluation.blockscore` scores a run one task × estimator block at a time; `RayBlocks` is its runner on a
Ray cluster (the `RayExecutor` of ``--ray`` / ``--ray-address``: a local instance bound to 127.0.0.1, or a cluster):

* each block is one Ray task (`score_block_ipc`, one CPU) that opens the run directory **at the driver's path** and
  reads that block's columns itself (`tracecal.evaluation.blockscore.score_stored_block`; a worker process keeps the
  last task's s_t and H_t for that task's next blocks, `_task_batch`): on a cluster of several
  machines the run directory must be on a file system every node mounts at the same path (NFS, a cluster file
  system); a node that cannot see it fails the run with a `RunStoreError` saying so. Only the labels, the scoring
  settings and the task's bootstrap resamples (put once per task into Ray's object store) travel with a block;
* a block comes back as the bytes of one Arrow IPC stream (`block_to_ipc`: the per-answer columns as float64,
  metrics and bootstrap draws as JSON in its metadata — floats written exactly, never a pickle);
* at most ``workers`` blocks are in flight (``--ray-actors``; default: the cluster's CPUs); the driver merges them
  in task × estimator order whatever order they finish in, so the results equal the local path's bit for bit
  (tests/evaluation/test_rayscore.py, on a local 2-node cluster).

``ray`` is imported only when a run is scored this way (`tracecal.evaluation.ray.import_ray`).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from tracecal.evaluation.blockscore import Job, read_batch, score_stored_block
from tracecal.evaluation.protocol import Block, ScoreConfig, task_counts
from tracecal.evaluation.ray import RayExecutor, ipc_to_table, table_to_ipc
from tracecal.evaluation.runstore import TRACES, RunStore, RunStoreError
from tracecal.traces.trace import TraceBatch

__all__ = ["RayBlocks", "block_to_ipc", "ipc_to_block", "score_block_ipc", "score_block_on_node"]

BLOCK_META = b"tracecal_block"


def block_to_ipc(b: Block) -> bytes:
    """A `Block` as one Arrow IPC stream: columns ``raw0``, ``prob0`` (and ``raw`` when it has one), its name,
    metrics, draws and non-finite count as JSON in the schema metadata."""
    cols = {"raw0": b.raw0, "prob0": b.prob0} | ({} if b.raw is None else {"raw": b.raw})
    meta = {
        "name": b.name,
        "metrics": b.metrics,
        "draws": {k: np.asarray(v, dtype=np.float64).tolist() for k, v in b.draws.items()},
        "nan_mapped": b.nan_mapped,
    }
    table = pa.table(cols).replace_schema_metadata({BLOCK_META: json.dumps(meta).encode()})
    return table_to_ipc(table)


def ipc_to_block(blob: bytes) -> Block:
    """The `Block` `block_to_ipc` wrote (the same floats)."""
    table = ipc_to_table(blob)
    meta = json.loads((table.schema.metadata or {})[BLOCK_META])
    col = {c: table.column(c).to_numpy() for c in table.column_names}
    draws = {k: np.asarray(v, dtype=np.float64) for k, v in meta["draws"].items()}
    return Block(meta["name"], meta["metrics"], col.get("raw"), col["raw0"], col["prob0"], draws, meta["nan_mapped"])


def score_block_ipc(run: str, task: str, name: str, y: np.ndarray, counts: Any, cfg: dict[str, Any]) -> bytes:
    """The body of one Ray task: estimator ``name`` on ``task`` of the run directory at path ``run`` (which this
    node must see), as `block_to_ipc` bytes."""
    if not RunStore(run).exists():
        raise RunStoreError(
            f"{run} is not a run directory on Ray node {socket.gethostname()}: --score-only --ray reads the shards "
            "on every node, so the run directory must be on a file system all nodes mount at the same path"
        )
    store = RunStore(run)
    job = Job(task, name, np.asarray(y))
    return block_to_ipc(score_stored_block(store, job, counts, ScoreConfig(**cfg), _task_batch(store, task)))


_LAST: dict[str, Any] = {}
"""This process's last task's s_t and H_t (`_task_batch`): one task at a time, as `LocalBlocks` holds them."""


def _task_batch(store: RunStore, task: str) -> TraceBatch:
    """The task's `read_batch`, read once per worker process for consecutive blocks of one task: kept while the
    task's traces shards are the same files (names, sizes, modification times)."""
    files = store.shard_files(TRACES, task)
    key = (str(store.path), task, tuple((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files))
    if _LAST.get("key") != key:
        _LAST.clear()  # the last task's arrays go before the next task's are read
        _LAST.update(key=key, batch=read_batch(store, task))
    return _LAST["batch"]


def score_block_on_node(*args: Any) -> tuple[bytes, str]:
    """`score_block_ipc` inside a Ray task, with the id of the node it ran on."""
    import ray

    return score_block_ipc(*args), ray.get_runtime_context().get_node_id()


class RayBlocks:
    """A `tracecal.evaluation.blockscore.Runner` on the cluster of ``executor`` (connected on first use; the
    executor closes it): the blocks as Ray tasks, at most ``workers`` in flight (default: the executor's
    ``actors``, else the cluster's CPUs ÷ its ``num_cpus``), yielded in the jobs' order. ``nodes`` counts the
    blocks each Ray node scored."""

    def __init__(self, executor: RayExecutor, workers: int | None = None) -> None:
        self.executor, self.workers = executor, workers
        self.nodes: dict[str, int] = {}

    def __call__(self, store: RunStore, jobs: list[Job], cfg: ScoreConfig) -> Iterator[Block]:
        ray = self.executor.connect()
        o = self.executor.opts
        workers = self.workers or o.actors or max(1, int(ray.cluster_resources().get("CPU", 1) // o.num_cpus))
        fn = ray.remote(num_cpus=o.num_cpus, max_retries=o.max_task_retries)(score_block_on_node)
        run, settings = str(store.path.resolve()), cfg.to_dict()
        shared: dict[str, tuple[Any, Any]] = {}  # task → (labels, resamples) in the object store, put once
        for job in jobs:
            if job.task not in shared:
                shared[job.task] = (ray.put(job.y), ray.put(task_counts(job.y, job.task, cfg)))
        flights: dict[Any, int] = {}
        done: dict[int, bytes] = {}
        sent = given = 0
        while given < len(jobs):
            while sent < len(jobs) and len(flights) < workers:
                j = jobs[sent]
                flights[fn.remote(run, j.task, j.name, *shared[j.task], settings)] = sent
                sent += 1
            if given not in done:
                ready, _ = ray.wait(list(flights), num_returns=1)
                for ref in ready:
                    i = flights.pop(ref)
                    try:
                        done[i], node = ray.get(ref)
                    except Exception as e:  # noqa: BLE001 - the block's own error, as the local path raises it
                        raise self.executor.unwrap(e) from None
                    self.nodes[node] = self.nodes.get(node, 0) + 1
                continue
            yield ipc_to_block(done.pop(given))
            given += 1
