"""One vocabulary for parameter constraints, declared once per setting (scikit-learn's
``_parameter_constraints`` style) and checked by one call: used by the configs, the CLI, the gateway and the
calibrators alike, so a value is refused with the same message wherever it is given.

A constraint is an `Interval` (a real or whole number between two ends), an `Options` (one of a fixed set
of strings), a `Flag` (true or false), a `ListOf` (a non-empty list whose items meet a constraint), ``None`` (the
value may be None) or a tuple of those (any may match). Every surface a setting enters by — a Python argument, a
command-line option (``--seed``), a JSON field of the gateway, a value read from a file (``config.json of RUN``) —
checks it against the one declared constraint, so the same bad value gets the same message, prefixed by where it
came from (`check_param`'s ``name``; `from_source` for a file). `SEED` is the one constraint of every random seed.
`check_text` is the one check of user text before it reaches a tokenizer or a file: a string of valid Unicode (no
lone surrogate).

>>> from tracecal._validation import Interval, Options, check_param, check_params
>>> check_param("cal_frac", 0.35, Interval(float, 0, 1, closed="neither"))
0.35
>>> check_param("limit", -5, Interval(int, 1, None))
Traceback (most recent call last):
    ...
tracecal.errors.ValidationError: limit must be a whole number ≥ 1, got -5
>>> check_params({"dtype": "float8"}, {"dtype": Options("auto", "float32")})
Traceback (most recent call last):
    ...
tracecal.errors.ValidationError: dtype must be one of auto, float32, got 'float8'
>>> check_param("--seed", -1, SEED)
Traceback (most recent call last):
    ...
tracecal.errors.ValidationError: --seed must be a whole number in [0, 4294967295], got -1
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from tracecal.errors import ValidationError

__all__ = [
    "Interval",
    "Options",
    "Flag",
    "ListOf",
    "Constraint",
    "SEED",
    "check_param",
    "check_params",
    "check_text",
    "check_path",
    "float_array",
    "int_array",
    "from_source",
    "is_number",
    "closest",
]


def closest(name: str, known: Any, cutoff: float = 0.6) -> str | None:
    """The known name most like ``name`` (`difflib.get_close_matches`, similarity ≥ ``cutoff``), for a "did you
    mean" hint; None when nothing is close.

    >>> closest("trivaqa", ["triviaqa", "svamp"])
    'triviaqa'
    """
    import difflib

    got = difflib.get_close_matches(name, list(known), n=1, cutoff=cutoff)
    return got[0] if got else None


def check_text(text: Any, what: str, error: type[Exception] = ValidationError) -> str:
    """``text`` if it is a string of valid Unicode (encodable as UTF-8); else ``error`` naming ``what``
    (e.g. ``"answer 3"``, ``"FILE:7: 'prompt'"``) and the first lone surrogate (``"\\ud800"``, which a JSON
    ``\\ud800`` escape without its pair gives; no tokenizer and no UTF-8 file can take it)."""
    if not isinstance(text, str):
        raise error(f"{what} must be a string, got {type(text).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise error(
            f"{what} is not valid Unicode: {e.object[e.start : e.end]!r} at character {e.start} is a lone surrogate "
            "(send UTF-8 text; in JSON, a \\ud800-\\udfff escape must be half of a pair)"
        ) from None
    return text


def is_number(value: Any, integer: bool = False) -> bool:
    """True for a real (an integral with ``integer``) number that is finite; booleans are not numbers."""
    kind = numbers.Integral if integer else numbers.Real
    if isinstance(value, bool) or not isinstance(value, kind):
        return False
    return integer or math.isfinite(float(value))


@dataclass(frozen=True)
class Interval:
    """A finite number of ``kind`` (``int``: whole numbers only; ``float``: any real) in [left, right].

    ``None`` for an end leaves it open-ended; ``closed`` says which ends belong to the interval.
    """

    kind: type
    left: float | None
    right: float | None
    closed: Literal["both", "left", "right", "neither"] = "both"

    def accepts(self, value: Any) -> bool:
        if not is_number(value, integer=self.kind is int):
            return False
        v = float(value)
        lo_ok = self.left is None or v > self.left or (v == self.left and self.closed in ("both", "left"))
        hi_ok = self.right is None or v < self.right or (v == self.right and self.closed in ("both", "right"))
        return lo_ok and hi_ok

    def describe(self) -> str:
        what = "a whole number" if self.kind is int else "a finite number"
        left, right = self._shown(self.left), self._shown(self.right)
        if self.left is not None and self.right is None:
            return f"{what} {'≥' if self.closed in ('both', 'left') else '>'} {left}"
        if self.left is None and self.right is not None:
            return f"{what} {'≤' if self.closed in ('both', 'right') else '<'} {right}"
        if self.left is None:
            return what
        lb = "[" if self.closed in ("both", "left") else "("
        rb = "]" if self.closed in ("both", "right") else ")"
        return f"{what} in {lb}{left}, {right}{rb}"

    def _shown(self, bound: float | None) -> str:
        """A bound as a user types it: every digit of a whole-number bound (``4294967295``, not ``4.29497e+09``)."""
        if bound is None:
            return ""
        return str(int(bound)) if self.kind is int and float(bound).is_integer() else f"{bound:g}"


@dataclass(frozen=True, init=False)
class Options:
    """One of a fixed set of strings."""

    values: tuple[str, ...]

    def __init__(self, *values: str) -> None:
        object.__setattr__(self, "values", tuple(values))

    def accepts(self, value: Any) -> bool:
        return isinstance(value, str) and value in self.values

    def describe(self) -> str:
        return f"one of {', '.join(self.values)}"


@dataclass(frozen=True)
class Flag:
    """True or false (``bool`` or ``numpy.bool_``; 0 / 1 are not flags)."""

    def accepts(self, value: Any) -> bool:
        return isinstance(value, bool | np.bool_)

    def describe(self) -> str:
        return "true or false"


def _flat_list(value: Any) -> bool:
    return isinstance(value, list | tuple) or (isinstance(value, np.ndarray) and value.ndim == 1)


def _is_pos_inf(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and value == math.inf


@dataclass(frozen=True)
class ListOf:
    """A non-empty list, tuple or 1-D array whose every item meets ``item`` (or is +inf, with ``allow_inf``),
    with no item twice (``unique``); ``what`` names the items in messages."""

    item: Interval | Options
    what: str
    allow_inf: bool = False
    unique: bool = False

    def _bad_item(self, value: Any) -> int | None:
        for i, v in enumerate(value):
            if not (self.item.accepts(v) or (self.allow_inf and _is_pos_inf(v))):
                return i
        return None

    def accepts(self, value: Any) -> bool:
        if not _flat_list(value) or len(value) == 0:
            return False
        return self._bad_item(value) is None and (not self.unique or len(set(value)) == len(value))

    def describe(self) -> str:
        return f"a non-empty list of {self.what}"

    def problem(self, name: str, value: Any) -> str:
        """What is wrong with the items of a list that `accepts` refuses ("" when the list itself is wrong)."""
        if not _flat_list(value):
            return ""
        i = self._bad_item(value)
        if i is not None:
            return f"; {name}[{i}] = {value[i]!r} is not {self.item.describe()}{' or inf' if self.allow_inf else ''}"
        repeated = [v for j, v in enumerate(value) if v in list(value)[:j]]
        return f"; {repeated[0]!r} is given twice" if repeated else ""


Constraint = Interval | Options | Flag | ListOf | None | tuple[Any, ...]

SEED = Interval(int, 0, 2**32 - 1)
"""Every random seed (numpy's legacy and torch's seeds take a whole number in [0, 2³² − 1]): ``--seed``,
``seed=``, a config's ``seed``."""


