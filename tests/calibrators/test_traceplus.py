"""TRACE+ calibrator: features, fit/predict, sklearn conformance, JSON persistence and refusal of bad files."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.metrics import brier_score_loss as brier_of
from sklearn.utils.estimator_checks import parametrize_with_checks

import tracecal
from tracecal.calibrators import CalibratorFileError, TracePlus, load_calibrator
from tracecal.signals.features import feature_names
from tracecal.stats.metrics import SingleClassWarning
from tracecal.traces.trace import Trace, TraceBatch

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def synthetic(n: int = 400, seed: int = 0) -> tuple[TraceBatch, np.ndarray]:
    rng = np.random.default_rng(seed)
    lens = rng.integers(1, 40, n)
    hard = rng.random(n)
    hs = [rng.gamma(1.0, 0.3 + 2 * h, k) for h, k in zip(hard, lens, strict=True)]
    ss = [rng.gamma(1.0, 0.2 + 1.5 * h, k) for h, k in zip(hard, lens, strict=True)]
    y = (rng.random(n) > hard).astype(int)
    return TraceBatch.from_lists(ss, hs), y


def test_fit_predict_beats_base_rate() -> None:
    b, y = synthetic(600)
    cal_idx, ev_idx = np.arange(300), np.arange(300, 600)
    cal = tracecal.TracePlus().fit(b.select(cal_idx), y[cal_idx])
    p = cal.predict_proba(b.select(ev_idx))
    assert np.all((p > 0) & (p < 1))
    base = np.full(300, y[cal_idx].mean())
    assert brier_of(y[ev_idx], p) < brier_of(y[ev_idx], base)


def test_traces_and_feature_matrix_give_the_same_model() -> None:
    b, y = synthetic(200)
    on_traces = TracePlus().fit(b, y)
    on_matrix = TracePlus().fit(on_traces.features(b), y)
    assert on_matrix.feature_names_ == on_traces.feature_names_ == feature_names()
    np.testing.assert_allclose(on_matrix.predict_proba(b), on_traces.predict_proba(b), rtol=1e-12)
    traces = [Trace(text="a", token_ids=[1, 2], surprisal=[0.1, 0.5], entropy=[0.3, 0.2], id="q0")]
    assert on_traces.predict_proba(traces).shape == (1,)
    assert on_traces.predict_proba([]).shape == (0,)


def test_generic_feature_matrix_cannot_score_traces() -> None:
    b, y = synthetic(50)
    X = np.random.default_rng(0).normal(size=(50, 3))
    cal = TracePlus().fit(X, y)
    assert cal.feature_names_ == ["x0", "x1", "x2"] and cal.n_features_in_ == 3
    with pytest.raises(ValueError, match="fitted on a 3-column feature matrix, not on trace features"):
        cal.predict_proba(b)
    with pytest.raises(ValueError, match="X has 8 features, but TracePlus is expecting 3"):
        cal.predict_proba(np.zeros((2, 8)))


def test_parameters_changed_after_fit_are_caught() -> None:
    b, y = synthetic(50)
    cal = TracePlus().fit(b, y).set_params(lams=(3.0, 5.0))
    with pytest.raises(ValueError, match="parameters changed since fit"):
        cal.predict_proba(b)


# ------------------------------------------------------------------------------------------ sklearn conformance

XFAIL = "y must be correctness labels 0/1; this check fits with labels {1, 2}"


@parametrize_with_checks(
    [TracePlus()],
    expected_failed_checks=lambda est: {"check_estimators_dtypes": XFAIL, "check_fit2d_1feature": XFAIL},
)
def test_sklearn_estimator_checks(estimator, check) -> None:  # type: ignore[no-untyped-def]
    """scikit-learn's own checks, on X = a 2-D float feature matrix (TracePlus also accepts traces)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SingleClassWarning)
        check(estimator)


