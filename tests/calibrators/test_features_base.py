"""The shared base of the trace-feature calibrators (`tracecal.calibrators.features_base`)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from tracecal.calibrators import TracePlus, TracePlusCV, TracePlusPrior
from tracecal.calibrators.features_base import (
    SD_EPS,
    LinearTraceCalibrator,
    TraceFeatureCalibrator,
    finite_fit_rows,
    fit_labels,
    is_traces,
    logit,
    penalty_json,
)
from tracecal.stats.metrics import SingleClassWarning
from tracecal.traces.trace import Trace, TraceBatch

CLASSES = [TracePlus, TracePlusPrior, TracePlusCV]


def _traces(n: int = 120, seed: int = 0) -> tuple[TraceBatch, np.ndarray]:
    rng = np.random.default_rng(seed)
    hard = rng.random(n)
    lens = rng.integers(1, 20, n)
    H = [rng.gamma(1.0, 0.3 + 2 * h, k) for h, k in zip(hard, lens, strict=True)]
    S = [rng.gamma(1.0, 0.2 + h, k) for h, k in zip(hard, lens, strict=True)]
    return TraceBatch.from_lists(S, H), (rng.random(n) > hard).astype(int)


def test_the_three_share_one_base() -> None:
    assert all(issubclass(c, TraceFeatureCalibrator) for c in CLASSES)
    assert issubclass(TracePlus, LinearTraceCalibrator) and issubclass(TracePlusPrior, LinearTraceCalibrator)


def test_is_traces() -> None:
    b, _ = _traces(3)
    assert is_traces(b) and is_traces([]) and is_traces(())
    assert is_traces([Trace(text="a", token_ids=[1], surprisal=[0.1], entropy=[0.2])])
    assert not is_traces(np.zeros((2, 3))) and not is_traces([[0.1, 0.2]])


def test_labels_rows_and_logit() -> None:
    assert fit_labels([0, 1, 1], 3, "X").dtype == np.int64
    with pytest.raises(ValueError, match="X requires y to be passed"):
        fit_labels(None, 3, "X")
    with pytest.raises(ValueError, match=r"shape \(3,\)"):
        fit_labels([0, 1], 3, "X")
    with pytest.raises(ValueError, match=r"0 \(incorrect\) or 1"):
        fit_labels([0, 2, 1], 3, "X")
    M = np.array([[1.0, 2.0], [np.nan, 1.0], [3.0, 4.0]])
    with pytest.warns(UserWarning, match=r"X.fit: 1 of 3 answers have non-finite features"):
        M2, y2 = finite_fit_rows(M, np.array([0, 1, 1]), "X")
    np.testing.assert_array_equal(y2, [0, 1])
    np.testing.assert_array_equal(M2, M[[0, 2]])
    with pytest.raises(ValueError, match="every answer has zero tokens"), pytest.warns(UserWarning):
        finite_fit_rows(np.full((2, 1), np.nan), np.array([0, 1]), "X")
    assert logit(0.5) == 0.0 and logit(1.0) == math.inf and logit(0.0) == -math.inf
    assert penalty_json(math.inf) == "inf" and penalty_json(3) == 3.0


@pytest.mark.parametrize("cls", CLASSES)
def test_standardisation_keeps_the_columns_that_vary(cls: type) -> None:
    """scale_ = sd where sd > SD_EPS (kept), else 1 (dropped): the same rule for every class."""
    b, y = _traces()
    M = cls().matrix(b)
    M[:, 1] = 0.25  # a constant column
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cal = cls().fit(M, y)
    sd = M.std(axis=0)
    np.testing.assert_array_equal(cal.kept_, sd > SD_EPS)
    np.testing.assert_array_equal(cal.scale_, np.where(sd > SD_EPS, sd, 1.0))
    np.testing.assert_array_equal(cal.mean_, M.mean(axis=0))
    assert not cal.kept_[1] and cal.feature_names_ == cls().trace_feature_names()


@pytest.mark.parametrize("cls", CLASSES)
def test_traces_or_matrix_dispatch(cls: type) -> None:
    b, y = _traces()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        on_traces = cls().fit(b, y)
        on_matrix = cls().fit(cls().matrix(b), y)
    np.testing.assert_allclose(on_traces.predict_proba(b), on_matrix.predict_proba(b), rtol=1e-12)
    assert on_traces.n_features_in_ == len(on_traces.trace_feature_names())
    assert on_traces.predict_proba([]).shape == (0,)
    with pytest.raises(ValueError, match="got no answers"):
        cls().fit([], np.zeros(0, int))


@pytest.mark.parametrize("cls", CLASSES)
def test_one_single_class_warning(cls: type) -> None:
    b, _ = _traces(40)
    with pytest.warns(SingleClassWarning, match=rf"^{cls.__name__}.fit: the calibration labels have a single class"):
        cal = cls().fit(b, np.zeros(40, int))
    assert cal.constant_ == 0.0 and np.all(cal.predict_proba(b) == 0.0)


@pytest.mark.parametrize("cls", CLASSES)
def test_list_parameters_come_back_as_tuples(cls: type) -> None:
    params = {"lams": [1.0, 2.0], "penalties": [1.0, "inf"], "statistics": ["trace"]}
    back = cls._params_from_json(dict(params))
    for key in cls._TUPLE_PARAMS:
        assert isinstance(back[key], tuple)
    if "penalties" in cls._TUPLE_PARAMS:
        assert back["penalties"] == (1.0, math.inf)


def _saved(cls: type, single_class: bool = False) -> dict:
    b, y = _traces(60)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cls().fit(b, np.zeros(60, int) if single_class else y).to_dict()


@pytest.mark.parametrize("cls", CLASSES)
@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("means", 1e308, r"state.means must lie in \[-1e\+06, 1e\+06\], got state.means\[0\] = 1e\+308"),
        ("sds", 1e300, r"state.sds must lie in \[-1e\+06, 1e\+06\], got state.sds\[0\] = 1e\+300"),
        ("sds", 1e-300, r"state.sds\[0\] = 1e-300: a kept column has sd > 1e-12"),
    ],
)
def test_absurd_standardisation_is_refused_naming_the_field(cls: type, key: str, value: float, match: str) -> None:
    from tracecal.calibrators.base import CalibratorFileError

    d = _saved(cls)
    assert d["state"]["kept"][0]
    d["state"][key] = [value, *d["state"][key][1:]]
    with pytest.raises(CalibratorFileError, match=match):
        cls.from_dict(d)


@pytest.mark.parametrize("cls", [TracePlus, TracePlusPrior])
def test_absurd_weights_are_refused(cls: type) -> None:
    from tracecal.calibrators.base import CalibratorFileError

    d = _saved(cls)
    d["state"]["weights"] = [1e308, *d["state"]["weights"][1:]]
    with pytest.raises(CalibratorFileError, match=r"state.weights must lie in \[-1e\+06, 1e\+06\]"):
        cls.from_dict(d)
    d = _saved(cls)
    d["state"]["bias"] = -1e308
    with pytest.raises(CalibratorFileError, match=r"state.bias must lie in \[-1e\+06, 1e\+06\], got -1e\+308"):
        cls.from_dict(d)


@pytest.mark.parametrize("cls", [TracePlus, TracePlusPrior])
def test_a_constant_with_weights_is_refused(cls: type) -> None:
    """A constant calibrator predicts its base rate and ignores weights: a file with both is a forgery."""
    from tracecal.calibrators.base import CalibratorFileError

    d = _saved(cls)
    n = sum(d["state"]["kept"])
    cls.from_dict(_saved(cls, single_class=True))  # a real constant calibrator loads
    d["state"]["constant"] = 0.5
    d["state"]["weights"] = [1.0] * n
    with pytest.raises(CalibratorFileError, match=r"state.constant is set, so the weights \(coef_\) must all be 0"):
        cls.from_dict(d)


@pytest.mark.parametrize("cls", CLASSES)
def test_scoring_absurd_input_is_refused_or_finite_never_an_overflow(cls: type) -> None:
    b, y = _traces(60)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cal = cls().fit(b, y)
    huge = [Trace(text="x", token_ids=[1, 2], surprisal=[0.1, 1e308], entropy=[1e308, 0.2], id="h")]
    with pytest.raises(ValueError, match=r"answer 0 \(id 'h'\): .* is 1e\+308; .* must be ≤ 10000 nats"):
        cal.predict_proba(huge)
    M = cal.matrix(b)[:3]
    M[0, :] = 1e308
    M[1, :] = -1e308
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an overflow warning fails the test
        p = cal.predict_proba(M)
    assert np.all((p >= 0) & (p <= 1))
