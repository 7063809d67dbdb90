"""Tests for the scalar calibrators in tracecal.calibration."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import expit
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

from tracecal import metrics
from tracecal.calibration import (
    CALIBRATORS,
    CalibratorFileError,
    IsotonicCalibrator,
    PlattCalibrator,
    ScalarCalibrator,
    TemperatureCalibrator,
    calibrator_from_dict,
    make_calibrator,
)
from tracecal.metrics import SingleClassWarning

NAMES = sorted(CALIBRATORS)


def _overconfident(n: int, seed: int, temperature: float = 2.5) -> tuple[np.ndarray, np.ndarray]:
    """Scores σ(z) with z ~ N(0, 3²) while the true P(correct) is σ(z / T): over-confident for T > 1."""
    rng = np.random.default_rng(seed)
    z = rng.normal(0.0, 3.0, n)
    y = (rng.random(n) < expit(z / temperature)).astype(np.int64)
    return expit(z), y


def _roundtrip(cal: ScalarCalibrator) -> ScalarCalibrator:
    return calibrator_from_dict(json.loads(json.dumps(cal.to_dict())))


# --------------------------------------------------------------------------------------------------
# behaviour


def test_platt_improves_brier_on_miscalibrated_scores():
    s_cal, y_cal = _overconfident(3000, seed=0)
    s_ev, y_ev = _overconfident(3000, seed=1)
    cal = PlattCalibrator().fit(s_cal, y_cal)
    p = cal.predict_proba(s_ev)
    assert metrics.brier(y_ev, p) < metrics.brier(y_ev, s_ev) - 0.01
    assert metrics.ece(y_ev, p) < 0.5 * metrics.ece(y_ev, s_ev)
    # Platt is monotone increasing for a positively related score: ranking preserved
    assert cal.coef_ > 0
    assert metrics.auroc(y_ev, p) == pytest.approx(metrics.auroc(y_ev, s_ev), abs=1e-9)


def test_platt_handles_unbounded_and_large_offset_scores():
    rng = np.random.default_rng(2)
    z = rng.normal(size=2000)
    y = (rng.random(2000) < expit(1.5 * z - 0.3)).astype(int)
    raw = 1e6 + 50.0 * z  # a poorly scaled score: standardisation keeps the solver happy
    p = PlattCalibrator().fit(raw, y).predict_proba(raw)
    np.testing.assert_allclose(p, expit(1.5 * z - 0.3), atol=0.08)


def test_isotonic_is_monotone_and_clipped():
    rng = np.random.default_rng(3)
    s = rng.normal(size=500)
    y = (rng.random(500) < expit(2 * s)).astype(int)
    cal = IsotonicCalibrator().fit(s, y)
    grid = np.linspace(-10, 10, 2001)
    p = cal.predict_proba(grid)
    assert np.all(np.diff(p) >= 0)
    assert p.min() >= 0 and p.max() <= 1
    assert p[0] == cal.predict_proba([s.min()])[0] and p[-1] == cal.predict_proba([s.max()])[0]
    assert metrics.brier(y, cal.predict_proba(s)) <= metrics.brier(y, expit(s))


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.tuples(st.floats(-5, 5, allow_nan=False), st.integers(0, 1)), min_size=2, max_size=60),
    st.lists(st.floats(-10, 10, allow_nan=False), min_size=1, max_size=30),
)
def test_isotonic_monotone_property(pairs, queries):
    s = np.array([a for a, _ in pairs])
    y = np.array([b for _, b in pairs])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SingleClassWarning)
        cal = IsotonicCalibrator().fit(s, y)
    q = np.sort(np.asarray(queries))
    p = cal.predict_proba(q)
    assert np.all(np.diff(p) >= 0) and np.all((p >= 0) & (p <= 1))


@pytest.mark.parametrize("true_t", [0.5, 2.5])
def test_temperature_recovers_known_temperature(true_t):
    s, y = _overconfident(20000, seed=4, temperature=true_t)
    cal = TemperatureCalibrator().fit(s, y)
    assert cal.temperature_ == pytest.approx(true_t, rel=0.1)
    p = cal.predict_proba(s)
    assert metrics.brier(y, p) <= metrics.brier(y, s)


def test_temperature_rejects_scores_outside_unit_interval():
    with pytest.raises(ValueError, match=r"expects scores in \[0, 1\]; 1 of 3"):
        TemperatureCalibrator().fit([0.2, 1.5, 0.7], [0, 1, 1])
    cal = TemperatureCalibrator().fit([0.2, 0.9, 0.7, 0.1], [0, 1, 1, 0])
    with pytest.raises(ValueError, match="platt"):
        cal.predict_proba([-0.1])


def test_temperature_handles_exact_zero_and_one():
    cal = TemperatureCalibrator().fit([0.0, 1.0, 1.0, 0.0, 0.6, 0.4], [0, 1, 0, 0, 1, 1])
    p = cal.predict_proba([0.0, 1.0])
    assert np.all(np.isfinite(p)) and 0 < p[0] < p[1] < 1


@pytest.mark.parametrize("name", NAMES)
def test_predict_proba_shape_range_and_empty(name):
    s, y = _overconfident(400, seed=5)
    cal = make_calibrator(name).fit(s, y)
    assert cal.fit(s, y) is cal
    p = cal.predict_proba(s)
    assert p.shape == (400,) and p.dtype == np.float64
    assert np.all((p >= 0) & (p <= 1))
    assert cal.predict_proba([]).shape == (0,)
    assert cal.predict_proba([0.3]).shape == (1,)


# --------------------------------------------------------------------------------------------------
# persistence


@pytest.mark.parametrize("name", NAMES)
def test_to_dict_from_dict_roundtrip_identical(name):
    s, y = _overconfident(1000, seed=6)
    cal = make_calibrator(name).fit(s, y)
    d = cal.to_dict()
    assert d["kind"] == name and d["format_version"] == 1
    assert set(d["versions"]) >= {"tracecal", "numpy", "sklearn"}
    json.dumps(d, allow_nan=False)  # plain JSON, no NaN/inf
    back = _roundtrip(cal)
    assert type(back) is type(cal)
    q = np.r_[s, np.linspace(0, 1, 101)]
    np.testing.assert_array_equal(back.predict_proba(q), cal.predict_proba(q))
    assert back.get_params() == cal.get_params()
    assert type(cal).from_dict(d).to_dict()["state"] == d["state"]


@pytest.mark.parametrize("name", NAMES)
def test_roundtrip_of_constant_fallback(name):
    with pytest.warns(SingleClassWarning):
        cal = make_calibrator(name).fit([0.2, 0.5, 0.9], [1, 1, 1])
    back = _roundtrip(cal)
    assert back.constant_ == 1.0
    np.testing.assert_array_equal(back.predict_proba([0.1, 0.7]), [1.0, 1.0])


def test_from_dict_rejects_bad_input():
    d = PlattCalibrator().fit([0.1, 0.4, 0.6, 0.9], [0, 1, 0, 1]).to_dict()
    with pytest.raises(CalibratorFileError, match="expected kind 'isotonic'"):
        IsotonicCalibrator.from_dict(d)
    with pytest.raises(CalibratorFileError, match="unknown calibrator kind"):
        calibrator_from_dict({**d, "kind": "nope"})
    with pytest.raises(CalibratorFileError, match="format_version"):
        calibrator_from_dict({**d, "format_version": 99})
    with pytest.raises(CalibratorFileError, match="missing"):
        calibrator_from_dict({**d, "state": {k: v for k, v in d["state"].items() if k != "coef"}})
    with pytest.raises(CalibratorFileError, match="finite"):
        calibrator_from_dict({**d, "state": {**d["state"], "coef": float("nan")}})
    with pytest.raises(CalibratorFileError, match="bad params"):
        calibrator_from_dict({**d, "params": {"nonsense": 1}})
    with pytest.raises(CalibratorFileError, match="expected a dict"):
        calibrator_from_dict([1, 2])  # type: ignore[arg-type]
    assert issubclass(CalibratorFileError, ValueError)


# --------------------------------------------------------------------------------------------------
# edge cases


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("label", [0, 1])
def test_single_class_fit_falls_back_to_base_rate(name, label):
    s = np.array([0.1, 0.3, 0.8, 0.95])
    with pytest.warns(SingleClassWarning, match="single class"):
        cal = make_calibrator(name).fit(s, np.full(4, label))
    assert cal.constant_ == float(label)
    np.testing.assert_array_equal(cal.predict_proba([0.0, 0.5, 1.0]), [float(label)] * 3)
    # refitting on two classes clears the fallback
    with warnings.catch_warnings():
        warnings.simplefilter("error", SingleClassWarning)
        cal.fit(s, [0, 0, 1, 1])
    assert cal.constant_ is None
    p = cal.predict_proba(s)
    assert p[0] <= p[-1] and len(np.unique(p)) > 1


@pytest.mark.parametrize("name", NAMES)
def test_nan_inf_scores_raise(name):
    cal = make_calibrator(name)
    with pytest.raises(ValueError, match=r"2 non-finite value\(s\) out of 4"):
        cal.fit([0.1, np.nan, 0.5, np.inf], [0, 1, 0, 1])
    cal.fit([0.1, 0.2, 0.5, 0.9], [0, 1, 0, 1])
    with pytest.raises(ValueError, match=r"1 non-finite value\(s\) out of 2 \(1 NaN"):
        cal.predict_proba([0.3, np.nan])


@pytest.mark.parametrize("name", NAMES)
def test_bad_labels_and_lengths(name):
    cal = make_calibrator(name)
    with pytest.raises(ValueError, match="only labels 0 and 1"):
        cal.fit([0.1, 0.2, 0.3], [0, 1, 2])
    with pytest.raises(ValueError, match=r"different lengths \(3 vs 2\)"):
        cal.fit([0.1, 0.2], [0, 1, 1])
    with pytest.raises(ValueError, match="empty"):
        cal.fit([], [])


@pytest.mark.parametrize("name", NAMES)
def test_not_fitted(name):
    cal = make_calibrator(name)
    with pytest.raises(NotFittedError):
        cal.predict_proba([0.5])
    with pytest.raises(NotFittedError):
        cal.to_dict()


def test_registry_and_make_calibrator():
    assert set(CALIBRATORS) == {"platt", "isotonic", "temperature"}
    assert isinstance(make_calibrator("platt", C=1.0), PlattCalibrator)
    assert make_calibrator("platt", C=1.0).C == 1.0
    with pytest.raises(ValueError, match="unknown calibrator 'beta'; valid names: 'platt', 'isotonic', 'temperature'"):
        make_calibrator("beta")


@pytest.mark.parametrize("name", NAMES)
def test_sklearn_conventions(name):
    cal = make_calibrator(name)
    assert not any(k.endswith("_") for k in vars(cal))  # no learned state before fit
    twin = clone(cal)
    assert twin.get_params() == cal.get_params()
    s, y = _overconfident(200, seed=7)
    cal.fit(s, y)
    assert {"n_fit_", "base_rate_", "constant_"} <= set(vars(cal))
    assert not any(k.endswith("_") for k in vars(clone(cal)))
