"""What every file of an evaluation shares: standard JSON, and one message for the OS errors of a write.

`plain_json` turns a document into standard JSON values (a NaN or ±∞ becomes null: ``json.dumps(...,
allow_nan=False)`` accepts the result, and so does a JavaScript client); `nan_for_null` reads a ``results.json``
back with NaN where a metric or an interval bound was null, so that its readers compute on floats as before (a
``results.json`` of an older tracecal, with bare ``NaN``, reads the same). `os_error_message` is the one line an
``OSError`` of a write becomes (a full disk, a read-only or immutable folder): the reason and what to do.

>>> plain_json({"mean": float("nan"), "hi": float("inf"), "n": 3})
{'mean': None, 'hi': None, 'n': 3}
>>> nan_for_null({"metrics": {"t": {"e": {"auroc": {"mean": None, "sd": 0.1}}}}})["metrics"]["t"]["e"]["auroc"]
{'mean': nan, 'sd': 0.1}
"""

from __future__ import annotations

import math
import numbers
import os
from typing import Any

from tracecal import errors

__all__ = ["plain_json", "nan_for_null", "os_error_message", "merge_partial", "INTERVAL_KEYS"]

#: The number-valued keys of a paired comparison in ``results.json`` (``statistics.comparisons``).
INTERVAL_KEYS = frozenset({"diff", "lo", "hi"})


def plain_json(obj: Any) -> Any:
    """``obj`` as standard JSON values, recursively: a NaN or ±∞ becomes None (null); NumPy scalars and arrays
    become Python numbers and lists."""
    if isinstance(obj, dict):
        return {k: plain_json(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [plain_json(v) for v in obj]
    if hasattr(obj, "ndim") and hasattr(obj, "tolist"):  # NumPy arrays and scalars: Python lists and numbers
        return plain_json(obj.tolist())
    if isinstance(obj, numbers.Real) and not isinstance(obj, bool | numbers.Integral):
        return float(obj) if math.isfinite(float(obj)) else None
    return obj


def _nan_leaves(obj: Any, keys: frozenset[str] | None) -> Any:
    """None → NaN at the leaves of ``obj`` (every leaf, or only those under one of ``keys``)."""
    if isinstance(obj, dict):
        return {
            k: v if keys is not None and k not in keys and not isinstance(v, dict) else _nan_leaves(v, keys)
            for k, v in obj.items()
        }
    return math.nan if obj is None else obj


def nan_for_null(doc: Any) -> Any:
    """A ``results.json`` document with NaN back where a number was written as null: every value under
    ``metrics`` (means, sds) and the `INTERVAL_KEYS` of ``statistics.comparisons``; anything else (settings that
    are None, a comparison without a baseline) is left as it is. Not a results document: returned unchanged."""
    if not isinstance(doc, dict):
        return doc
    out = dict(doc)
    if isinstance(out.get("metrics"), dict):
        out["metrics"] = _nan_leaves(out["metrics"], None)
    stats = out.get("statistics")
    if isinstance(stats, dict) and isinstance(stats.get("comparisons"), dict):
        comps = {
            t: c | {"estimators": _nan_leaves(c["estimators"], INTERVAL_KEYS)}
            if isinstance(c, dict) and isinstance(c.get("estimators"), dict)
            else c
            for t, c in stats["comparisons"].items()
        }
        out["statistics"] = stats | {"comparisons": comps}
    return out


def os_error_message(e: OSError, what: str | os.PathLike[str], where: str = "--run-dir") -> str:
    """One line for an ``OSError`` of a write to ``what``: the reason and what to do (``where``: the option or
    variable that chooses another place); `tracecal.errors.os_error_message` for a run, which resumes."""
    return errors.os_error_message(e, what, f"another {where}", resumes=True)


def merge_partial(
    old: Any, new: dict[str, Any], same: tuple[str, ...], sections: tuple[str, ...], where: str
) -> dict[str, Any]:
    """The document to write when a command computed only part of an output: ``new`` merged into the ``old``
    document already there (its entries of ``sections`` kept unless ``new`` recomputed them; an entry ``new``
    holds only as ``{"mean": None}``, not run, never replaces one that ran), so an output is never replaced with
    less. `errors.ValidationError` naming ``where`` and both values when ``old`` was made with other settings
    (a key of ``same``): mixing them would be silently wrong. ``old`` None (or not a document): ``new`` itself."""
    if not isinstance(old, dict):
        return new
    for key in same:
        if key in old and old[key] != new.get(key):
            raise errors.ValidationError(
                f"{where} holds results made with {key}={old[key]!r}, not {new.get(key)!r}: a partial run would "
                "mix them; give the same settings, or run every group to replace it (nothing was written)"
            )
    out = dict(old)
    for section in sections:
        if section not in new:
            continue
        merged = dict(old.get(section) or {})
        for name, entry in new[section].items():
            ran = not (isinstance(entry, dict) and "mean" in entry and entry["mean"] is None)
            if ran or name not in merged:
                merged[name] = entry
        out[section] = merged
    return out
