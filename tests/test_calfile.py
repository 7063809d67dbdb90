"""The calibrator artefact format: JSON reading limits, value checks and the class registry."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import tracecal.calibrators.base as calfile
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
    monkeypatch.setattr(calfile, "MAX_FILE_BYTES", 1024)
    with pytest.raises(CalibratorFileError, match="not a calibrator file: larger than"):
        read_calibrator_json(p)


def test_base_class_and_scalar_base_dispatch(tmp_path: Path) -> None:
    path = PlattCalibrator().fit([0.1, 0.4, 0.6, 0.9], [0, 1, 0, 1]).save(tmp_path / "p.json")
    assert type(ScalarCalibrator.load(path)) is PlattCalibrator
    with pytest.raises(CalibratorFileError, match=r"Calibrator.load reads \['Calibrator'\] .*load_calibrator"):
        Calibrator.load(path)
    d = json.loads(path.read_text())
    assert list(d) == ["format", "format_version", "class", "params", "state", "versions"]
    assert d["params"] == {"C": 1e6, "max_iter": 1000}


def test_saved_file_is_written_atomically_with_usual_mode(tmp_path: Path) -> None:
    from tracecal.traces.trace import FILE_MODE

    path = PlattCalibrator().fit([0.1, 0.4, 0.6, 0.9], [0, 1, 0, 1]).save(tmp_path / "sub" / "p.json")
    assert path.stat().st_mode & 0o777 == FILE_MODE
    assert [q.name for q in path.parent.iterdir()] == ["p.json"]  # no temporary left behind