def test_clone_get_set_params_round_trip() -> None:
    cal = TracePlus(C=0.3, lams=(1.0, 3.0, 9.0), first_k=2, kernel="hyperbolic", seq_likelihood=True)
    params = cal.get_params(deep=True)
    assert params == cal.get_params(deep=False)
    assert params["lams"] == (1.0, 3.0, 9.0)  # stored as given, not converted
    twin = clone(cal)
    assert twin.get_params() == params and twin is not cal
    assert TracePlus().set_params(**params).get_params() == params
    assert not [k for k in vars(cal) if k.endswith("_")]
    b, y = synthetic(60)
    assert cal.fit(b, y) is cal
    assert {"coef_", "intercept_", "mean_", "scale_", "kept_", "feature_names_", "n_features_in_"} <= set(vars(cal))
    assert not [k for k in vars(clone(cal)) if k.endswith("_")]  # clone drops learned state
    # odd values do not raise in __init__ / set_params (sklearn convention); fit says what is wrong
    odd = TracePlus(C=-1, lams="2,4", first_k=0, kernel="gauss")
    with pytest.raises(ValueError, match=r"^C must be a finite number > 0, got -1$"):
        odd.fit(b, y)
    with pytest.raises(ValueError, match="lams must be a non-empty list of decay rates"):
        odd.set_params(C=1.0).fit(b, y)
    with pytest.raises(ValueError, match="first_k must be a whole number ≥ 1, got 0"):
        odd.set_params(lams=(2.0,)).fit(b, y)
    with pytest.raises(ValueError, match=r"kernel must be one of exp, hyperbolic, uniform, got 'gauss'"):
        odd.set_params(first_k=3).fit(b, y)


def test_not_fitted() -> None:
    b, _ = synthetic(5)
    with pytest.raises(NotFittedError, match="not fitted yet"):
        TracePlus().predict_proba(b)
    with pytest.raises(NotFittedError):
        TracePlus().save("never.json")


# ------------------------------------------------------------------------------------------ persistence


def test_save_load_identical(tmp_path: Path) -> None:
    b, y = synthetic()
    cal = tracecal.TracePlus(C=0.5, lams=(2.0, 4.0, 8.0)).fit(b, y)
    path = cal.save(tmp_path / "cal.json")
    d = json.loads(path.read_text())
    assert d["format"] == "tracecal.calibrator" and d["format_version"] == 2 and d["class"] == "TracePlus"
    assert set(d["versions"]) == {"tracecal", "numpy", "sklearn"} and d["versions"]["tracecal"] == tracecal.__version__
    for again in (tracecal.TracePlus.load(path), load_calibrator(path), tracecal.load_calibrator(path)):
        assert type(again) is TracePlus
        np.testing.assert_array_equal(cal.predict_proba(b), again.predict_proba(b))
        assert again.get_params() == cal.get_params()


def test_legacy_v1_file_still_loads() -> None:
    """A file written by TracePlus.save before the shared envelope (format "tracecal.TracePlus", version 1)."""
    path = FIXTURES / "traceplus_v1.json"
    old = json.loads(path.read_text())
    cal = TracePlus.load(path)
    assert cal.C == 0.5 and cal.lams == (2.0, 4.0) and cal.n_train_ == 60
    q = TraceBatch.from_lists(
        [[0.1, 0.2, 0.3], [1.5], [0.01, 0.02, 0.5, 0.9, 0.2]], [[0.5, 1.0, 0.2], [2.0], [0.1, 0.1, 0.4, 1.2, 0.3]]
    )
    expected = [0.9766859888057473, 0.10865377069553558, 0.989040376867891]  # the old code's predictions
    np.testing.assert_allclose(cal.predict_proba(q), expected, rtol=1e-12)
    z = (cal.features(q) - np.array(old["means"])) / np.array(old["sds"])
    np.testing.assert_allclose(cal.decision_function(q), z @ np.array(old["weights"]) + old["bias"], rtol=1e-12)
    # and re-saving writes the new envelope
    assert cal.to_dict()["class"] == "TracePlus"


def _write(tmp_path: Path, d: object) -> Path:
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(d))
    return p


def _state(d: dict, **kw: object) -> dict:
    return {**d, "state": {**d["state"], **kw}}