def _alternatives(constraint: Constraint) -> tuple[Any, ...]:
    return constraint if isinstance(constraint, tuple) else (constraint,)


def check_param(name: str, value: Any, constraint: Constraint, error: type[Exception] = ValidationError) -> Any:
    """``value`` unchanged if it meets ``constraint``; else ``error`` ``"<name> must be <what>, got <value>"`` (one
    line, the same wherever the setting is given; ``name`` as that surface spells it: ``seed``, ``--seed``, a JSON
    field, ``config.json of RUN: seed``), a `ListOf` adding which item is wrong."""
    alts = _alternatives(constraint)
    for c in alts:
        if (value is None and c is None) or (c is not None and value is not None and c.accepts(value)):
            return value
    what = " or ".join("None" if c is None else c.describe() for c in alts)
    detail = "".join(c.problem(name, value) for c in alts if isinstance(c, ListOf))
    raise error(f"{name} must be {what}, got {value!r}{detail}")


def check_params(
    params: Mapping[str, Any],
    constraints: Mapping[str, Constraint],
    error: type[Exception] = ValidationError,
    rename: Any = None,
) -> None:
    """Check every parameter that has a constraint, in the order declared (the first that fails is reported);
    ``rename(name)`` spells the name for the user (e.g. the CLI's ``--cal-frac`` for ``cal_frac``, or
    `from_source`'s ``config.json of RUN: cal_frac``)."""
    for name, constraint in constraints.items():
        if name in params:
            check_param(rename(name) if rename else name, params[name], constraint, error)


