"""Tests for the scalar calibrators in tracecal.calibrators.scalar."""

from __future__ import annotations

import json
import warnings
from copy import deepcopy

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import expit
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.utils import estimator_checks as sk_checks
from sklearn.utils.validation import check_is_fitted

from tracecal.calibrators import make_calibrator
from tracecal.calibrators.scalar import (
    CALIBRATORS,
    CalibratorFileError,
    IsotonicCalibrator,
    PlattCalibrator,
    ScalarCalibrator,
    TemperatureCalibrator,
    calibrator_from_dict,
)
from tracecal.stats import metrics
from tracecal.stats.metrics import SingleClassWarning

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
    assert d["format"] == "tracecal.calibrator" and d["format_version"] == 2
    assert d["class"] == type(cal).__name__
    assert set(d["versions"]) >= {"tracecal", "numpy", "sklearn"}
    json.dumps(d, allow_nan=False)  # plain JSON, no NaN/inf
    back = _roundtrip(cal)
    assert type(back) is type(cal)
    q = np.r_[s, np.linspace(0, 1, 101)]
    np.testing.assert_array_equal(back.predict_proba(q), cal.predict_proba(q))
    assert back.get_params() == cal.get_params()
    assert type(cal).from_dict(d).to_dict()["state"] == d["state"]


@pytest.mark.parametrize("name", NAMES)
def test_save_load_file(name, tmp_path):
    s, y = _overconfident(300, seed=8)
    cal = make_calibrator(name).fit(s, y)
    path = cal.save(tmp_path / f"{name}.json")
    for back in (type(cal).load(path), ScalarCalibrator.load(path)):
        assert type(back) is type(cal)
        np.testing.assert_array_equal(back.predict_proba(s), cal.predict_proba(s))
    other = next(c for c in CALIBRATORS.values() if c is not type(cal))
    with pytest.raises(CalibratorFileError, match=f"holds a '{type(cal).__name__}' calibrator; {other.__name__}.load"):
        other.load(path)


@pytest.mark.parametrize("name", NAMES)
def test_roundtrip_of_constant_fallback(name):
    with pytest.warns(SingleClassWarning):
        cal = make_calibrator(name).fit([0.2, 0.5, 0.9], [1, 1, 1])
    back = _roundtrip(cal)
    assert back.constant_ == 1.0
    np.testing.assert_array_equal(back.predict_proba([0.1, 0.7]), [1.0, 1.0])


# dicts written by ScalarCalibrator.to_dict before the shared envelope (format_version 1), and their predictions
LEGACY = [
    (
        {
            "kind": "platt",
            "format_version": 1,
            "params": {"C": 1000000.0, "max_iter": 1000},
            "state": {
                "n_fit": 6,
                "base_rate": 0.5,
                "constant": None,
                "mean": 0.4583333333333333,
                "scale": 0.29498116700713095,
                "coef": 77.51806701469431,
                "intercept": 21.790628314391963,
            },
        },
        [7.264446138495922e-38, 0.999999999999994, 1.0],
    ),
    (
        {
            "kind": "isotonic",
            "format_version": 1,
            "params": {},
            "state": {
                "n_fit": 6,
                "base_rate": 0.5,
                "constant": None,
                "x_thresholds": [0.1, 0.35, 0.4, 0.9],
                "y_thresholds": [0.0, 0.0, 1.0, 1.0],
            },
        },
        [0.0, 1.0, 1.0],
    ),
    (
        {
            "kind": "temperature",
            "format_version": 1,
            "params": {"eps": 1e-06, "max_log_t": 7.0},
            "state": {"n_fit": 6, "base_rate": 0.5, "constant": None, "temperature": 0.45533104311504896},
        },
        [0.0015521054857226902, 0.5, 0.9984478945142773],
    ),
]


@pytest.mark.parametrize("d, expected", LEGACY)
def test_legacy_kind_dicts_still_load(d, expected):
    cal = calibrator_from_dict(d)
    assert cal.kind == d["kind"]
    np.testing.assert_allclose(cal.predict_proba([0.05, 0.5, 0.95]), expected, rtol=1e-12, atol=1e-300)
    assert cal.to_dict()["format_version"] == 2


def _platt_dict() -> dict:
    return PlattCalibrator().fit([0.1, 0.4, 0.6, 0.9], [0, 1, 0, 1]).to_dict()


def _with_state(d: dict, **kw) -> dict:
    return {**d, "state": {**d["state"], **kw}}


