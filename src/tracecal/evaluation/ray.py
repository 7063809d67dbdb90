"""One evaluation over many workers and machines: the units of `tracecal.evaluation.run` run on Ray actors.

``tracecal evaluate … --ray [ADDRESS]`` (extra ``tracecal[ray]``). The driver (the process that runs the
command) owns the run directory and is the only one that touches it; the actors need no shared file system:

* the units are the local path's (`Scheduler.units`: pass × task × shard) and each is computed by the same
  function (`tracecal.evaluation.scheduler.compute_unit`) inside a *model actor*; an actor builds one `Resources` and so
  loads the model once, lazily, by the same `load_model` path as a local run, on the backend the settings name
  (HF; llama.cpp for ``--backend llamacpp``; or an HTTP server URL: then the actors are thin clients of one
  deployment);
* the driver ships a unit's questions, its `Task` and, for a pass with ``depends``, the traces of the same
  answers (read from the run directory) to an actor through Ray's object transport; the actor sends back the
  shard as an Arrow IPC stream (bytes, never a pickle); the driver writes it through the `RunStore`
  (`Scheduler.save`) and then lets the passes that depend on it go;
* an actor that dies is restarted by Ray (``max_restarts``) and its unit retried (``max_task_retries``); an
  actor that stays dead is dropped and its unit sent to another. The driver holds each in-flight unit's claim
  (`RunStore.claim`), so local workers may share the run; a killed driver resumes from the run directory:
  shards already written are not computed again.

``ray`` is imported only here and only when used: tracecal works without it. Without an address a local
instance is started, its processes bound to 127.0.0.1 (nothing listens on another interface).
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from tracecal._validation import Interval, check_params
from tracecal.backends.registry import DTYPE, get_backend
from tracecal.evaluation.config import ConfigError, EvalConfig, is_url, resolve_dtype
from tracecal.evaluation.protocol import constraints_of, setting
from tracecal.evaluation.scheduler import Resources, Scheduler, Unit, compute_unit
from tracecal.passes import PASSES

__all__ = [
    "RayOptions",
    "RayExecutor",
    "RayUnavailableError",
    "ModelWorker",
    "ray_executor",
    "table_to_ipc",
    "ipc_to_table",
]

LOCAL_ONLY_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # "0": Ray's node address is 127.0.0.1 (read at import)
FORWARDED_ENV = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TOKENIZERS_PARALLELISM", "HF_HOME")
LOCAL = "local"


class RayUnavailableError(ConfigError):
    """``--ray`` was asked for but Ray is not installed."""


def import_ray(local: bool) -> Any:
    """``import ray``; for a local instance, first make Ray bind its processes to 127.0.0.1."""
    if local and "ray" not in sys.modules:
        os.environ.setdefault(LOCAL_ONLY_ENV, "0")
    try:
        import ray
    except ImportError as e:
        raise RayUnavailableError("--ray needs Ray: pip install 'tracecal[ray]' (on every machine)") from e
    return ray


def table_to_ipc(table: pa.Table) -> bytes:
    """An Arrow table as the bytes of one IPC stream (schema metadata kept)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def ipc_to_table(blob: bytes) -> pa.Table:
    """The table `table_to_ipc` wrote."""
    return pa.ipc.open_stream(pa.py_buffer(blob)).read_all()


RAY_NAMES = {  # how the command line names an option (default: the field with "-" for "_")
    "actors": "ray-actors",
    "local_cpus": "local CPUs",
    "in_flight": "in-flight units per actor",
    "num_cpus": "ray-cpus (CPUs per actor)",
    "num_gpus": "ray-gpus (GPUs per actor)",
}