def from_source(source: Any) -> Any:
    """A ``rename`` for `check_params` that names the file a value was read from: ``cal_frac`` →
    ``config.json of runs/main: cal_frac`` (``source`` as given, e.g. ``"config.json of runs/main"``)."""
    return lambda name: f"{source}: {name}"


def _array(value: Any, name: str) -> np.ndarray:
    """``np.asarray(value)`` or `ValidationError` naming ``name`` (text, a mapping, None, a bool or what numpy cannot
    read is not a sequence of numbers)."""
    if value is None or isinstance(value, str | bytes | bool | Mapping | np.bool_):
        raise ValidationError(f"{name} must be a sequence of numbers, got {type(value).__name__} {value!r:.60}")
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError, OverflowError) as e:
        raise ValidationError(f"{name} must be a sequence of numbers: {e}") from None
    if arr.size and arr.dtype.kind not in "iuf":
        raise ValidationError(f"{name} must hold numbers, got {arr.dtype.name} values such as {_item(arr):.40}")
    return arr


def _item(arr: np.ndarray) -> str:
    """The first value of ``arr`` as Python shows it (``'a'``, ``nan``, not ``np.str_('a')``)."""
    v = arr.flat[0]
    return repr(v.item() if isinstance(v, np.generic) else v)


def float_array(value: Any, name: str) -> np.ndarray:
    """``value`` as a contiguous 1-D float64 array (a scalar becomes one value); `ValidationError` naming ``name``
    when it is not numbers (text, None, a mapping, objects). Values are not bounded here (NaN and ±∞ pass: the
    caller's value rule decides, e.g. `tracecal.traces.trace.check_token_values`).

    >>> float_array([1, 2.5], "surprisal")
    array([1. , 2.5])
    >>> float_array(["a"], "surprisal")
    Traceback (most recent call last):
        ...
    tracecal.errors.ValidationError: surprisal must hold numbers, got str32 values such as 'a'
    """
    return np.ascontiguousarray(_array(value, name).astype(np.float64).reshape(-1))


def int_array(value: Any, name: str, ndim: int = 1) -> np.ndarray:
    """``value`` as a contiguous int64 array (1-D, or ``ndim`` = 2 kept as given); `ValidationError` naming
    ``name`` for anything but whole numbers within int64 (NaN, ±∞, 1.5, 2**63, text, None).

    >>> int_array([3, 4.0], "token_ids")
    array([3, 4])
    >>> int_array([float("nan")], "token_ids")
    Traceback (most recent call last):
        ...
    tracecal.errors.ValidationError: token_ids must hold whole numbers in int64, got nan
    """
    arr = _array(value, name)
    if arr.size and arr.dtype.kind == "f":
        bad = ~np.isfinite(arr) | (arr != np.round(arr)) | (np.abs(arr) >= 2.0**63)
    elif arr.size and arr.dtype.kind == "u":
        bad = arr > np.iinfo(np.int64).max
    else:
        bad = np.zeros(arr.shape, dtype=bool)
    if bad.any():
        raise ValidationError(f"{name} must hold whole numbers in int64, got {_item(arr[bad])}")
    out = arr.astype(np.int64)
    return np.ascontiguousarray(out.reshape(-1) if ndim == 1 else out)


def check_path(value: Any, name: str) -> Any:
    """``value`` if it is a usable path (a non-empty str or os.PathLike without a NUL character); else
    `ValidationError` naming ``name`` (the parameter or option), before anything is opened or created.

    >>> check_path(None, "path")
    Traceback (most recent call last):
        ...
    tracecal.errors.ValidationError: path must be a path (str or os.PathLike), got NoneType
    """
    import os

    if isinstance(value, bool) or not isinstance(value, str | os.PathLike):
        raise ValidationError(f"{name} must be a path (str or os.PathLike), got {type(value).__name__}")
    text = os.fspath(value)
    if not isinstance(text, str) or not text.strip():
        raise ValidationError(f"{name} is empty: give a path")
    if "\x00" in text:
        raise ValidationError(f"{name} holds a NUL character: {text!r:.80}")
    longest = max(len(part.encode("utf-8", "surrogatepass")) for part in text.split(os.sep))
    if longest > NAME_MAX or len(text.encode("utf-8", "surrogatepass")) > PATH_MAX:
        raise ValidationError(f"{name} is too long for a file system ({NAME_MAX} bytes a name, {PATH_MAX} a path)")
    return value


NAME_MAX, PATH_MAX = 255, 4096
"""The longest file name and path (bytes) `check_path` lets through: Linux's limits, which every common file system
keeps at or below."""
