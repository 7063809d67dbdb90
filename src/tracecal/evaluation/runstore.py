"""The run directory's only owner: layout, identity, locks, atomic writes and reading back.

A run directory is the unit of work of an evaluation. Nothing outside this module knows a path inside it::

    RUN/config.json                 the run's settings, its identity (what its stored outputs depend on), versions
    RUN/<pass>/<task>/<k>.parquet   shard k of a pass (``traces`` = the generation, ``extra``, ``beam``, ...):
                                    append-only, each written atomically (temp file + rename)
    RUN/rows.parquet, scores.parquet, predictions.parquet, results.json, results.csv, results.md
    RUN/timings.json                wall and process CPU seconds (``cpu/<stage>``) per stage, over resumes and workers
    RUN/report.html, RUN/figures/   the report
    RUN/<analysis>.json             analyses of a scored run (``learning_curve``, ``selective``): `write_artefact`
    RUN/.locks/                     lock files (kernel ``flock``): claims on shards, config and timings updates

Claims: a worker computes a shard only while it holds an exclusive ``flock`` on that shard's lock file. The kernel
releases the lock when the process exits or is killed, so a dead worker's shard is free again at once: no pid files,
no time-outs. Lock files are never deleted (that would let two workers lock two files for one shard). ``flock`` is
per machine: several machines share a run directory through one driver writing through one store (e.g. Ray).

Identity: the settings that change what the stored shards contain (model, *resolved* dtype, limit, decoding
budget, shard size, ...) are fixed by the first writer; a later open with a different identity raises
`ConfigMismatchError` and writes nothing. The read-modify-write of ``config.json`` is done under a lock. A folder
with other files, a ``config.json`` that is not a run's, or shards without their ``config.json`` is refused and
never written into. Each shard's metadata holds the digest of each answer's question (`write_shard`, `shard_stamp`):
a resumed run notices changed data. JSON is standard (`tracecal.evaluation.result_json`: NaN and ±∞ as null); an
``OSError`` of a write (full disk, read-only folder) is a `RunStoreError` saying what to do; files stay whole.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from tracecal._inputs import read_json
from tracecal._outputs import FILE_MODE, atomic_write
from tracecal.errors import TracecalError
from tracecal.evaluation.result_json import nan_for_null, os_error_message, plain_json
from tracecal.traces.io import load_traces, traces_to_table
from tracecal.traces.trace import Trace
from tracecal.version import package_versions

__all__ = ["RunStore", "Claim", "ConfigMismatchError", "DataChangedError", "NotARunError", "RunStoreError", "TRACES"]

TRACES = "traces"  # the generation pass: one trace per answer
TABLES = ("rows", "scores", "predictions")
CPU_PREFIX = "cpu/"  # timings.json: process CPU seconds of a stage under "cpu/<stage>" (its wall seconds: "<stage>")
DIGESTS = b"tracecal_question_digests"  # shard metadata: JSON {answer id: digest of the question it answers}
Legacy = Callable[[dict[str, Any]], dict[str, Any]] | None  # the identity of a run written before they were stored


class RunStoreError(TracecalError, ValueError):
    """The run directory cannot be used as asked (a message says what to do)."""


class ConfigMismatchError(RunStoreError):
    """Resuming a run directory with settings that would change what it already stores."""


class NotARunError(RunStoreError, FileNotFoundError):
    """The path holds no run (no ``config.json``) where one is required."""


class DataChangedError(RunStoreError):
    """The stored answers were given to other questions than the task's data holds now."""


def _is_run_config(doc: Any) -> bool:
    """Whether a parsed ``config.json`` is one a run store wrote (``{"config": {"tasks": [...], ...}, ...}``)."""
    conf = doc.get("config") if isinstance(doc, dict) else None
    return isinstance(conf, dict) and isinstance(conf.get("tasks"), list)


