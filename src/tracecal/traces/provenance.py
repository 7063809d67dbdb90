"""Provenance of what is fitted on answers (a calibrator file, a selective guarantee): whose answers they were.

A calibrated probability or a certified abstention threshold holds for the answers it was fitted on: one model's,
with its weights in one dtype (the dtype changes the answers). Every such file carries its own record ::

    {"model": "smollm2-135m-instruct", "dtype": "float32", "tracecal": "0.1.0", "run": "/abs/path/run"}

``model`` is the model id the answers record (`Trace.model_id`, a run's ``model``); ``dtype`` the weights' dtype
(``float32``, ``bfloat16``: the HF backend records it; None where the backend does not say, e.g. llama.cpp's GGUF
weights or an HTTP server); ``tracecal`` the version that fitted it; ``run`` where the answers came from (the
traces file or the run directory, an absolute path). None means unknown. A file copied elsewhere keeps it, so the
gateway can refuse a file made on another model (`mismatch`) wherever the file lies.

>>> p = provenance("smollm2-135m-instruct", "float32", run=None)
>>> mismatch(p, "smollm2-135m-instruct", "float32") is None
True
>>> mismatch(p, "qwen2.5-coder-1.5b", "float32")
"was made on answers of 'smollm2-135m-instruct'; this server serves 'qwen2.5-coder-1.5b'"
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any, NamedTuple

from tracecal.errors import ValidationError
from tracecal.version import __version__

__all__ = ["FIELDS", "SERVER", "TRACES", "Against", "mismatch", "provenance", "read_provenance", "traces_provenance"]

FIELDS = ("model", "dtype", "tracecal", "run")
"""The fields of a provenance record, each a string or None (unknown)."""
_MAX_CHARS = 4096


def provenance(model: str | None, dtype: str | None, run: str | os.PathLike[str] | None) -> dict[str, str | None]:
    """The provenance record of answers of ``model`` in ``dtype`` from ``run`` (made absolute), by this tracecal."""
    where = None if run is None else os.path.abspath(os.fspath(run))
    return {"model": model or None, "dtype": dtype or None, "tracecal": __version__, "run": where}


def traces_provenance(traces: Iterable[Any], source: str | os.PathLike[str] | None) -> dict[str, str | None]:
    """The record of answers given as `Trace` objects (read from ``source``): their ``model_id`` and the dtype
    their ``decoding`` records. Answers of several models (or dtypes) record them all, joined by ``" + "``: such a
    file belongs to no single served model."""
    models = sorted({str(t.model_id) for t in traces if getattr(t, "model_id", "")})
    dtypes = sorted({str(t.decoding["dtype"]) for t in traces if (getattr(t, "decoding", None) or {}).get("dtype")})
    return provenance(" + ".join(models) or None, " + ".join(dtypes) or None, source)


def read_provenance(value: Any, error: type[ValueError] = ValidationError) -> dict[str, str | None] | None:
    """The provenance record of a loaded file's ``provenance`` value: None for a file without one (written before
    tracecal recorded it), the known fields (each a string or null; unknown keys are dropped) of a JSON object;
    ``error`` for anything else."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise error(f"'provenance' must be a JSON object, got {type(value).__name__}")
    out: dict[str, str | None] = {}
    for key in FIELDS:
        v = value.get(key)
        if v is not None and (not isinstance(v, str) or len(v) > _MAX_CHARS):
            raise error(f"provenance {key!r} must be a string (≤ {_MAX_CHARS} characters) or null, got {v!r:.80}")
        out[key] = v
    return out


def _same_model(a: str, b: str) -> bool:
    """Two model ids name the same model: the same string, or paths to the same file."""
    if a == b:
        return True
    looks_like_path = all(os.sep in x or x.endswith(".gguf") for x in (a, b))
    return looks_like_path and os.path.realpath(os.path.expanduser(a)) == os.path.realpath(os.path.expanduser(b))


class Against(NamedTuple):
    """What a file's record is compared with, as a message says it: ``model`` and ``dtype`` phrases (formatted with
    the model id and the dtype) and ``noun``, what a file without a record is not checked against."""

    model: str
    dtype: str
    noun: str


SERVER = Against("this server serves {!r}", "this server's weights are {}", "the model")
"""The gateway's comparison: the served model and its weights' dtype."""
TRACES = Against("the traces scored are answers of {!r}", "the traces scored are {} answers", "the traces' model")
"""`tracecal score`'s and `score-answers`' comparison: the model and dtype the traces scored record."""


def mismatch(
    record: dict[str, str | None], model: str | None, dtype: str | None, against: Against = SERVER
) -> str | None:
    """Why answers of ``record`` are not those of ``model`` with weights in ``dtype`` (a phrase to follow the file's
    name; ``against``: a server's, `SERVER`, or the traces scored, `TRACES`), or None when they are. A field unknown
    on either side is not compared."""
    made_on, made_in = record.get("model"), record.get("dtype")
    if made_on and model and not _same_model(made_on, model):
        return f"was made on answers of {made_on!r}; {against.model.format(model)}"
    if made_in and dtype and made_in != dtype:
        return f"was made on {made_in} answers; {against.dtype.format(dtype)} (the dtype changes answers)"
    return None
