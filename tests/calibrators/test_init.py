"""The calibrator registry (`tracecal.calibrators`): `CALIBRATOR_CLASSES`, `load_calibrator`, `make_calibrator`."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import tracecal
import tracecal.calibrators as calibrators
from tracecal.calibrators import (
    CALIBRATOR_CLASSES,
    CALIBRATORS,
    CalibratorFileError,
    PlattCalibrator,
    TracePlus,
    TracePlusCV,
    TracePlusPrior,
    load_calibrator,
    make_calibrator,
)
from tracecal.errors import TracecalError
from tracecal.traces.trace import TraceBatch


def _traces(n: int = 120, seed: int = 0) -> tuple[TraceBatch, np.ndarray]:
    rng = np.random.default_rng(seed)
    hard = rng.random(n)
    lens = rng.integers(1, 20, n)
    H = [rng.gamma(1.0, 0.3 + 2 * h, k) for h, k in zip(hard, lens, strict=True)]
    S = [rng.gamma(1.0, 0.2 + h, k) for h, k in zip(hard, lens, strict=True)]
    return TraceBatch.from_lists(S, H), (rng.random(n) > hard).astype(int)


def test_one_loader_for_every_class(tmp_path: Path) -> None:
    assert set(CALIBRATOR_CLASSES) == {
        "TracePlus",
        "TracePlusPrior",
        "TracePlusCV",
        "PlattCalibrator",
        "IsotonicCalibrator",
        "TemperatureCalibrator",
        "HiddenProbe",
    }
    platt = PlattCalibrator().fit([0.1, 0.4, 0.6, 0.9], [0, 1, 0, 1]).save(tmp_path / "platt.json")
    assert type(load_calibrator(platt)) is PlattCalibrator
    with pytest.raises(CalibratorFileError, match="holds a 'PlattCalibrator' calibrator; TracePlus.load reads"):
        TracePlus.load(platt)


@pytest.mark.parametrize("cls", [TracePlus, TracePlusPrior, TracePlusCV])
def test_load_calibrator_reads_each_trace_calibrator(tmp_path: Path, cls: type) -> None:
    b, y = _traces()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cal = cls().fit(b, y) if cls is not TracePlusCV else cls(n_repeats=1).fit(b, y)
    back = load_calibrator(cal.save(tmp_path / "c.json"))
    assert type(back) is cls and back.get_params() == cal.get_params()
    np.testing.assert_array_equal(back.predict_proba(b), cal.predict_proba(b))


def test_registry_and_make_calibrator() -> None:
    assert set(CALIBRATORS) == {"platt", "isotonic", "temperature"}
    assert isinstance(make_calibrator("platt", C=1.0), PlattCalibrator)
    assert make_calibrator("platt", C=1.0).C == 1.0
    assert make_calibrator("platt") is not make_calibrator("platt")  # a new, unfitted calibrator each time
    with pytest.raises(ValueError, match="unknown calibrator 'beta'; valid names: 'platt', 'isotonic', 'temperature'"):
        make_calibrator("beta")
    with pytest.raises(ValueError, match="unknown calibrator"):
        make_calibrator(["platt"])  # type: ignore[arg-type]  # an unhashable name is refused the same way


def test_missing_and_foreign_files(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_calibrator(tmp_path / "missing.json")
    (tmp_path / "x.json").write_text('{"format": "sklearn"}')
    with pytest.raises(CalibratorFileError, match=r"x.json: not a calibrator file") as err:
        load_calibrator(tmp_path / "x.json")
    assert isinstance(err.value, TracecalError) and isinstance(err.value, ValueError)


def test_the_package_exposes_the_registry() -> None:
    assert tracecal.load_calibrator is calibrators.load_calibrator
    assert tracecal.TracePlus is TracePlus and tracecal.CalibratorFileError is CalibratorFileError
    assert set(calibrators.__all__) >= {"load_calibrator", "make_calibrator", "CALIBRATOR_CLASSES", "TracePlus"}
    assert all(CALIBRATOR_CLASSES[name].__name__ == name for name in CALIBRATOR_CLASSES)