class Claim:
    """An exclusive claim on one shard, held through an ``flock`` the kernel drops when the process dies."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> Claim:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _safe_name(name: str, what: str) -> str:
    if not name or name in (".", "..") or "/" in name or "\\" in name or name.startswith("."):
        raise RunStoreError(f"{what} name {name!r} cannot be used inside a run directory")
    return name


class RunStore:
    """Read and write one run directory, ``path`` (the layout: the module docstring); it is created on the first
    write, never before `open` validated it."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if self.path.exists() and not self.path.is_dir():
            raise RunStoreError(f"{self.path} is a file, not a run directory: choose another --run-dir")

    def __repr__(self) -> str:
        return f"RunStore({str(self.path)!r})"

    # ----------------------------------------------------------------------------------- low level
    def _p(self, *parts: str) -> Path:
        return self.path.joinpath(*parts)

    def _atomic(self, path: Path, write: Callable[[str], object]) -> None:
        try:
            atomic_write(path, write)  # temp file + rename: a crash never leaves a half-written file
        except OSError as e:
            raise RunStoreError(os_error_message(e, path)) from e

    def _lock_fd(self, lock: Path) -> int:
        """The open lock file ``lock`` (created with its folder); an OSError as a `RunStoreError` that says why."""
        try:
            lock.parent.mkdir(parents=True, exist_ok=True)
            return os.open(lock, os.O_CREAT | os.O_RDWR, FILE_MODE)
        except OSError as e:
            raise RunStoreError(os_error_message(e, lock)) from e

    @contextlib.contextmanager
    def _locked(self, name: str) -> Iterator[None]:
        """Hold an exclusive (blocking) lock named ``name`` for the duration of the block."""
        fd = self._lock_fd(self._p(".locks", name + ".lock"))
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def _write_json(self, path: Path, obj: Any) -> None:
        text = json.dumps(plain_json(obj), indent=1, allow_nan=False, default=str)
        self._atomic(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))

    def _read_json(self, path: Path) -> Any:
        try:
            return read_json(path, "run file", RunStoreError) if path.exists() else None
        except RunStoreError as e:  # the one checked opener (tracecal._inputs): no FIFO is waited on
            raise RunStoreError(f"{e}; was the run directory edited by hand?") from None

    # ----------------------------------------------------------------------------------- identity
    def exists(self) -> bool:
        """Whether the directory holds a run (a ``config.json``)."""
        return self._p("config.json").is_file()

    def open(
        self,
        config: dict[str, Any],
        identity: dict[str, Any],
        merge: Sequence[str] = ("tasks",),
        legacy: Legacy = None,
        defaults: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Create the run or check that it is the same run; returns the stored config.

        ``identity``: what the stored outputs depend on; it must equal the stored one key by key (keys the stored
        run lacks are accepted: they were added to the identity after it was written and take their default).
        ``merge``: list-valued config keys whose values are unioned with the stored ones (e.g. tasks).
        ``legacy``: derives the identity of a run written before identities were stored from its config;
        ``defaults``: keys either identity may lack, compared (first) as the value that stands for (``backend``).
        """
        self._usable()  # before the lock file is made: a folder that is not a run gets nothing written
        with self._locked("config"):
            stored = dict(config)
            if (old := self._run_config()) is not None:
                identity = self._checked(old, identity, legacy, defaults)
                for k in merge:
                    stored[k] = list(dict.fromkeys(list(old.get("config", {}).get(k, [])) + list(config.get(k, []))))
            doc = {"config": stored, "identity": identity, "versions": package_versions(), "updated": time.time()}
            self._write_json(self._p("config.json"), doc)
        return stored

    def check(self, identity: dict[str, Any], legacy: Legacy = None, defaults: Mapping[str, Any] | None = None) -> None:
        """Raise `ConfigMismatchError` for another identity, `RunStoreError` for a folder that is not a run."""
        if (old := self._usable()) is not None:
            self._checked(old, identity, legacy, defaults)

    def _checked(
        self, old: dict[str, Any], identity: dict[str, Any], legacy: Legacy, defaults: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """The stored identity merged with ``identity`` (they must agree key by key, ``defaults`` filled in)."""
        if (old_id := old.get("identity")) is None:
            old_id = legacy(old.get("config", {})) if legacy else {}
        was = {**(defaults or {}), **old_id}
        for k, v in {**(defaults or {}), **identity}.items():
            if k in was and was[k] != v:
                raise ConfigMismatchError(
                    f"{self.path} was made with {k}={was[k]!r}, not {v!r}: use a new run directory "
                    "(or the original setting); stored outputs are never mixed"
                )
        return {**old_id, **identity}

    def _run_config(self) -> dict[str, Any] | None:
        """The parsed ``config.json``; None without one; `NotARunError` for one a run store did not write."""
        doc = self._read_json(self._p("config.json"))
        if doc is not None and not _is_run_config(doc):
            raise NotARunError(
                f"{self.path} holds a config.json that is not a tracecal run's: tracecal writes nothing there; "
                "choose another (new or empty) --run-dir"
            )
        return doc

    def _usable(self) -> dict[str, Any] | None:
        """The stored config, or None for a folder a new run may be made in (missing, empty, or holding only lock
        files and temporary files of an interrupted write); `RunStoreError` for any other folder."""
        doc = self._run_config()
        if doc is not None or not self.path.is_dir():
            return doc
        try:
            entries = sorted(e.name for e in self.path.iterdir() if e.name != ".locks" and not e.name.endswith(".tmp"))
        except OSError as e:
            raise RunStoreError(f"cannot read {self.path}: {e.strerror or e}") from e
        if any(any(self._p(e).glob("*/*.parquet")) for e in entries):
            raise RunStoreError(
                f"{self.path} holds shards but no config.json, so the settings they were made with are unknown: "
                "restore its config.json, or use a new --run-dir (tracecal does not guess)"
            )
        if entries:
            raise RunStoreError(
                f"{self.path} is not empty and is not a tracecal run (no config.json; it holds {entries[0]!r}, ...): "
                "tracecal writes nothing there; choose a new or empty --run-dir"
            )
        return None

    def config(self) -> dict[str, Any]:
        """The stored ``config.json`` (``{"config", "identity", "versions", "updated"}``)."""
        doc = self._run_config()
        if doc is None:
            raise NotARunError(f"{self.path} is not a run directory (no config.json): run `tracecal evaluate` first")
        return doc

    # ----------------------------------------------------------------------------------- shards
    def _shard(self, pass_name: str, task: str, k: int) -> Path:
        return self._p(_safe_name(pass_name, "pass"), _safe_name(task, "task"), f"{k:05d}.parquet")

    def has(self, pass_name: str, task: str, k: int) -> bool:
        """Whether shard ``k`` of ``pass_name`` for ``task`` is on disk (complete: writes are atomic)."""
        return self._shard(pass_name, task, k).is_file()

    def claim(self, pass_name: str, task: str, k: int) -> Claim | None:
        """Claim shard ``k``; None while another process (or claim) holds it. Check `has` again once claimed."""
        fd = self._lock_fd(self._p(".locks", _safe_name(pass_name, "pass"), _safe_name(task, "task"), f"{k:05d}.lock"))
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return Claim(fd)

    def write_shard(
        self, pass_name: str, task: str, k: int, table: pa.Table, digests: dict[str, str] | None = None
    ) -> None:
        """Write one shard of a pass, atomically, with ``digests`` ({answer id: question digest}) in its metadata."""
        if digests is not None:
            meta = dict(table.schema.metadata or {}) | {DIGESTS: json.dumps(digests).encode()}
            table = table.replace_schema_metadata(meta)
        self._atomic(self._shard(pass_name, task, k), lambda tmp: pq.write_table(table, tmp, compression="zstd"))

    def write_traces(self, task: str, k: int, traces: Sequence[Trace]) -> None:
        """Write shard ``k`` of the generation pass."""
        self.write_shard(TRACES, task, k, traces_to_table(traces))

    def read_pass(self, pass_name: str, task: str, columns: Sequence[str] | None = None) -> pa.Table | None:
        """All shards of a pass for a task, in shard order (None when none is written)."""
        if not (files := self.shard_files(pass_name, task)):
            return None
        tables = []
        for f in files:
            cols = None if columns is None else [c for c in columns if c in pq.read_schema(f).names]
            tables.append(pq.read_table(f, columns=cols))
        return pa.concat_tables(tables, promote_options="default")

    def shard_files(self, pass_name: str, task: str) -> list[Path]:
        """The shard files of a pass for a task, in shard order (read as one dataset: `blockscore`)."""
        d = self._p(_safe_name(pass_name, "pass"), _safe_name(task, "task"))
        return sorted(d.glob("*.parquet")) if d.is_dir() else []

    def read_traces(self, task: str) -> list[Trace]:
        """Every trace of a task's generation pass, in shard order ([] when none is written)."""
        return [t for f in self.shard_files(TRACES, task) for t in load_traces(f)]

    def read_traces_shard(self, task: str, k: int) -> list[Trace]:
        """The traces of shard ``k`` of a task's generation pass."""
        return load_traces(self._shard(TRACES, task, k))

    def shard_indices(self, pass_name: str, task: str) -> list[int]:
        """The numbers k of the shards of a pass written for a task, sorted."""
        return sorted(int(f.stem) for f in self.shard_files(pass_name, task) if f.stem.isdigit())

    def shard_stamp(self, pass_name: str, task: str, k: int) -> tuple[list[str], dict[str, str] | None]:
        """The answer ids of shard ``k`` and its question digests (None for a shard written without them)."""
        f = self._shard(pass_name, task, k)
        try:
            ids = [str(i) for i in pq.read_table(f, columns=["id"]).column("id").to_pylist()]
            raw = (pq.read_schema(f).metadata or {}).get(DIGESTS)
            return ids, (json.loads(raw) if raw else None)
        except (OSError, ValueError, KeyError, pa.ArrowInvalid) as e:
            raise RunStoreError(f"{f} is not a readable shard ({e}): delete it and run again to compute it anew") from e

    def shard_count(self, pass_name: str, task: str) -> int:
        return len(self.shard_indices(pass_name, task))

    # ----------------------------------------------------------------------------------- outputs
    def write_table(self, name: str, table: pa.Table) -> None:
        """A run-level table: ``rows``, ``scores`` or ``predictions``."""
        if name not in TABLES:
            raise RunStoreError(f"unknown run table {name!r}; known: {', '.join(TABLES)}")
        self._atomic(self._p(f"{name}.parquet"), lambda tmp: pq.write_table(table, tmp, compression="zstd"))

    def read_table(self, name: str, columns: Sequence[str] | None = None) -> pa.Table | None:
        if name not in TABLES:
            raise RunStoreError(f"unknown run table {name!r}; known: {', '.join(TABLES)}")
        p = self._p(f"{name}.parquet")
        if not p.is_file():
            return None
        if columns is not None:
            names = pq.read_schema(p).names
            columns = [c for c in columns if c in names]
        return pq.read_table(p, columns=columns)

    def scored_rows(self, columns: Sequence[str]) -> pa.Table:
        """The per-answer ``rows`` table of a scored run; `NotARunError` naming what to run for a folder that is not
        a run directory or a run not scored yet (every reader of stored labels asks here: one message)."""
        self.config()
        rows = self.read_table("rows", columns)
        if rows is None:
            raise NotARunError(
                f"{self.path} is not scored yet (no rows table): run `tracecal evaluate --score-only --run-dir` on it"
            )
        return rows

    def table_columns(self, name: str) -> list[str]:
        """Column names of a run-level table ([] when it is not written)."""
        p = self._p(f"{name}.parquet")
        return pq.read_schema(p).names if p.is_file() else []

    def write_results(self, results: dict[str, Any], csv_text: str, markdown: str) -> None:
        """``results.json`` (NaN and ±∞ as null), ``results.csv`` and ``results.md``."""
        self._write_json(self._p("results.json"), results)
        self._atomic(self._p("results.csv"), lambda tmp: Path(tmp).write_text(csv_text, encoding="utf-8"))
        self._atomic(self._p("results.md"), lambda tmp: Path(tmp).write_text(markdown, encoding="utf-8"))

    def read_results(self) -> dict[str, Any]:
        """``results.json``, a null metric read as NaN (`tracecal.evaluation.result_json.nan_for_null`)."""
        doc = nan_for_null(self._read_json(self._p("results.json")))
        if doc is None:
            raise NotARunError(
                f"{self.path / 'results.json'} not found: is {self.path} a scored run directory (tracecal evaluate)?"
            )
        return doc

    def add_time(self, stage: str, seconds: float, cpu_seconds: float | None = None) -> None:
        """Add ``seconds`` (wall) to ``stage`` in ``timings.json`` and ``cpu_seconds`` (the worker's process CPU time,
        all its threads) to ``cpu/<stage>`` when given (locked: several workers may add at once)."""
        with self._locked("timings"):
            t = self._read_json(self._p("timings.json")) or {}
            for key, v in ((stage, seconds), (CPU_PREFIX + stage, cpu_seconds)):
                if v is not None:
                    t[key] = t.get(key, 0.0) + float(v)
            self._write_json(self._p("timings.json"), t)

    def timings(self) -> dict[str, float]:
        return self._read_json(self._p("timings.json")) or {}

    def write_text(self, name: str, text: str) -> Path:
        """A text artefact at the top of the run (e.g. ``report.html``); returns its path."""
        p = self._p(_safe_name(name, "file"))
        self._atomic(p, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
        return p

    def artefact_path(self, name: str) -> Path:
        """Where a named artefact of the run lives (``report.html``, ``figures``), for showing it to a user."""
        return self._p(_safe_name(name, "file"))

    def write_artefact(self, name: str, obj: Any) -> Path:
        """A JSON artefact of an analysis of the run (``learning_curve``, ``selective``) as ``RUN/<name>.json``."""
        p = self._p(_safe_name(name, "artefact") + ".json")
        self._write_json(p, obj)
        return p

    def read_artefact(self, name: str) -> Any:
        """The JSON artefact ``name`` written by `write_artefact`; None when the run has none."""
        return self._read_json(self._p(_safe_name(name, "artefact") + ".json"))
