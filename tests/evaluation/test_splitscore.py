"""The protocol's inner loop over all splits at once (`tracecal.evaluation.splitscore`): Platt by Newton on every split
(`PlattCalibrator`'s own fit) against scikit-learn's L-BFGS, the calibrators split by split, fits on a feature
matrix computed once, lazy row selections and the Learn-then-Test threshold from prefixes."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.special import expit
from sklearn.linear_model import LogisticRegression

from tracecal.calibrators import make_calibrator
from tracecal.estimators import REGISTRY, Inputs, get_estimator
from tracecal.evaluation.protocol import TaskStats
from tracecal.evaluation.splitscore import Fits, RowsOf, calibrate_rows, ltt_descending, platt_rows, sanitize
from tracecal.stats.metrics import SingleClassWarning
from tracecal.stats.selective import ltt_threshold
from tracecal.traces.trace import TraceBatch


def _objective(a: float, w: float, z: np.ndarray, y: np.ndarray) -> float:
    eta = a + w * z
    return float(np.sum(np.logaddexp(0.0, eta) - y * eta) + 0.5e-6 * w * w)


def test_platt_by_newton_is_platt_scaling_at_its_optimum() -> None:
    """200 random problems (scales 0.01–100, offsets, rounded scores): the model of scikit-learn's
    ``LogisticRegression(C=1e6)`` on the standardised score (what `PlattCalibrator` fitted with before), an
    objective never worse than its L-BFGS, probabilities close to its (measured here: median 2e-5, max 1.5e-2 — on
    a nearly separable problem, where L-BFGS stops at its gradient tolerance 1e-4 with slope 13.4 for the optimum's
    14.2, or 16.9 for 40.8)."""
    rng = np.random.default_rng(0)
    gaps = []
    for trial in range(200):
        n = int(rng.integers(20, 3000))
        y = (rng.random(n) < rng.uniform(0.05, 0.9)).astype(np.int64)
        if y.min() == y.max():
            continue
        s = rng.normal(size=n) * rng.uniform(0.01, 100) + y * rng.uniform(-2, 3) + rng.uniform(-50, 50)
        s = np.round(s, 0) if trial % 3 == 0 else s
        mean, scale, a, w, constant = (x[0] for x in platt_rows(s[None], y[None]))
        assert (mean, scale) == (s.mean(), s.std() or 1.0) and np.isnan(constant)
        z = (s - mean) / scale
        ref = LogisticRegression(C=1e6, max_iter=1000).fit(z[:, None], y)
        assert _objective(a, w, z, y) <= _objective(ref.intercept_[0], ref.coef_[0, 0], z, y) + 1e-9
        gaps.append(np.abs(expit(a + w * z) - ref.predict_proba(z[:, None])[:, 1]).max())
    assert max(gaps) < 0.05 and np.median(gaps) < 1e-4


@pytest.mark.parametrize("gap", [0.5, 4.0, 30.0])
def test_protocol_platt_equals_platt_calibrator_split_by_split(gap: float) -> None:
    """The protocol's calibration of every split (`calibrate_rows`) and `PlattCalibrator` fitted on each split are
    one fit: the same probabilities bit for bit — random, nearly separable and separable splits, rounded scores
    (ties) and a single-class split."""
    rng = np.random.default_rng(int(gap * 10))
    y = (rng.random((6, 300)) < 0.4).astype(np.int64)
    s = rng.normal(size=(6, 300)) * 7.0 + gap * y - 3.0
    s[1], y[2] = np.round(s[1]), 0
    p = calibrate_rows("trace", "platt", s[:, :200], y[:, :200], s[:, 200:])
    for r in range(6):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SingleClassWarning)
            cal = make_calibrator("platt").fit(s[r, :200], y[r, :200])
        np.testing.assert_array_equal(p[r], cal.predict_proba(s[r, 200:]))


def test_platt_rows_are_independent_and_degenerate_rows_are_handled() -> None:
    rng = np.random.default_rng(1)
    s, y = rng.normal(size=(4, 60)), (rng.random((4, 60)) < 0.5).astype(np.int64)
    y[1] = 1  # a single class: its base rate
    s[2] = 3.0  # a constant score: scale 1, the base rate again (no slope to fit)
    together = platt_rows(s, y)
    for r in range(4):  # a row alone gives the same bits: its Newton iterates ignore the other rows
        alone = platt_rows(s[r : r + 1], y[r : r + 1])
        np.testing.assert_array_equal([x[r] for x in together], [x[0] for x in alone])
    mean, scale, a, w, constant = together
    assert constant[1] == 1.0 and np.isnan(constant[[0, 2, 3]]).all() and scale[2] == 1.0
    p = calibrate_rows("trace", "platt", s, y, s)
    assert (p[1] == 1.0).all() and np.allclose(p[2], y[2].mean(), atol=1e-9)


@pytest.mark.parametrize("calibrator", ["isotonic", "temperature"])
def test_other_calibrators_are_fitted_split_by_split(calibrator: str) -> None:
    rng = np.random.default_rng(2)
    s, y = rng.random((3, 80)), (rng.random((3, 80)) < 0.4).astype(np.int64)
    p = calibrate_rows("trace", calibrator, s[:, :50], y[:, :50], s[:, 50:])
    for r in range(3):
        c = make_calibrator(calibrator)
        cal_s, ev_s = c.prepare_scores(s[r, :50], s[r, 50:])
        np.testing.assert_array_equal(p[r], c.fit(cal_s, y[r, :50]).predict_proba(ev_s))
    assert REGISTRY["trace_plus"].self_calibrated
    np.testing.assert_array_equal(calibrate_rows("trace_plus", "platt", s, y, s * 2 - 0.5), np.clip(s * 2 - 0.5, 0, 1))


def _task(n: int = 300) -> TaskStats:
    rng = np.random.default_rng(5)
    y = (rng.random(n) < 0.45).astype(np.int64)
    lengths = rng.integers(0, 12, n)  # zero-token answers included
    S = [rng.gamma(1.0, 0.5 + 0.5 * (1 - y[i]), k) for i, k in enumerate(lengths)]
    H = [rng.gamma(1.0, 0.8 + 0.8 * (1 - y[i]), k) for i, k in enumerate(lengths)]
    beam = np.sort(-rng.exponential(1.0, (n, 5)), axis=1)[:, ::-1]
    batch = TraceBatch.from_lists(S, H)
    tok = rng.random(int(batch.offsets[-1]))
    inputs = Inputs(batch, None, {"beam": beam, "tokensar_rel": tok})
    return TaskStats("t", [str(i) for i in range(n)], y, inputs, "synthetic")


@pytest.mark.parametrize("name", ["trace_plus", "trace_plus_seqlik", "beam_ratio"])
def test_fits_equal_the_estimators_own_fit_and_score(name: str) -> None:
    """TRACE+ fitted on rows of its feature matrix (computed once) and beam_ratio on lazily selected inputs give the
    estimator's own numbers on the selected inputs, bit for bit."""
    data = _task()
    rows, other = np.arange(0, 300, 2), np.arange(1, 300, 2)
    fits = Fits(name, data)
    assert (fits.matrix is not None) == name.startswith("trace_plus")
    mine = fits.score(fits.fit(rows), other)
    ref = get_estimator(name).fit(data.inputs.select(rows), data.y[rows])
    np.testing.assert_array_equal(mine, sanitize(ref.score(data.inputs.select(other)))[0])