BAD_FILES = [
    (lambda d: _state(d, constant=5), r"state.constant \(a probability\) must lie in \[0, 1\], got 5"),
    (lambda d: _state(d, weights=[1.0] * 7 + ["x"]), "state.weights must be a flat list of numbers"),
    (lambda d: _state(d, weights=[1.0] * 3), "state.weights has 3 entries for 8 kept features"),
    (lambda d: _state(d, means=[0.0] * 7 + [float("inf")]), r"state.means must hold finite numbers"),
    (lambda d: _state(d, sds=[1.0] * 7 + [0.0]), "state.sds are standard deviations: each must be > 0, got 0"),
    (lambda d: _state(d, sds=[1.0] * 5), r"state.sds must have 8 entries \(one per feature\), got 5"),
    (lambda d: _state(d, kept=[1] * 8), "state.kept must be a flat list of true/false values"),
    (lambda d: _state(d, bias=float("nan")), "state.bias must be finite"),
    (lambda d: _state(d, feature_names=["a"] * 8), "state.feature_names .* do not match the params"),
    (lambda d: _state(d, base_rate=1.5), r"state.base_rate must lie in \[0, 1\]"),
    (lambda d: {**d, "state": {k: v for k, v in d["state"].items() if k != "bias"}}, r"missing key\(s\) \['bias'\]"),
    (lambda d: {**d, "params": {**d["params"], "kernel": "gauss"}}, "bad params for TracePlus: kernel must be one of"),
    (lambda d: {**d, "params": {**d["params"], "bogus": 1}}, "bad params for TracePlus: .*bogus"),
    (
        lambda d: {**d, "params": {**d["params"], "C": 0}},
        r"bad params for TracePlus: C must be a finite number > 0, got 0",
    ),
    (lambda d: {**d, "format_version": 99}, "unsupported calibrator format_version 99 .*: upgrade tracecal"),
    (lambda d: {**d, "format": "sklearn"}, "not a calibrator file"),
    (lambda d: {**d, "class": "os.system"}, r"holds a 'os.system' calibrator; TracePlus.load reads \['TracePlus'\]"),
    (lambda d: [d], "expected a JSON object"),
]


@pytest.mark.parametrize("mutate, match", BAD_FILES)
def test_bad_calibrator_file_refused(tmp_path: Path, mutate, match: str) -> None:  # type: ignore[no-untyped-def]
    b, y = synthetic(100)
    p = _write(tmp_path, mutate(TracePlus().fit(b, y).to_dict()))
    with pytest.raises(CalibratorFileError, match=match) as err:
        TracePlus.load(p)
    assert str(err.value).startswith(str(p))  # the message names the file
    assert isinstance(err.value, ValueError)


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda d: d.update(version=99), "unsupported TRACE\\+ calibrator version 99"),
        (lambda d: d.update(constant=5), r"state.constant \(a probability\) must lie in \[0, 1\], got 5"),
        (lambda d: d["params"].update(kernel="gauss"), "kernel must be one of exp, hyperbolic, uniform"),
        (lambda d: d["means"].__setitem__(0, float("nan")), "state.means must hold finite numbers"),
    ],
)
def test_bad_legacy_file_refused(tmp_path: Path, mutate, match: str) -> None:  # type: ignore[no-untyped-def]
    d = json.loads((FIXTURES / "traceplus_v1.json").read_text())
    mutate(d)
    with pytest.raises(CalibratorFileError, match=match):
        TracePlus.load(_write(tmp_path, d))


def test_constant_five_no_longer_predicts_five(tmp_path: Path) -> None:
    """The bug this guards against: {"constant": 5} used to load and predict 5.0."""
    b, y = synthetic(30)
    d = json.loads((FIXTURES / "traceplus_v1.json").read_text())
    d.update(constant=5, weights=[], kept=[False] * 8)
    with pytest.raises(CalibratorFileError, match="must lie in"):
        TracePlus.load(_write(tmp_path, d))


def test_non_json_and_nested_files_refused(tmp_path: Path) -> None:
    p = tmp_path / "bad.json"
    p.write_bytes(b"\x80\x04\x95pickle")
    with pytest.raises(CalibratorFileError, match=r"calibrator file .*bad.json: not UTF-8 text \(byte 0"):
        tracecal.TracePlus.load(p)
    p.write_text("{not json")
    with pytest.raises(CalibratorFileError, match=r"calibrator file .*bad.json: not JSON at line 1 column 2"):
        tracecal.TracePlus.load(p)
    p.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(CalibratorFileError, match="bad.json: not JSON tracecal reads: nested too deeply"):
        tracecal.TracePlus.load(p)
    p.write_text(json.dumps({"format": "tracecal.calibrator", "state": [[[[[[[[[[1]]]]]]]]]]}))
    with pytest.raises(CalibratorFileError, match="nested too deeply"):
        tracecal.TracePlus.load(p)
    with pytest.raises(FileNotFoundError):
        tracecal.TracePlus.load(tmp_path / "missing.json")


