"""Persistence of decoding traces: Parquet (lossless, one row per answer, `SCHEMA`) and JSONL; atomic writes.

`save_traces` / `load_traces` round-trip every field of a `Trace` exactly (float64, int64 ids); a file records its
schema version (`TRACE_SCHEMA_VERSION`; a newer one is refused). `load_trace_batch` reads the numeric columns into
a `TraceBatch`. Every read validates the per-token values (finite, in [0, `MAX_TOKEN_NATS`] nats) and raises
`TraceFileError` naming the file and row; every write applies the same rule first, so what is written reads back.
Files are written by `tracecal._outputs.atomic_write` (whole or not at all; never over an input). JSONL is standard
JSON (`tracecal._outputs.json_safe`: NaN, ±∞ as null).

>>> import pathlib, tempfile
>>> from tracecal.traces.io import load_traces, save_traces
>>> from tracecal.traces.trace import Trace
>>> path = pathlib.Path(tempfile.mkdtemp()) / "run.parquet"
>>> _ = save_traces([Trace(text="Paris", token_ids=[42], surprisal=[0.1], entropy=[0.5], id="q1")], path)
>>> [(t.id, t.text, t.surprisal.tolist()) for t in load_traces(path)]
[('q1', 'Paris', [0.1])]
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tracecal._inputs import open_input, read_text
from tracecal._outputs import InputPaths, atomic_write, json_safe
from tracecal._validation import check_path
from tracecal.errors import TracecalError
from tracecal.traces.segments import check_token_values
from tracecal.traces.trace import Trace, TraceBatch, check_traces, describe_trace, offsets_of

__all__ = [
    "SCHEMA",
    "TRACE_SCHEMA_VERSION",
    "TraceFileError",
    "export_jsonl",
    "import_jsonl",
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
    path = Path(check_path(path, "path"))
    traces = check_traces(traces)
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

    Raises `TraceFileError` for a foreign or corrupt file, a folder holding no ``*.parquet`` shard, and for a row
    whose surprisal or entropy is negative, not finite or above `MAX_TOKEN_NATS` (the message names the file, the
    row and its id; see `check_token_values`). Every command that reads traces (``tracecal score``,
    ``fit-calibrator``) reads them here, so a path gets the same answer from the CLI and the Python API.
    """
    path = Path(check_path(path, "path"))
    if path.is_dir():
        shards = sorted(path.glob("*.parquet"))
        if not shards:
            raise TraceFileError(
                f"{path} is a folder with no traces file (*.parquet) in it: give a traces file written by "
                "save_traces / tracecal generate, or a folder of such shards"
            )
        return [t for shard in shards for t in load_traces(shard)]
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
    table = _read_table(Path(check_path(path, "path")))

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
    path = Path(check_path(path, "path"))
    traces = check_traces(traces)
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
    text = read_text(check_path(path, "path"), "traces file", "text", TraceFileError)
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