def test_from_dict_rejects_bad_input():
    d = _platt_dict()
    with pytest.raises(CalibratorFileError, match="holds a 'PlattCalibrator' calibrator; IsotonicCalibrator.load"):
        IsotonicCalibrator.from_dict(d)
    with pytest.raises(CalibratorFileError, match="unknown calibrator kind 'nope'"):
        calibrator_from_dict({"kind": "nope", "format_version": 1})
    with pytest.raises(CalibratorFileError, match=r"holds a 'Nope' calibrator; ScalarCalibrator.load reads \["):
        calibrator_from_dict({**d, "class": "Nope"})
    with pytest.raises(CalibratorFileError, match="format_version 99 .*: upgrade tracecal"):
        calibrator_from_dict({**d, "format_version": 99})
    with pytest.raises(CalibratorFileError, match=r"missing key\(s\) \['coef'\]"):
        calibrator_from_dict({**d, "state": {k: v for k, v in d["state"].items() if k != "coef"}})
    with pytest.raises(CalibratorFileError, match="state.coef must be finite"):
        calibrator_from_dict(_with_state(d, coef=float("nan")))
    with pytest.raises(CalibratorFileError, match="bad params for PlattCalibrator: .*nonsense"):
        calibrator_from_dict({**d, "params": {"nonsense": 1}})
    with pytest.raises(CalibratorFileError, match="expected a JSON object"):
        calibrator_from_dict([1, 2])  # type: ignore[arg-type]
    assert issubclass(CalibratorFileError, ValueError)


@pytest.mark.parametrize(
    "name, state, match",
    [
        ("platt", {"constant": 5}, r"state.constant \(a probability\) must lie in \[0, 1\], got 5"),
        ("platt", {"scale": 0.0}, r"state.scale \(a standard deviation\) must lie in \(0, 1e\+12\], got 0.0"),
        ("platt", {"base_rate": -0.1}, r"state.base_rate \(a probability\) must lie in \[0, 1\]"),
        ("platt", {"n_fit": 0}, r"state.n_fit must lie in \[1, inf\]"),
        ("platt", {"intercept": "1.0"}, "state.intercept must be a number, got '1.0'"),
        ("temperature", {"temperature": -2.0}, r"state.temperature must lie in \[1e-06, 1e\+06\]"),
        ("isotonic", {"y_thresholds": [0.0, 0.5, 2.0]}, r"y_thresholds are probabilities in \[0, 1\]"),
        ("isotonic", {"x_thresholds": [0.0, 1.0]}, r"state.y_thresholds must have 2 entries"),
        ("isotonic", {"x_thresholds": [2.0, 1.0, 0.0]}, "must be non-decreasing"),
        ("isotonic", {"x_thresholds": [[0.0], [1.0], [2.0]]}, "must be a flat list of numbers"),
    ],
)
def test_invalid_state_values_refused(name, state, match, tmp_path):
    s, y = _overconfident(200, seed=9)
    d = make_calibrator(name).fit(s, y).to_dict()
    if name == "isotonic":  # three thresholds, so that the edits above are about values, not lengths
        d = _with_state(d, x_thresholds=[0.0, 0.5, 1.0], y_thresholds=[0.1, 0.5, 0.9])
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(_with_state(d, **state)))
    with pytest.raises(CalibratorFileError, match=match) as err:
        CALIBRATORS[name].load(p)
    assert str(err.value).startswith(f"{p}: invalid ") and "refit the calibrator" in str(err.value)


@pytest.mark.parametrize(
    "params, match",
    [
        ({"C": -1.0}, r"C must be a finite number > 0, got -1.0"),
        ({"max_iter": 1.5}, "max_iter must be a whole number ≥ 1, got 1.5"),
    ],
)
def test_invalid_params_refused_on_load(params, match):
    d = _platt_dict()
    with pytest.raises(CalibratorFileError, match=match):
        calibrator_from_dict({**d, "params": {**d["params"], **params}})


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


# sklearn's checks that need no 2-D data run as they are; the others (check_estimator skips the whole
# estimator: X is a 1-D array of scores, tagged one_d_array) are re-done below on 1-D scores.
API_CHECKS = [
    sk_checks.check_estimator_cloneable,
    sk_checks.check_estimator_repr,
    sk_checks.check_no_attributes_set_in_init,
    sk_checks.check_parameters_default_constructible,
    sk_checks.check_get_params_invariance,
    sk_checks.check_set_params,
    sk_checks.check_do_not_raise_errors_in_init_or_set_params,
    sk_checks.check_valid_tag_types,
    sk_checks.check_estimator_tags_renamed,
    sk_checks.check_mixin_order,
]


