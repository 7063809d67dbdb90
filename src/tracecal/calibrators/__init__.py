"""Calibrators: map a confidence (or a decoding trace) to P(correct), fitted on labelled answers
(docs/method.md §3, §5).

The registry of every calibrator class, and the ways in:

* `make_calibrator` (name → a new scalar calibrator: ``"platt"``, ``"isotonic"``, ``"temperature"``);
* `load_calibrator` (a file written by ``cal.save(path)`` → the fitted calibrator, whatever its class), which
  dispatches on the class name through the registry `CALIBRATOR_CLASSES` (never an import by name);
* ``cal.confidence(traces)`` (`Calibrator.confidence`): P(correct) per answer from a fitted calibrator of any class,
  what it reads (``cal.reads``: the traces, one score per answer - c_TRACE by default -, or the hidden-state
  summaries the traces carry) taken from the traces;
* `register_calibrator` (a new `Calibrator` subclass → the registry): its files then load, and ``tracecal score``,
  ``tracecal score-answers``, the gateway and the Python API apply it, none of them touched.

Modules: `tracecal.calibrators.base` (the sklearn base class `Calibrator`, the one JSON envelope, parameter
constraints), `tracecal.calibrators.scalar` (Platt, isotonic, temperature), `tracecal.calibrators.features_base`
(the shared base of the trace-feature calibrators), `tracecal.calibrators.logistic` (their logistic fits),
`tracecal.calibrators.traceplus` (TRACE+), `tracecal.calibrators.traceplus_prior` (TRACE+ shrunk toward
Platt(TRACE)), `tracecal.calibrators.traceplus_cv` (a cross-validated mixture of single statistics),
`tracecal.calibrators.probe` (`HiddenProbe`: a probe on hidden-state summaries, which reads ``"hidden"``).
"""

from __future__ import annotations

import os
from typing import Any

from tracecal._validation import check_path
from tracecal.calibrators.base import READS, Calibrator, CalibratorFileError
from tracecal.calibrators.probe import HiddenProbe
from tracecal.calibrators.scalar import (
    CALIBRATORS,
    SCALAR_CLASSES,
    IsotonicCalibrator,
    PlattCalibrator,
    ScalarCalibrator,
    TemperatureCalibrator,
)
from tracecal.calibrators.traceplus import TracePlus
from tracecal.calibrators.traceplus_cv import TracePlusCV
from tracecal.calibrators.traceplus_prior import TracePlusPrior
from tracecal.errors import ValidationError

__all__ = [
    "CALIBRATORS",
    "CALIBRATOR_CLASSES",
    "Calibrator",
    "CalibratorFileError",
    "HiddenProbe",
    "IsotonicCalibrator",
    "READS",
    "PlattCalibrator",
    "ScalarCalibrator",
    "TemperatureCalibrator",
    "TracePlus",
    "TracePlusCV",
    "TracePlusPrior",
    "load_calibrator",
    "make_calibrator",
    "register_calibrator",
]

CALIBRATOR_CLASSES: dict[str, type[Calibrator]] = {
    **SCALAR_CLASSES,
    "TracePlus": TracePlus,
    "TracePlusPrior": TracePlusPrior,
    "TracePlusCV": TracePlusCV,
    "HiddenProbe": HiddenProbe,
}
"""Every calibrator class a file may hold, by class name: the registry `load_calibrator` dispatches on
(`register_calibrator` adds to it)."""


def register_calibrator(cls: type[Calibrator]) -> type[Calibrator]:
    """Add a calibrator class to `CALIBRATOR_CLASSES` under its class name (usable as a class decorator); returns it.

    The class must be a `Calibrator` subclass that declares what it reads (``reads`` in `READS`) and whose name no
    registered class has; else `ValidationError` saying which. Its fitted files then load with `load_calibrator` and
    apply everywhere a calibrator is applied (`Calibrator.confidence`).
    """
    if not (isinstance(cls, type) and issubclass(cls, Calibrator)):
        raise ValidationError(f"a calibrator class must subclass tracecal.calibrators.Calibrator, got {cls!r}")
    if cls.reads not in READS:
        raise ValidationError(f"{cls.__name__}.reads must declare what it reads, one of {READS}; got {cls.reads!r}")
    if cls.__name__ in CALIBRATOR_CLASSES and CALIBRATOR_CLASSES[cls.__name__] is not cls:
        raise ValidationError(f"a calibrator class named {cls.__name__!r} is already registered: rename the class")
    CALIBRATOR_CLASSES[cls.__name__] = cls
    return cls


def make_calibrator(name: str, **kw: Any) -> ScalarCalibrator:
    """A new, unfitted scalar calibrator by registry name (`CALIBRATORS`), with hyper-parameters ``kw``.

    >>> from tracecal.calibrators import make_calibrator
    >>> cal = make_calibrator("platt").fit([0.1, 0.3, 0.4, 0.6, 0.7, 0.9], [0, 0, 1, 0, 1, 1])
    >>> p = cal.predict_proba([0.2, 0.8])
    >>> bool(p[0] < 0.5 < p[1])
    True
    >>> make_calibrator("beta")
    Traceback (most recent call last):
        ...
    tracecal.errors.ValidationError: unknown calibrator 'beta'; valid names: 'platt', 'isotonic', 'temperature'
    """
    try:
        cls = CALIBRATORS[name]
    except (KeyError, TypeError):
        valid = ", ".join(repr(k) for k in CALIBRATORS)
        raise ValidationError(f"unknown calibrator {name!r}; valid names: {valid}") from None
    return cls(**kw)


def load_calibrator(path: str | os.PathLike[str]) -> Calibrator:
    """Read a calibrator file of any class in `CALIBRATOR_CLASSES` (TRACE+ and its variants, Platt, isotonic,
    temperature, and any class added by `register_calibrator`); apply it with ``cal.confidence(traces)``.

    Raises `CalibratorFileError` naming the file and what to fix; ``FileNotFoundError`` for a missing file.

    >>> import tempfile
    >>> from pathlib import Path
    >>> from tracecal.calibrators import PlattCalibrator, load_calibrator
    >>> cal = PlattCalibrator().fit([0.1, 0.3, 0.4, 0.6, 0.7, 0.9], [0, 0, 1, 0, 1, 1])
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     back = load_calibrator(cal.save(Path(tmp) / "platt.json"))
    >>> type(back).__name__, bool(back.predict_proba([0.5])[0] == cal.predict_proba([0.5])[0])
    ('PlattCalibrator', True)
    >>> from tracecal.traces.trace import TraceBatch
    >>> back.reads, back.confidence(TraceBatch.from_lists([[0.1, 0.2], []], [[0.5, 0.4], []])).round(3).tolist()
    ('score', [0.747, nan])
    """
    return Calibrator.load(check_path(path, "path"), registry=CALIBRATOR_CLASSES)
