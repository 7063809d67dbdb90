"""The checks of the numbers in a calibrator file (`tracecal.calibrators.values`): finite, bounded, named."""

from __future__ import annotations

import math

import pytest

import tracecal.calibrators.base as base
from tracecal.calibrators.values import MAX_ABS_STATE, CalibratorFileError, json_array, json_float


def test_state_numbers_are_bounded_and_the_field_is_named() -> None:
    assert json_float(MAX_ABS_STATE, "w") == MAX_ABS_STATE and json_array([-MAX_ABS_STATE, 0.0], "w").size == 2
    with pytest.raises(CalibratorFileError, match=r"state.bias must lie in \[-1e\+06, 1e\+06\], got 1e\+308"):
        json_float(1e308, "state.bias")
    with pytest.raises(CalibratorFileError, match=r"state.means must lie in \[-1e\+06, 1e\+06\], got state.means\[1\]"):
        json_array([0.0, -1e308], "state.means")
    assert json_float(1e9, "state.penalty", 0.0, math.inf) == 1e9  # a reader may state a wider range
    assert json_array([1e9], "state.x", bound=1e12).tolist() == [1e9]


def test_the_envelope_module_re_exports_the_checks() -> None:
    assert base.CalibratorFileError is CalibratorFileError and base.json_float is json_float
    assert base.MAX_ABS_STATE == MAX_ABS_STATE