def test_single_class_falls_back_with_warning(tmp_path: Path) -> None:
    b, _ = synthetic(50)
    with pytest.warns(SingleClassWarning, match="single class"):
        cal = tracecal.TracePlus().fit(b, np.ones(50, int))
    np.testing.assert_allclose(cal.predict_proba(b), 1.0)
    again = TracePlus.load(cal.save(tmp_path / "c.json"))
    np.testing.assert_array_equal(again.predict_proba(b), 1.0)


def test_zero_token_answers_nan_and_left_out() -> None:
    b = TraceBatch.from_lists([[0.1, 0.2], [], [1.0, 2.0, 0.5], [0.3]], [[0.5, 0.4], [], [2.0, 1.0, 3.0], [0.1]])
    with pytest.warns(UserWarning, match="non-finite"):
        cal = tracecal.TracePlus().fit(b, np.array([1, 0, 0, 1]))
    p = cal.predict_proba(b)
    assert np.isnan(p[1]) and np.all(np.isfinite(p[[0, 2, 3]]))
    empty = TraceBatch.from_lists([[], []], [[], []])
    with pytest.raises(ValueError, match="every answer has zero tokens"), pytest.warns(UserWarning):
        TracePlus().fit(empty, [0, 1])


def test_bad_labels() -> None:
    b, _ = synthetic(5)
    with pytest.raises(ValueError, match="0 \\(incorrect\\) or 1"):
        tracecal.TracePlus().fit(b, np.array([0, 1, 2, 0, 1]))
    with pytest.raises(ValueError, match="shape"):
        tracecal.TracePlus().fit(b, np.array([0, 1]))
    with pytest.raises(ValueError, match="requires y to be passed"):
        tracecal.TracePlus().fit(b, None)


def test_negative_surprisal_refused_at_predict() -> None:
    b, y = synthetic(40)
    cal = TracePlus().fit(b, y)
    bad = [
        Trace(text="ok", token_ids=[1], surprisal=[0.2], entropy=[0.1], id="good"),
        Trace(text="no", token_ids=[1, 2], surprisal=[0.2, -1.5], entropy=[0.1, 0.3], id="q17"),
    ]
    with pytest.raises(ValueError, match=r"answer 1 \(id 'q17'\): surprisal of token 1 is -1.5; .*log-probabilities"):
        cal.predict_proba(bad)
    with pytest.raises(ValueError, match="answer 0: entropy of token 0 is nan"):
        cal.predict_proba(TraceBatch(np.array([0.1]), np.array([np.nan]), np.array([0, 1])))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10, 10) | st.floats(allow_nan=True) | st.text(max_size=5),
    lambda kids: st.lists(kids, max_size=9) | st.dictionaries(st.text(max_size=5), kids, max_size=3),
    max_leaves=12,
)
_FITTED = TracePlus().fit(*synthetic(80, seed=3))
_QUERY = synthetic(20, seed=4)[0]


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["params", "state"]), st.data(), json_values)
def test_any_edited_value_is_refused_or_harmless(section: str, data: st.DataObject, value: object) -> None:
    """Replace one params / state value of a saved TracePlus with arbitrary JSON: loading either raises
    CalibratorFileError, or gives a calibrator whose predictions are probabilities (or NaN)."""
    d = json.loads(json.dumps(_FITTED.to_dict()))
    key = data.draw(st.sampled_from(sorted(d[section])))
    d[section][key] = value
    try:
        cal = TracePlus.from_dict(d)
    except CalibratorFileError:
        return
    try:
        p = cal.predict_proba(_QUERY)
    except ValueError as e:  # e.g. changed lams: the message says to refit
        assert "refit" in str(e) or "features" in str(e)
        return
    assert np.all(np.isnan(p) | ((p >= 0) & (p <= 1)))