@pytest.mark.parametrize("check", API_CHECKS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("name", NAMES)
def test_sklearn_api_checks(name, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # check_set_params warns about validation in set_params
        check(type(make_calibrator(name)).__name__, make_calibrator(name))


@pytest.mark.parametrize("name", NAMES)
def test_sklearn_fit_conventions_on_1d_scores(name):
    """1-D versions of check_estimators_fit_returns_self, _overwrite_params, _dont_overwrite_parameters,
    check_fit_idempotent, check_estimators_unfitted and check_fit_check_is_fitted."""
    s, y = _overconfident(300, seed=10)
    cal = make_calibrator(name)
    with pytest.raises(NotFittedError):
        check_is_fitted(cal)
    params = deepcopy(cal.get_params())
    public_before = {k for k in vars(cal) if not k.startswith("_")}
    assert cal.fit(s, y) is cal
    check_is_fitted(cal)
    assert cal.get_params() == params  # fit does not touch the parameters
    added = {k for k in vars(cal) if not k.startswith("_")} - public_before
    assert all(k.endswith("_") for k in added), added
    first = cal.predict_proba(s)
    np.testing.assert_array_equal(cal.fit(s, y).predict_proba(s), first)  # idempotent
    with pytest.raises(ValueError, match=r"1-D array"):
        cal.predict_proba(s[:, None].repeat(2, axis=1))
    with pytest.raises(ValueError, match="requires y to be passed"):
        clone(cal).fit(s, None)


@pytest.mark.parametrize("name", NAMES)
def test_invalid_params_fail_at_fit_not_init(name):
    bad = {"platt": {"C": 0.0}, "isotonic": None, "temperature": {"eps": 0.7}}[name]
    if bad is None:
        pytest.skip("IsotonicCalibrator has no parameters")
    cal = make_calibrator(name, **bad)  # no error here (sklearn convention)
    with pytest.raises(ValueError, match=f"^{next(iter(bad))} must be a finite number"):
        cal.fit([0.1, 0.4, 0.6, 0.9], [0, 1, 0, 1])


def test_temperature_min_max_lives_in_its_class():
    """The protocol's map of a raw score into [0, 1] before temperature scaling: min-max of the calibration split."""
    cal, ev = np.array([2.0, 4.0, 6.0]), np.array([1.0, 3.0, 7.0])
    t_cal, t_ev = TemperatureCalibrator.min_max(cal, ev)
    np.testing.assert_array_equal(t_cal, [0.0, 0.5, 1.0])
    np.testing.assert_array_equal(t_ev, [0.0, 0.25, 1.0])
    np.testing.assert_array_equal(TemperatureCalibrator.min_max(np.full(3, 5.0))[0], np.zeros(3))  # span 1
    assert [x.tolist() for x in TemperatureCalibrator().prepare_scores(cal, ev)] == [t_cal.tolist(), t_ev.tolist()]
    for name in ("platt", "isotonic"):  # the others take the scores as they are
        np.testing.assert_array_equal(make_calibrator(name).prepare_scores(cal, ev)[1], ev)


@pytest.mark.parametrize(
    "state, match",
    [
        ({"mean": 1e308}, r"state.mean must lie in \[-1e\+12, 1e\+12\], got 1e\+308"),
        ({"scale": 1e300}, r"state.scale \(a standard deviation\) must lie in \(0, 1e\+12\], got 1e\+300"),
        ({"coef": -1e308}, r"state.coef must lie in \[-1e\+06, 1e\+06\], got -1e\+308"),
        ({"intercept": 1e7}, r"state.intercept must lie in \[-1e\+06, 1e\+06\], got 10000000.0"),
        ({"constant": 0.5}, r"state.constant is set, so state.mean, state.scale, state.coef, state.intercept must"),
    ],
)
def test_absurd_or_contradictory_platt_files_are_refused_naming_the_field(state, match, tmp_path):
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(_with_state(_platt_dict(), **state)))
    with pytest.raises(CalibratorFileError, match=match):
        PlattCalibrator.load(p)


def test_temperature_and_isotonic_files_with_absurd_values_are_refused(tmp_path):
    s, y = _overconfident(200, seed=9)
    for name, state, match in (
        ("temperature", {"temperature": 1e-300}, r"state.temperature must lie in \[1e-06, 1e\+06\]"),
        ("isotonic", {"x_thresholds": [0.0, 1e300]}, r"state.x_thresholds must lie in \[-1e\+12, 1e\+12\]"),
        ("isotonic", {"constant": 0.4}, r"state.constant is set, so state.x_thresholds, state.y_thresholds must"),
    ):
        d = make_calibrator(name).fit(s, y).to_dict()
        if name == "isotonic":
            d = _with_state(d, y_thresholds=[0.2, 0.8], **{"x_thresholds": [0.0, 1.0], **state})
        else:
            d = _with_state(d, **state)
        with pytest.raises(CalibratorFileError, match=match):
            calibrator_from_dict(d)


def test_platt_scores_absurd_inputs_without_overflow():
    cal = PlattCalibrator().fit([0.1, 0.4, 0.6, 0.9], [0, 1, 0, 1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an overflow warning fails the test
        p = cal.predict_proba([-1.7e308, 0.5, 1.7e308])
    assert np.all(np.isfinite(p)) and p[0] in (0.0, 1.0) and p[2] in (0.0, 1.0) and p[0] != p[2]
    with pytest.raises(ValueError, match=r"PlattCalibrator.fit: scores must lie in \[-1e\+12, 1e\+12\]"):
        PlattCalibrator().fit([0.1, 1e13], [0, 1])
