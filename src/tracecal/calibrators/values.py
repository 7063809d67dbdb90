"""The checks of a calibrator file (`tracecal.calibrators.base`'s envelope): the file itself (`read_calibrator_json`:
bounded size and nesting, plain JSON) and its numbers, each a finite JSON number within a documented range, refused
with `CalibratorFileError` naming the field and the value.

Bounds (our choice, documented once here): |x| ≤ `MAX_ABS_STATE` for every number of a saved state unless its
reader states another range (`json_float` / `json_array`); where a calibrator standardises its input, z is clipped
to ±`Z_CLIP`, so that no finite input makes a prediction overflow.

>>> from tracecal.calibrators.values import json_float
>>> json_float(1e308, "state.bias")
Traceback (most recent call last):
    ...
tracecal.calibrators.values.CalibratorFileError: state.bias must lie in [-1e+06, 1e+06], got 1e+308
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from tracecal._inputs import read_json
from tracecal.errors import TracecalError

__all__ = [
    "CalibratorFileError",
    "MAX_ABS_STATE",
    "MAX_DEPTH",
    "MAX_FILE_BYTES",
    "Z_CLIP",
    "check_number",
    "json_array",
    "json_float",
    "read_calibrator_json",
]

MAX_ABS_STATE = 1e6
"""Our choice: the largest magnitude of a number in a calibrator's saved state (a weight, bias, mean, scale,
threshold, temperature) unless its reader states another range. Fitted values stay far below it (weights on
standardised features are of order 1–100; means and scales are those of trace statistics and scores, bounded by
`tracecal.traces.segments.MAX_TOKEN_NATS` = 1e4 nats); a file holding 1e308 would make predictions overflow."""
Z_CLIP = 1e150
"""Where a calibrator standardises its input, z = (x − mean) / scale, z is clipped to ±Z_CLIP before the weights
apply: b + wᵀ·z stays a finite number for any finite input (|w| ≤ `MAX_ABS_STATE`), so an absurd input gives a
probability of 0 or 1, never an overflow."""

MAX_FILE_BYTES = 256 << 20
MAX_DEPTH = 8
"""Deepest JSON nesting a calibrator file may have (the envelope needs 4: envelope → state → list)."""


class CalibratorFileError(TracecalError, ValueError):
    """A saved calibrator (JSON file or dict) is malformed, holds invalid values, or is of another kind or
    an unsupported version; the message says what to fix."""


def check_number(
    value: Any,
    what: str,
    lo: float = -math.inf,
    hi: float = math.inf,
    *,
    open_lo: bool = False,
    open_hi: bool = False,
    integer: bool = False,
    error: type[ValueError] = ValueError,
) -> float:
    """``value`` as a float if it is a finite real number (an integer with ``integer``) in [lo, hi] (ends
    excluded with ``open_lo`` / ``open_hi``); else ``error`` saying what ``what`` must be. Booleans are refused."""
    kinds = (int, np.integer) if integer else (int, float, np.integer, np.floating)
    if isinstance(value, bool | np.bool_) or not isinstance(value, kinds):
        raise error(f"{what} must be {'an integer' if integer else 'a number'}, got {value!r}")
    out = float(value)
    if not math.isfinite(out):
        raise error(f"{what} must be finite, got {value!r}")
    if out < lo or out > hi or (open_lo and out == lo) or (open_hi and out == hi):
        left, right = "(" if open_lo else "[", ")" if open_hi else "]"
        raise error(f"{what} must lie in {left}{lo:g}, {hi:g}{right}, got {value!r}")
    return out


def json_float(
    value: Any, what: str, lo: float = -MAX_ABS_STATE, hi: float = MAX_ABS_STATE, open_lo: bool = False
) -> float:
    """A finite JSON number in [lo, hi] (or (lo, hi] with ``open_lo``; by default |x| ≤ `MAX_ABS_STATE`, pass
    ``hi=math.inf`` for a value that may be larger); else `CalibratorFileError` naming ``what``."""
    return check_number(value, what, lo, hi, open_lo=open_lo, error=CalibratorFileError)


def json_array(
    value: Any, what: str, n: int | None = None, dtype: type = np.float64, bound: float = MAX_ABS_STATE
) -> np.ndarray:
    """A JSON list of finite numbers with |x| ≤ ``bound`` (or booleans, ``dtype=bool``) of length ``n``, as a 1-D
    array; else `CalibratorFileError` naming ``what`` (and the first entry out of range)."""
    try:
        arr = np.asarray(value) if isinstance(value, list) else None
    except (ValueError, TypeError, OverflowError):  # ragged nesting, odd objects
        arr = None
    kinds = "b" if dtype is bool else "iuf"
    if arr is None or arr.ndim != 1 or (arr.size and arr.dtype.kind not in kinds):
        kind = "true/false values" if dtype is bool else "numbers"
        raise CalibratorFileError(f"{what} must be a flat list of {kind}, got {str(value)[:80]}")
    arr = arr.astype(dtype)
    if dtype is not bool and not np.all(np.isfinite(arr)):
        raise CalibratorFileError(f"{what} must hold finite numbers (no NaN / Infinity)")
    if dtype is not bool and arr.size and np.abs(arr).max() > bound:
        j = int(np.argmax(np.abs(arr)))
        raise CalibratorFileError(f"{what} must lie in [-{bound:g}, {bound:g}], got {what}[{j}] = {float(arr[j])!r}")
    if n is not None and arr.size != n:
        raise CalibratorFileError(f"{what} must have {n} entries (one per feature), got {arr.size}")
    return arr


def _too_deep(obj: Any, limit: int) -> bool:
    stack = [(obj, 1)]
    while stack:
        x, depth = stack.pop()
        children = x.values() if isinstance(x, dict) else x
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return False


def read_calibrator_json(path: str | os.PathLike[str], role: str = "calibrator file") -> Any:
    """Parse a calibrator file: `CalibratorFileError` (naming ``role`` and the path: `tracecal._inputs`) for a
    folder, FIFO or device, an unreadable, oversized, non-JSON or too deeply nested file (a missing file: a
    ``FileNotFoundError``). Only plain JSON is read: never pickle."""
    path = Path(path)
    # the one checked opener: a folder, FIFO or device refused before opening, at most MAX_FILE_BYTES read
    d = read_json(path, role, CalibratorFileError, MAX_FILE_BYTES)
    if isinstance(d, dict | list) and _too_deep(d, MAX_DEPTH):
        raise CalibratorFileError(f"{path}: not a calibrator file: nested too deeply (more than {MAX_DEPTH} levels)")
    return d