@dataclass
class RayOptions:
    """Where and how the actors run.

    ``address``: ``None``/``"local"`` starts a local instance with ``local_cpus`` CPUs (default: this machine's);
    ``"auto"`` joins the cluster this machine belongs to (``ray start``); else ``HOST:PORT`` or
    ``ray://HOST:10001``. ``actors``: model actors (default: the cluster's CPUs ÷ ``num_cpus``, or its GPUs ÷
    ``num_gpus`` when actors take GPUs). ``num_cpus`` / ``num_gpus``: what one actor reserves (its torch threads
    = ``num_cpus`` rounded down, at least 1). ``in_flight``: units queued per actor (one computing, the next
    already shipped). ``max_restarts`` / ``max_task_retries``: Ray's restarts of a dead actor and retries of
    its unit; ``max_unit_failures``: failures of one unit (on any actor) before the run stops.
    """

    address: str | None = None
    actors: int | None = setting(None, (Interval(int, 1, None), None))
    num_cpus: float = setting(1.0, Interval(float, 0, 1024, closed="right"))
    num_gpus: float = setting(0.0, Interval(float, 0, 64))
    local_cpus: int | None = setting(None, (Interval(int, 1, None), None))
    in_flight: int = setting(2, Interval(int, 1, None))
    max_restarts: int = setting(3, Interval(int, 0, None))
    max_task_retries: int = setting(3, Interval(int, 0, None))
    max_unit_failures: int = setting(4, Interval(int, 1, None))
    env: dict[str, str] = field(default_factory=dict)

    @property
    def local(self) -> bool:
        return self.address in (None, "", LOCAL)

    def validate(self) -> RayOptions:
        """`ConfigError` naming the first option out of range (as the command line spells it)."""
        check_params(
            vars(self), constraints_of(RayOptions), ConfigError, lambda k: RAY_NAMES.get(k, k.replace("_", "-"))
        )
        if self.address is not None and not isinstance(self.address, str):
            raise ConfigError(f"--ray takes an address (auto, HOST:PORT, ray://HOST:10001), got {self.address!r}")
        return self

    @property
    def threads(self) -> int:
        return max(1, int(self.num_cpus))


def ray_executor(address: str | None, actors: int | None, cpus: float, gpus: float) -> RayExecutor:
    """The executor of ``tracecal evaluate --ray`` (validated; Ray itself is started when the run needs it)."""
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        raise RayUnavailableError("--ray needs Ray: pip install 'tracecal[ray]' (on every machine)")
    return RayExecutor(RayOptions(address=address, actors=actors, num_cpus=cpus, num_gpus=gpus))


class ModelWorker:
    """The body of one Ray actor: one `Resources` (the model or embedder loaded once, when a unit first needs it).

    Args:
        cfg: the evaluation settings (the model name/path/URL, dtype, batch size, chat; what `Resources` reads).
        threads: torch CPU threads of this actor (its share of the machine; llama.cpp's threads too).
        gpus: the GPUs Ray reserved for it; with none, the machine's GPUs are hidden from it (Ray leaves them
            visible to an actor that reserved none), so the model runs on the CPU as the run's dtype says.
    """

    def __init__(self, cfg: EvalConfig, threads: int | None = None, gpus: float = 0.0) -> None:
        if not gpus:
            os.environ["CUDA_VISIBLE_DEVICES"] = ""  # before the first CUDA call of this process
        if threads and not is_url(cfg.model):
            from tracecal.backends.runtime import apply_threads

            apply_threads(threads)  # torch's, and what the actor's llama.cpp model takes (`model_options`)
        self.res = Resources(cfg)
        self.units = 0

    def prepare(self, kinds: Sequence[str | None]) -> dict[str, Any]:
        """Load the resources ``kinds`` now (an error here stops the run before anything is written)."""
        for kind in kinds:
            self.res.get(kind)
        return self.info()

    def info(self) -> dict[str, Any]:
        """Where this actor runs: pid, host name, units computed since it (re)started."""
        return {"pid": os.getpid(), "host": socket.gethostname(), "units": self.units}

    def compute(self, p: Any, task: Any, examples: Sequence[Any], traces: Sequence[Any]) -> tuple[bytes, float, float]:
        """One unit (`compute_unit`): its shard as Arrow IPC bytes, the wall seconds it took and the actor's
        process CPU seconds."""
        t0, c0 = time.perf_counter(), time.process_time()
        table = compute_unit(p, self.res, task, examples, traces)
        self.units += 1
        return table_to_ipc(table), time.perf_counter() - t0, time.process_time() - c0


@dataclass
class Flight:
    """A unit on its way: the actor it was sent to and the claim the driver holds on its shard."""

    unit: Unit
    actor: int
    claim: Any