def test_rows_of_selects_like_inputs_select_when_read() -> None:
    data = _task()
    rows = np.array([5, 0, 17, 3, 299])
    lazy, eager = RowsOf(data.inputs, rows), data.inputs.select(rows)
    assert "batch" not in vars(lazy)  # nothing selected before it is read
    np.testing.assert_array_equal(lazy.stat("beam"), eager.stat("beam"))
    np.testing.assert_array_equal(lazy.stats["tokensar_rel"], eager.stats["tokensar_rel"])
    np.testing.assert_array_equal(lazy.batch.entropy, eager.batch.entropy)
    assert sorted(lazy.stats) == sorted(eager.stats) and lazy.p_true is None


def test_ltt_from_prefixes_equals_the_full_sequence() -> None:
    rng = np.random.default_rng(6)
    grew = 0
    for trial in range(120):
        n = int(rng.integers(1, 30000))
        y = (rng.random(n) < rng.uniform(0.5, 1.0)).astype(np.int64)
        c = rng.normal(size=n) + rng.uniform(0, 4) * y
        c = np.round(c, trial % 3) if trial % 2 else c
        order = np.argsort(-c, kind="stable")
        alpha, delta = rng.uniform(0.02, 0.3), rng.uniform(0.02, 0.3)
        want = ltt_threshold(c[order], y[order], alpha, delta)
        assert ltt_descending(c[order], y[order], alpha, delta) == want.threshold
        grew += want.n_answered > 2048  # the sequence ran past the first prefixes
    assert grew > 20


def test_a_calibration_split_of_one_answer_certifies_nothing_instead_of_failing() -> None:
    """`tracecal evaluate --limit 4` leaves one calibration answer: no answer to hold out for the threshold of a
    fitted estimator, so nothing is certified (threshold +inf), as Learn-then-Test says of so few answers."""
    import math

    from tracecal.evaluation.protocol import ScoreConfig
    from tracecal.evaluation.splitscore import selective_threshold

    cfg = ScoreConfig(estimators=["trace_plus"], sel_holdout=0.5)
    t, est = selective_threshold("trace_plus", None, np.array([0]), cfg, np.zeros(1), fitted="model")
    assert math.isinf(t) and est == "model"
