"""The calibrator artefact format: JSON reading limits, value checks and the class registry."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import tracecal.calibrators.values as calvalues
from tracecal.calibrators.base import Calibrator, CalibratorFileError, check_number, read_calibrator_json
from tracecal.calibrators.scalar import PlattCalibrator, ScalarCalibrator


def test_check_number_messages() -> None:
    assert check_number(3, "k", 1, integer=True) == 3.0
    with pytest.raises(ValueError, match=r"^k must be an integer, got 2.5$"):
        check_number(2.5, "k", integer=True)
    with pytest.raises(ValueError, match=r"^flag must be a number, got True$"):
        check_number(True, "flag")
    with pytest.raises(ValueError, match=r"^p must lie in \(0, 1\), got 1.0$"):
        check_number(1.0, "p", 0.0, 1.0, open_lo=True, open_hi=True)
    with pytest.raises(CalibratorFileError, match=r"^x must be finite, got inf$"):
        check_number(float("inf"), "x", error=CalibratorFileError)
    assert check_number(np.float32(0.5), "x") == 0.5


def test_oversized_file_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "big.json"
    p.write_text(json.dumps({"format": "x", "pad": "y" * 4096}))
    monkeypatch.setattr(calvalues, "MAX_FILE_BYTES", 1024)
    with pytest.raises(
        CalibratorFileError, match=r"calibrator file .*big.json: 4,\d{3} bytes, larger than the 1,024 bytes"
    ):
        read_calibrator_json(p)


def test_base_class_and_scalar_base_dispatch(tmp_path: Path) -> None:
    path = PlattCalibrator().fit([0.1, 0.4, 0.6, 0.9], [0, 1, 0, 1]).save(tmp_path / "p.json")
    assert type(ScalarCalibrator.load(path)) is PlattCalibrator
    with pytest.raises(CalibratorFileError, match=r"Calibrator.load reads \['Calibrator'\] .*load_calibrator"):
        Calibrator.load(path)
    d = json.loads(path.read_text())
    assert list(d) == ["format", "format_version", "class", "params", "state", "versions", "provenance"]
    assert d["params"] == {"C": 1e6, "max_iter": 1000}


def test_saved_file_is_written_atomically_with_usual_mode(tmp_path: Path) -> None:
    from tracecal._outputs import FILE_MODE

    path = PlattCalibrator().fit([0.1, 0.4, 0.6, 0.9], [0, 1, 0, 1]).save(tmp_path / "sub" / "p.json")
    assert path.stat().st_mode & 0o777 == FILE_MODE
    assert [q.name for q in path.parent.iterdir()] == ["p.json"]  # no temporary left behind


# ------------------------------------------------------------------------------ parameter constraints


def test_calibrator_file_error_is_a_tracecal_error_and_a_value_error() -> None:
    from tracecal.errors import TracecalError

    assert issubclass(CalibratorFileError, TracecalError) and issubclass(CalibratorFileError, ValueError)


def test_every_calibrator_declares_a_constraint_for_each_parameter() -> None:
    from tracecal.calibrators import CALIBRATOR_CLASSES

    for name, cls in CALIBRATOR_CLASSES.items():
        assert set(cls._parameter_constraints) == set(cls().get_params(deep=False)), name


def test_a_calibrator_file_with_a_byte_order_mark_loads(tmp_path: Path) -> None:
    cal = PlattCalibrator().fit([0.1, 0.4, 0.6, 0.9], [0, 1, 0, 1])
    path = tmp_path / "bom.json"
    path.write_bytes(json.dumps(cal.to_dict()).encode("utf-8-sig"))
    assert PlattCalibrator.load(path).predict_proba([0.3]) == pytest.approx(cal.predict_proba([0.3]))


def test_every_file_carries_its_provenance_and_loads_it_back(tmp_path: Path) -> None:
    """The answers a calibrator was fitted on travel with the file: unknown fields null, this tracecal's version;
    a file from before provenance loads with none; a malformed record is refused naming the field."""
    from tracecal.version import __version__

    cal = PlattCalibrator().fit([0.1, 0.4, 0.6, 0.9], [0, 1, 0, 1])
    plain = json.loads(cal.save(tmp_path / "plain.json").read_text())["provenance"]
    assert plain == {"model": None, "dtype": None, "tracecal": __version__, "run": None}
    cal.provenance = {"model": "m", "dtype": "bfloat16", "tracecal": "0.0.1", "run": "/runs/a"}
    back = ScalarCalibrator.load(cal.save(tmp_path / "p.json"))
    assert back.provenance == cal.provenance and back.to_dict()["provenance"] == cal.provenance
    d = json.loads((tmp_path / "p.json").read_text())
    del d["provenance"]
    assert Calibrator.from_dict(d, registry={"PlattCalibrator": PlattCalibrator}).provenance is None
    for bad, what in (([1], "'provenance' must be a JSON object"), ({"model": 3}, "provenance 'model' must be")):
        with pytest.raises(CalibratorFileError, match=what):
            Calibrator.from_dict(d | {"provenance": bad}, registry={"PlattCalibrator": PlattCalibrator})