class RayExecutor:
    """Runs the units of an evaluation on Ray actors (see the module docstring); pass it to `evaluate`.

    Use it as a context manager (or call `close`): it kills its actors and shuts down a Ray instance it started.
    After a run, ``written`` counts the shards this driver wrote per ``(pass, task, k)`` and ``failures`` the
    actor failures it saw (a restarted or dropped actor).
    """

    def __init__(self, opts: RayOptions | None = None) -> None:
        self.opts = (opts or RayOptions()).validate()
        self.ray: Any = None
        self.started = False
        self.actors: list[Any] = []
        self.alive: list[bool] = []
        self.written: dict[tuple[str, str, int], int] = {}
        self.failures = 0

    # ----------------------------------------------------------------------------------- Ray itself
    def connect(self) -> Any:
        """Join the cluster (or start a local instance) once; returns the ``ray`` module."""
        if self.ray is not None:
            return self.ray
        ray = import_ray(self.opts.local)
        if not ray.is_initialized():
            env = {k: os.environ[k] for k in FORWARDED_ENV if k in os.environ} | self.opts.env
            kw: dict[str, Any] = {"runtime_env": {"env_vars": env}} if env else {}
            try:
                if self.opts.local:
                    ray.init(
                        num_cpus=self.opts.local_cpus or os.cpu_count() or 1,
                        include_dashboard=False,
                        log_to_driver=False,
                        **kw,
                    )
                else:
                    ray.init(address=self.opts.address, log_to_driver=False, **kw)
            except (ConnectionError, RuntimeError, ValueError) as e:
                raise RuntimeError(
                    f"could not start or reach Ray at {self.opts.address or 'a local instance'}: {e}"
                ) from e
            self.started = True
        self.ray = ray
        return ray

    def close(self) -> None:
        """Kill the actors; shut Ray down if this executor started it."""
        if self.ray is None:
            return
        for a in self.actors:
            self.ray.kill(a, no_restart=True)
        self.actors, self.alive = [], []
        if self.started:
            self.ray.shutdown()
            self.started = False
        self.ray = None

    def __enter__(self) -> RayExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def unwrap(self, e: BaseException) -> BaseException:
        """The exception a unit raised inside an actor, without Ray's wrapping (a clear message for the user)."""
        cause = getattr(e, "cause", None)
        return cause if isinstance(cause, BaseException) else e

    def n_actors(self) -> int:
        """How many actors: as asked, else as many as the cluster's CPUs (or GPUs) allow."""
        if self.opts.actors:
            return self.opts.actors
        total = self.ray.cluster_resources()
        if self.opts.num_gpus > 0:
            return max(1, int(total.get("GPU", 0) // self.opts.num_gpus))
        return max(1, int(total.get("CPU", 1) // self.opts.num_cpus))

    # ----------------------------------------------------------------------------------- the executor steps
    def pin(self, cfg: EvalConfig) -> None:
        """Check that the cluster can hold an actor, and resolve ``dtype=auto`` as the actors will: bf16 when an
        actor reserves a GPU, else the CPU rule (`tracecal.backends.runtime.resolve_dtype`, this machine's CPU
        standing for the actors'; `ModelWorker` hides unreserved GPUs), so the run's identity
        says what the actors compute. A server URL, or llama.cpp's GGUF, decides its own dtype: left as it is."""
        ray = self.connect()
        total = ray.cluster_resources()
        for what, need in (("CPU", self.opts.num_cpus), ("GPU", self.opts.num_gpus)):
            if need > total.get(what, 0):
                raise ConfigError(
                    f"an actor needs {need:g} {what}s but the Ray cluster has {total.get(what, 0):g}: "
                    f"lower --threads / --ray-gpus or add machines (ray start --address …)"
                )
        if cfg.dtype == "auto" and get_backend(cfg.backend_kind()).can(DTYPE):
            cfg.dtype = resolve_dtype("auto", cuda=self.opts.num_gpus > 0)

    def prepare(self, sched: Scheduler, tasks: Sequence[tuple[Any, list[Any]]]) -> None:
        """Start the actors and have each load what the missing units need (none start when nothing is missing)."""
        store = sched.store
        pending = {u.pass_name for u in sched.units(tasks) if not store.has(u.pass_name, u.task.name, u.k)}
        if not pending:
            return
        ray = self.connect()
        o = self.opts
        actor_cls = ray.remote(ModelWorker).options(
            num_cpus=o.num_cpus, num_gpus=o.num_gpus, max_restarts=o.max_restarts, max_task_retries=o.max_task_retries
        )
        self.actors = [actor_cls.remote(sched.cfg, o.threads, o.num_gpus) for _ in range(self.n_actors())]
        self.alive = [True] * len(self.actors)
        kinds = sorted({PASSES[p].resource for p in pending}, key=str)
        try:
            ray.get([a.prepare.remote(kinds) for a in self.actors])
        except Exception as e:  # noqa: BLE001 - a model that does not load: its own error, not Ray's wrapping
            self.close()
            raise self.unwrap(e) from None

    def info(self) -> list[dict[str, Any]]:
        """Each live actor's `ModelWorker.info` (pid, host, units since its last start)."""
        return self.ray.get([a.info.remote() for a, ok in zip(self.actors, self.alive, strict=True) if ok])

    def run(self, sched: Scheduler, tasks: Sequence[tuple[Any, list[Any]]], poll_s: float) -> None:
        """Until every unit is on disk: ship the ready ones to the actors, write what comes back, wait for what
        other workers hold."""
        units = sched.units(tasks)
        examples = {task.name: exs for task, exs in tasks}
        todo = [u for u in units if not sched.store.has(u.pass_name, u.task.name, u.k)]
        total = sum(u.weight for u in units)
        done = total - sum(u.weight for u in todo)
        sched.progress("run", round(done), round(total))
        flights: dict[Any, Flight] = {}
        fails: dict[tuple[str, str, int], int] = {}
        try:
            while todo or flights:
                self.submit(sched, todo, flights, examples)
                if not flights:
                    sched.progress(f"waiting for other workers to finish {len(todo)} shard(s)", 0, len(todo))
                    time.sleep(poll_s)
                    continue
                for u in self.collect(sched, flights, todo, fails):
                    done += u.weight
                    sched.progress("run", round(done), round(total))
                    sched.progress(f"{u.pass_name} {u.task.name} (Ray)", u.b, len(examples[u.task.name]))
        finally:
            for f in flights.values():
                f.claim.release()

    def submit(self, sched: Scheduler, todo: list[Unit], flights: dict[Any, Flight], examples: dict[str, list]) -> None:
        """Send ready units (in order) to the live actors with the fewest in flight, holding each unit's claim."""
        store = sched.store
        for u in list(todo):
            load = [sum(f.actor == i for f in flights.values()) if ok else None for i, ok in enumerate(self.alive)]
            free = [i for i, n in enumerate(load) if n is not None and n < self.opts.in_flight]
            if not free:
                return
            if store.has(u.pass_name, u.task.name, u.k):
                todo.remove(u)
                continue
            if not sched.ready(u):
                continue  # its inputs are still being computed (here or by another worker)
            claim = store.claim(u.pass_name, u.task.name, u.k)
            if claim is None:
                continue  # another worker holds it
            if store.has(u.pass_name, u.task.name, u.k):
                claim.release()
                todo.remove(u)
                continue
            i = min(free, key=lambda j: load[j])  # type: ignore[arg-type, return-value]
            args = (sched.pass_of(u.pass_name), u.task, examples[u.task.name][u.a : u.b], sched.upstream(u))
            flights[self.actors[i].compute.remote(*args)] = Flight(u, i, claim)
            todo.remove(u)

    def collect(
        self, sched: Scheduler, flights: dict[Any, Flight], todo: list[Unit], fails: dict[tuple[str, str, int], int]
    ) -> list[Unit]:
        """Wait for finished units; write each through the store. A unit whose actor died goes back to ``todo``."""
        ray = self.ray
        ready, _ = ray.wait(list(flights), num_returns=1, timeout=60.0)
        written = []
        for ref in ready:
            f = flights.pop(ref)
            key = (f.unit.pass_name, f.unit.task.name, f.unit.k)
            try:
                blob, seconds, cpu = ray.get(ref)
            except ray.exceptions.RayActorError as e:  # the actor died beyond its restarts: retry elsewhere
                f.claim.release()
                self.failures += 1
                fails[key] = fails.get(key, 0) + 1
                self.drop(f.actor)
                if fails[key] >= self.opts.max_unit_failures or not any(self.alive):
                    raise RuntimeError(f"{key[0]} {key[1]} shard {key[2]}: every try failed ({e})") from e
                todo.insert(0, f.unit)
                continue
            except Exception as e:  # noqa: BLE001 - the unit's own error, as the local path would raise it
                f.claim.release()
                raise self.unwrap(e) from None
            sched.save(f.unit, ipc_to_table(blob), seconds, cpu)
            f.claim.release()
            self.written[key] = self.written.get(key, 0) + 1
            written.append(f.unit)
        return written

    def drop(self, i: int) -> None:
        """Stop sending to actor ``i`` when Ray reports it dead for good (restarts exhausted)."""
        ray = self.ray
        try:
            ray.get(self.actors[i].info.remote(), timeout=30.0)
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            self.alive[i] = False
