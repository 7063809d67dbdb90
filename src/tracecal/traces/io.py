"""Persistence of decoding traces: Parquet (lossless, one row per answer, `SCHEMA`) and JSONL; atomic writes.

`save_traces` / `load_traces` round-trip every field of a `Trace` exactly (float64, int64 ids); a file records its
schema version (`TRACE_SCHEMA_VERSION`; a newer one is refused). `load_trace_batch` reads the numeric columns into
a `TraceBatch`. Every read validates the per-token values (finite, in [0, `MAX_TOKEN_NATS`] nats) and raises
`TraceFileError` naming the file and row; every write applies the same rule first, so what is written reads back.
`atomic_write` is the one way tracecal writes a file: a temporary file beside the target, flushed and renamed over
it (a crash or a full disk never leaves a half-written file); through a symbolic link it writes the link's target;
a device or a named pipe is written into. It refuses an input of the writer (`check_output`, through links); an
``OSError`` names the target (not its temporary file). JSONL is standard JSON (`json_safe`: NaN, ±∞ as null).

>>> import pathlib, tempfile
>>> from tracecal.traces.io import load_traces, save_traces
>>> from tracecal.traces.trace import Trace
>>> path = pathlib.Path(tempfile.mkdtemp()) / "run.parquet"
>>> _ = save_traces([Trace(text="Paris", token_ids=[42], surprisal=[0.1], entropy=[0.5], id="q1")], path)
>>> [(t.id, t.text, t.surprisal.tolist()) for t in load_traces(path)]
[('q1', 'Paris', [0.1])]
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tracecal._inputs import open_input, read_text
from tracecal.errors import TracecalError, ValidationError
from tracecal.traces.segments import check_token_values
from tracecal.traces.trace import Trace, TraceBatch, describe_trace, offsets_of

__all__ = [
    "FILE_MODE",
    "SCHEMA",
    "TRACE_SCHEMA_VERSION",
    "InputPaths",
    "TraceFileError",
    "atomic_write",
    "check_output",
    "export_jsonl",
    "import_jsonl",
    "json_safe",
    "load_trace_batch",
    "load_traces",
    "save_traces",
    "traces_to_table",
]

TRACE_SCHEMA_VERSION = 1


class TraceFileError(TracecalError, ValueError):
    """A traces file that cannot be read (not Parquet, wrong schema, inconsistent rows or invalid values), or
    traces that cannot be written because their values could not be read back."""


def _check_traces(traces: list[Trace], describe: Callable[[int], str], clip: bool = True) -> None:
    """Validate traces read from (or about to be written to) a file: one vectorised check over all tokens
    (`check_token_values`); with ``clip``, float round-off below 0 is clipped in place."""
    if not traces:
        return
    offsets = offsets_of(traces)
    s = np.concatenate([t.surprisal for t in traces])
    h = np.concatenate([t.entropy for t in traces])
    s2, h2 = check_token_values(s, h, offsets, describe, TraceFileError)
    if clip and (s2 is not s or h2 is not h):  # rare: some values were float round-off below 0
        for t, a, z in zip(traces, offsets[:-1], offsets[1:], strict=True):
            t.surprisal, t.entropy = s2[a:z].copy(), h2[a:z].copy()


# ---------------------------------------------------------------------------------------------- Parquet I/O

_LIST_F64 = pa.list_(pa.float64())
_LIST_I64 = pa.list_(pa.int64())
SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("text", pa.string()),
        ("prompt", pa.string()),
        ("prompt_ids", _LIST_I64),
        ("token_ids", _LIST_I64),
        ("token_strings", pa.list_(pa.string())),
        ("offsets", _LIST_I64),
        ("surprisal", _LIST_F64),
        ("entropy", _LIST_F64),
        ("entropy_kind", pa.string()),
        ("stop_reason", pa.string()),
        ("model_id", pa.string()),
        ("decoding", pa.string()),  # JSON
        ("topk_ids", pa.list_(_LIST_I64)),
        ("topk_logprobs", pa.list_(_LIST_F64)),
        ("meta", pa.string()),  # JSON
    ],
    metadata={b"tracecal_schema_version": str(TRACE_SCHEMA_VERSION).encode()},
)
ENUMS = ("entropy_kind", "stop_reason", "model_id")


def traces_to_table(traces: Iterable[Trace]) -> pa.Table:
    """Traces → an Arrow table with `SCHEMA` (one row per answer)."""
    traces = list(traces)
    plain = ("id", "text", "prompt", "prompt_ids", "token_ids", "offsets", "surprisal", "entropy")
    cols: dict[str, list[Any]] = {n: [getattr(t, n) for t in traces] for n in plain + ENUMS}
    cols["token_strings"] = [list(t.token_strings) for t in traces]
    cols["decoding"] = [json.dumps(t.decoding, sort_keys=True) for t in traces]
    cols["topk_ids"] = [None if t.topk_ids is None else list(t.topk_ids) for t in traces]
    cols["topk_logprobs"] = [None if t.topk_logprobs is None else list(t.topk_logprobs) for t in traces]
    cols["meta"] = [json.dumps(t.meta, sort_keys=True, default=str) for t in traces]
    return pa.Table.from_pydict(cols, schema=SCHEMA)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


FILE_MODE = 0o666 & ~_umask()  # umask read once at import (process-wide; never toggled while threads write)
"""Permissions of the files tracecal writes: 0o666 less the process umask (read once at import)."""
_OPEN_FILE = re.compile(r"/dev/(stdin|stdout|stderr|fd/\d+)|/proc/(self|thread-self|\d+)/fd/\d+")


def _is_open_file(path: Path) -> bool:
    """Whether ``path`` (or a link on its way) names a process's open file (``/dev/stdout``): its real path is the
    file a shell redirected to, which a rename would replace under the process's feet (40 links: the kernel's cap)."""
    p = os.path.abspath(path)
    for _ in range(40):
        if _OPEN_FILE.fullmatch(p) or not os.path.islink(p):
            return _OPEN_FILE.fullmatch(p) is not None
        p = os.path.abspath(os.path.join(os.path.dirname(p), os.readlink(p)))
    return False


def _target(path: Path) -> tuple[Path, bool]:
    """(the file to write for ``path``, True when it is written into directly rather than replaced).

    Symbolic links are followed (the real file is replaced, the link kept); a character device or a named pipe
    is written into; a folder, a read-only file or another special file (block device, socket) is refused.
    """
    if _is_open_file(path):  # /dev/stdout → /proc/self/fd/1 → the shell's redirect: written into, never replaced
        return Path(path), True
    real = Path(os.path.realpath(path))
    try:
        mode = os.stat(real).st_mode
    except FileNotFoundError:
        return real, False
    if stat.S_ISREG(mode):
        if not os.access(real, os.W_OK):
            why = "read-only file: not replaced (make it writable, or write elsewhere)"
            raise PermissionError(errno.EACCES, why, str(path))
        return real, False
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return real, True
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "is a folder: give a file path", str(path))
    why = "a special file (block device or socket): tracecal writes regular files, character devices and pipes"
    raise OSError(errno.EINVAL, why, str(path))


InputPaths = Iterable[tuple[str, "str | os.PathLike[str] | None"] | tuple[str, "str | os.PathLike[str] | None", str]]
"""What a writer reads: ``(what, path)`` or ``(what, path, pattern)``; a None path is an input not given, a folder
stands for its files that match ``pattern`` (default ``*.parquet``, the shards `load_traces` reads; ``**/*``: all)."""


def check_output(path: str | os.PathLike[str], inputs: InputPaths = (), option: str = "the output") -> None:
    """Refuse (`ValidationError` naming ``option`` and the input) to write ``path`` when it is one of ``inputs``:
    the same file, through symbolic and hard links (device and inode), or when a folder on its way is a file. A path
    that does not exist yet, a character device and a named pipe (written into, never replaced) are no input's."""
    try:
        st = os.stat(path)
    except OSError as e:
        if e.errno == errno.ENOTDIR:  # say which folder is a file (creating the folders would say "File exists")
            file = next((p for p in reversed(Path(path).parents) if p.is_file()), Path(path).parent)
            raise ValidationError(f"{option} {path}: {file} is a file, not a folder; give a path in a folder") from None
        return
    if not stat.S_ISREG(st.st_mode):
        return
    for what, given, *pattern in inputs:
        if given is None:
            continue
        g = Path(given)
        try:
            files = sorted(g.glob(pattern[0] if pattern else "*.parquet")) if g.is_dir() else [g]
        except OSError:
            continue
        for f in files:
            try:
                fs = os.stat(f)
            except OSError:
                continue
            if (fs.st_dev, fs.st_ino) == (st.st_dev, st.st_ino):
                inside = "" if f == g else f" (a file of {given})"
                raise ValidationError(
                    f"{option} {path} is the {what} {f}{inside}: writing it would destroy that input; "
                    "give another output path"
                )


def _unnamed(e: OSError, temporary: str) -> bool:
    """Whether ``e`` (of the OS or pyarrow) names no file or a temporary file (its name starts with ``temporary``):
    it is re-raised naming the target instead."""
    name = e.filename
    temp = name is None or (isinstance(name, str) and name.startswith(temporary))
    return type(e).__module__ == "builtins" and e.errno is not None and temp


def atomic_write(
    path: str | os.PathLike[str], write: Callable[[str], object], inputs: InputPaths = (), option: str = "the output"
) -> None:
    """Write ``path`` by calling ``write(name)`` with the name of the file to write.

    ``path`` must not be one of the writer's ``inputs`` (`check_output`; ``option``: how the user named it, e.g.
    ``--out``). A regular file (new or existing) is written as a temporary file next to it, flushed to disk
    (``fsync``) and renamed over it (atomic on POSIX): a crash, a full disk or an error in ``write`` leaves the old
    file as it was and no temporary file (the error, an ``OSError`` naming ``path`` for a full disk, is re-raised).
    The file gets the usual permissions `FILE_MODE`. A symbolic link is followed: its target is replaced and the
    link kept (a hard link is not: the other names keep the old content). A character device or named pipe
    (``/dev/stdout``, ``/dev/null``, a FIFO) is written into directly, never replaced. A folder, a read-only file
    and other special files are refused with an ``OSError`` (`PermissionError`, `IsADirectoryError`).
    """
    check_output(path, inputs, option)
    real, direct = _target(Path(path))
    if direct:
        write(str(real))
        return
    tmp: str | None = None
    try:
        real.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{real.name}.", suffix=".tmp", dir=real.parent)
        os.close(fd)
        write(tmp)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)  # a full disk shows here at the latest, before the old file is replaced
        finally:
            os.close(fd)
        os.chmod(tmp, FILE_MODE)  # mkstemp makes 0600; give the file the usual permissions
        os.replace(tmp, real)
    except BaseException as e:  # no other local holds the error: nothing it references (an open file) outlives it
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError) and _unnamed(e, str(real.parent / f".{real.name}.")):  # OSError(errno, ...): subclass
            raise OSError(e.errno, e.strerror, os.fspath(path)) from e
        raise


def json_safe(obj: Any) -> Any:
    """``obj`` as standard JSON values, recursively: a NaN or ±∞ float becomes None (null)."""
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_safe(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def _check_writable(traces: list[Trace], path: Path) -> None:
    """The rule `load_traces` applies, before a write: `TraceFileError` naming the answer, so that nothing is
    written that could not be read back (the traces are not modified)."""
    _check_traces(traces, lambda i: describe_trace(traces[i], f"{path}: not written: answer {i}"), clip=False)


def save_traces(traces: Iterable[Trace], path: str | os.PathLike[str], inputs: InputPaths = ()) -> Path:
    """Write traces to a Parquet file with `atomic_write` (a crash never leaves a half-written file; never over
    one of ``inputs``).

    The values are checked first with the rule of `load_traces` (finite, in [0, `MAX_TOKEN_NATS`] nats, round-off
    down to −`NEGATIVE_TOLERANCE` allowed): a negative, NaN, infinite or absurd surprisal / entropy raises
    `TraceFileError` naming the answer and its id, and nothing is written.
    """
    path = Path(path)
    traces = list(traces)
    _check_writable(traces, path)
    table = traces_to_table(traces)
    atomic_write(path, lambda tmp: pq.write_table(table, tmp, compression="zstd"), inputs)
    return path


def _read_table(path: Path) -> pa.Table:
    try:  # the one checked opener (tracecal._inputs): a folder, FIFO or device is refused before opening
        with open_input(path, "traces file", "parquet", TraceFileError) as f:
            table = pq.read_table(f)
    except (pa.ArrowInvalid, OSError) as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise TraceFileError(f"{path} is not a readable Parquet traces file ({e})") from e
    missing = [n for n in ("text", "token_ids", "surprisal", "entropy") if n not in table.column_names]
    if missing:
        raise TraceFileError(f"{path} is Parquet but not a tracecal traces file: missing columns {missing}")
    version = (table.schema.metadata or {}).get(b"tracecal_schema_version", b"1")
    if int(version) > TRACE_SCHEMA_VERSION:
        raise TraceFileError(
            f"{path} was written by a newer tracecal (schema {int(version)} > {TRACE_SCHEMA_VERSION}); upgrade tracecal"
        )
    return table


def load_traces(path: str | os.PathLike[str]) -> list[Trace]:
    """Read traces written by `save_traces` (or a directory of such shards, read in name order).

    Raises `TraceFileError` for a foreign or corrupt file, and for a row whose surprisal or entropy is
    negative, not finite or above `MAX_TOKEN_NATS` (the message names the file, the row and its id; see
    `check_token_values`).
    """
    path = Path(path)
    if path.is_dir():
        out: list[Trace] = []
        for shard in sorted(path.glob("*.parquet")):
            out.extend(load_traces(shard))
        return out
    table = _read_table(path)
    rows = table.to_pylist()
    traces = []
    for i, r in enumerate(rows):
        try:
            r["decoding"] = json.loads(r.get("decoding") or "{}")
            r["meta"] = json.loads(r.get("meta") or "{}")
            traces.append(Trace.from_dict(r))
        except (ValueError, TypeError, KeyError) as e:
            raise TraceFileError(f"{path}: row {i} is inconsistent: {e}") from e
    _check_traces(traces, lambda i: describe_trace(traces[i], f"{path}: row {i}"))
    return traces


def load_trace_batch(path: str | os.PathLike[str]) -> TraceBatch:
    """Read only the numeric columns of a traces file straight into a `TraceBatch` (no Python objects).

    The values are validated like `load_traces` (`TraceFileError` naming the row of a bad value).
    """
    table = _read_table(Path(path))

    def flat(name: str) -> tuple[np.ndarray, np.ndarray]:
        col = table.column(name).combine_chunks()
        offsets = col.offsets.to_numpy().astype(np.int64)
        values = col.values.to_numpy(zero_copy_only=False)
        return values[offsets[0] : offsets[-1]], offsets - offsets[0]

    s, off = flat("surprisal")
    h, _ = flat("entropy")
    ids, _ = flat("token_ids")
    s, h = check_token_values(s, h, off, lambda i: f"{path}: row {i}", TraceFileError)
    return TraceBatch(s, h, off, ids.astype(np.int64), values_checked=True)


def export_jsonl(traces: Iterable[Trace], path: str | os.PathLike[str], inputs: InputPaths = ()) -> Path:
    """Write one standard-JSON object per trace with `atomic_write` (never over one of ``inputs``): floats
    round-trip exactly, a missing top-k log-prob (−∞) and any other non-finite number is written as null
    (`json_safe`; `import_jsonl` reads a top-k null back as −∞). The values are checked first as in `save_traces`
    (`TraceFileError`)."""
    path = Path(path)
    traces = list(traces)
    _check_writable(traces, path)

    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            for t in traces:
                f.write(json.dumps(json_safe(t.to_dict()), ensure_ascii=False, allow_nan=False) + "\n")

    atomic_write(path, write, inputs)
    return path


def _from_json(d: Any) -> Trace:
    """A trace from one parsed JSONL object: a top-k log-prob written as null is −∞ (a missing entry)."""
    top = d.get("topk_logprobs") if isinstance(d, dict) else None
    if isinstance(top, list):
        d = d | {"topk_logprobs": [[-math.inf if v is None else v for v in row] for row in top]}
    return Trace.from_dict(d)


def import_jsonl(path: str | os.PathLike[str]) -> list[Trace]:
    """Read traces written by `export_jsonl` (UTF-8, a byte-order mark dropped; an older file's bare
    ``-Infinity`` reads the same as null); a malformed line, or a surprisal
    / entropy that is negative, not finite or above `MAX_TOKEN_NATS`, raises `TraceFileError` naming
    ``path:line`` (and the trace id)."""
    out, lines = [], []
    text = read_text(path, "traces file", "text", TraceFileError)
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            out.append(_from_json(json.loads(line)))
        except (ValueError, KeyError, TypeError, RecursionError) as e:
            why = "nested too deeply" if isinstance(e, RecursionError) else e
            raise TraceFileError(f"{path}:{lineno}: not a trace ({why})") from e
        lines.append(lineno)
    _check_traces(out, lambda i: describe_trace(out[i], f"{path}:{lines[i]}"))
    return out
