"""Calibrators: map a confidence (or a decoding trace) to P(correct), fitted on labelled answers (METHOD §3, §5).

The registry of every calibrator class, and the two ways in:

* `make_calibrator` (name → a new scalar calibrator: ``"platt"``, ``"isotonic"``, ``"temperature"``);
* `load_calibrator` (a file written by ``cal.save(path)`` → the fitted calibrator, whatever its class), which
  dispatches on the class name through the fixed registry `CALIBRATOR_CLASSES` (never an import by name).

Modules: `tracecal.calibrators.base` (the sklearn base class `Calibrator`, the one JSON envelope, parameter
constraints), `tracecal.calibrators.scalar` (Platt, isotonic, temperature), `tracecal.calibrators.features_base`
(the shared base of the trace-feature calibrators), `tracecal.calibrators.logistic` (their logistic fits),
`tracecal.calibrators.traceplus` (TRACE+), `tracecal.calibrators.traceplus_prior` (TRACE+ shrunk toward
Platt(TRACE)), `tracecal.calibrators.traceplus_cv` (a cross-validated mixture of single statistics).
"""

from __future__ import annotations

import os
from typing import Any

from tracecal.calibrators.base import Calibrator, CalibratorFileError
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

__all__ = [
    "CALIBRATORS",
    "CALIBRATOR_CLASSES",
    "Calibrator",
    "CalibratorFileError",
    "IsotonicCalibrator",
    "PlattCalibrator",
    "ScalarCalibrator",
    "TemperatureCalibrator",
    "TracePlus",
    "TracePlusCV",
    "TracePlusPrior",
    "load_calibrator",
    "make_calibrator",
]

CALIBRATOR_CLASSES: dict[str, type[Calibrator]] = {
    **SCALAR_CLASSES,
    "TracePlus": TracePlus,
    "TracePlusPrior": TracePlusPrior,
    "TracePlusCV": TracePlusCV,
}
"""Every calibrator class a file may hold, by class name: the fixed registry `load_calibrator` dispatches on."""


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
    ValueError: unknown calibrator 'beta'; valid names: 'platt', 'isotonic', 'temperature'
    """
    try:
        cls = CALIBRATORS[name]
    except (KeyError, TypeError):
        valid = ", ".join(repr(k) for k in CALIBRATORS)
        raise ValueError(f"unknown calibrator {name!r}; valid names: {valid}") from None
    return cls(**kw)


def load_calibrator(path: str | os.PathLike[str]) -> Calibrator:
    """Read a calibrator file of any class in `CALIBRATOR_CLASSES` (TRACE+, Platt, isotonic, temperature).

    Raises `CalibratorFileError` naming the file and what to fix; ``FileNotFoundError`` for a missing file.

    >>> import tempfile
    >>> from pathlib import Path
    >>> from tracecal.calibrators import PlattCalibrator, load_calibrator
    >>> cal = PlattCalibrator().fit([0.1, 0.3, 0.4, 0.6, 0.7, 0.9], [0, 0, 1, 0, 1, 1])
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     back = load_calibrator(cal.save(Path(tmp) / "platt.json"))
    >>> type(back).__name__, bool(back.predict_proba([0.5])[0] == cal.predict_proba([0.5])[0])
    ('PlattCalibrator', True)
    """
    return Calibrator.load(path, registry=CALIBRATOR_CLASSES)
