"""TRACE+ calibrator: features, fit/predict, JSON persistence and refusal of corrupt files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import brier_score_loss as brier_of

import tracecal
from tracecal.features import feature_names, trace_plus_features
from tracecal.trace import TraceBatch
from tracecal.traceplus import CalibratorFileError


def synthetic(n: int = 400, seed: int = 0) -> tuple[TraceBatch, np.ndarray]:
    rng = np.random.default_rng(seed)
    lens = rng.integers(1, 40, n)
    hard = rng.random(n)
    hs = [rng.gamma(1.0, 0.3 + 2 * h, k) for h, k in zip(hard, lens, strict=True)]
    ss = [rng.gamma(1.0, 0.2 + 1.5 * h, k) for h, k in zip(hard, lens, strict=True)]
    y = (rng.random(n) > hard).astype(int)
    return TraceBatch.from_lists(ss, hs), y


def test_features_shape_and_names() -> None:
    b, _ = synthetic(10)
    X = trace_plus_features(b)
    assert X.shape == (10, 8) and len(feature_names()) == 8
    X2 = trace_plus_features(b, seq_likelihood=True)
    assert X2.shape == (10, 11) and feature_names(seq_likelihood=True)[-1] == "low_prob_rate"
    # hand check of feature 1-3 on one trace: H = (1, 2, 3, 4)
    one = TraceBatch.from_lists([[0.1, 0.2, 0.3, 0.4]], [[1.0, 2.0, 3.0, 4.0]])
    f = trace_plus_features(one)[0]
    assert f[0] == pytest.approx(np.exp(-2.0)) and f[1] == pytest.approx(np.exp(-2.5))
    assert f[2] == pytest.approx(np.log(4)) and f[3] == pytest.approx(1.0)


def test_fit_predict_beats_base_rate() -> None:
    b, y = synthetic(600)
    cal_idx, ev_idx = np.arange(300), np.arange(300, 600)
    cal = tracecal.TracePlus().fit(b.select(cal_idx), y[cal_idx])
    p = cal.predict_proba(b.select(ev_idx))
    assert np.all((p > 0) & (p < 1))
    base = np.full(300, y[cal_idx].mean())
    assert brier_of(y[ev_idx], p) < brier_of(y[ev_idx], base)


def test_save_load_identical(tmp_path: Path) -> None:
    b, y = synthetic()
    cal = tracecal.TracePlus(C=0.5).fit(b, y)
    cal.save(tmp_path / "cal.json")
    again = tracecal.TracePlus.load(tmp_path / "cal.json")
    np.testing.assert_array_equal(cal.predict_proba(b), again.predict_proba(b))
    assert again.C == 0.5


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda d: d.update(version=99), "unsupported calibrator version"),
        (lambda d: d.pop("weights"), "missing keys"),
        (lambda d: d.update(format="sklearn"), "not a TRACE\\+ calibrator"),
        (lambda d: d["means"].__setitem__(0, float("nan")), "NaN"),
        (lambda d: d.update(weights=[1.0]), "weights"),
        (lambda d: d["params"].update(bogus=1), "bad params"),
    ],
)
def test_corrupt_calibrator_refused(tmp_path: Path, mutate, match: str) -> None:  # type: ignore[no-untyped-def]
    b, y = synthetic(100)
    d = tracecal.TracePlus().fit(b, y).to_dict()
    mutate(d)
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(d))
    with pytest.raises(CalibratorFileError, match=match):
        tracecal.TracePlus.load(p)


def test_non_json_calibrator_refused(tmp_path: Path) -> None:
    p = tmp_path / "bad.json"
    p.write_bytes(b"\x80\x04\x95pickle")
    with pytest.raises(CalibratorFileError):
        tracecal.TracePlus.load(p)
    p.write_text("{not json")
    with pytest.raises(CalibratorFileError, match="not valid JSON"):
        tracecal.TracePlus.load(p)


def test_single_class_falls_back_with_warning() -> None:
    b, _ = synthetic(50)
    with pytest.warns(UserWarning, match="single class"):
        cal = tracecal.TracePlus().fit(b, np.ones(50, int))
    np.testing.assert_allclose(cal.predict_proba(b), 1.0)


def test_zero_token_answers_nan_and_left_out() -> None:
    b = TraceBatch.from_lists([[0.1, 0.2], [], [1.0, 2.0, 0.5], [0.3]], [[0.5, 0.4], [], [2.0, 1.0, 3.0], [0.1]])
    with pytest.warns(UserWarning, match="non-finite"):
        cal = tracecal.TracePlus().fit(b, np.array([1, 0, 0, 1]))
    p = cal.predict_proba(b)
    assert np.isnan(p[1]) and np.all(np.isfinite(p[[0, 2, 3]]))


def test_bad_labels() -> None:
    b, _ = synthetic(5)
    with pytest.raises(ValueError, match="0 \\(incorrect\\) or 1"):
        tracecal.TracePlus().fit(b, np.array([0, 1, 2, 0, 1]))
    with pytest.raises(ValueError, match="shape"):
        tracecal.TracePlus().fit(b, np.array([0, 1]))
    with pytest.raises(RuntimeError, match="not fitted"):
        tracecal.TracePlus().predict_proba(b)
