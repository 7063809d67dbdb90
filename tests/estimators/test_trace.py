"""The TRACE family: TRACE is trace_confidence; each TRACE+ estimator is its calibrator fitted on the answers
(one generic wrapper, `FittedModelEstimator`), self-calibrated."""

from __future__ import annotations

import numpy as np
import pytest

from tracecal.calibrators.traceplus import TracePlus
from tracecal.calibrators.traceplus_prior import TracePlusPrior
from tracecal.estimators import REGISTRY, FittedModelEstimator, Inputs, get_estimator
from tracecal.signals.operators import trace_confidence
from tracecal.traces.trace import TraceBatch


def _data(n: int = 120) -> tuple[Inputs, np.ndarray]:
    rng = np.random.default_rng(5)
    y = (rng.random(n) < 0.5).astype(np.int64)
    lens = rng.integers(1, 9, n)
    S = [rng.gamma(1.0, 0.4 if y[i] else 1.0, lens[i]) for i in range(n)]
    H = [rng.gamma(1.0, 0.6 if y[i] else 1.4, lens[i]) for i in range(n)]
    return Inputs(TraceBatch.from_lists(S, H)), y


def test_trace_is_trace_confidence() -> None:
    x, _ = _data()
    np.testing.assert_array_equal(get_estimator("trace").score(x), trace_confidence(x.batch))


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("trace_plus", TracePlus()),
        ("trace_plus_seqlik", TracePlus(seq_likelihood=True)),
        ("trace_plus_prior", TracePlusPrior()),
    ],
)
def test_a_fitted_estimator_is_its_calibrator(name: str, model: object) -> None:
    x, y = _data()
    est = get_estimator(name).fit(x, y)
    assert isinstance(est, FittedModelEstimator) and REGISTRY[name].self_calibrated and REGISTRY[name].needs_fit
    expected = model.fit(x.batch, y).predict_proba(x.batch)  # type: ignore[attr-defined]  # a calibrator
    np.testing.assert_allclose(est.score(x), expected, rtol=0, atol=0)
    assert "model_" not in est.get_params()


def test_the_family_and_parameters() -> None:
    assert [n for n, c in REGISTRY.items() if c.family == "TRACE"] == [
        "trace",
        "trace_plus",
        "trace_plus_seqlik",
        "trace_plus_prior",
        "trace_plus_prior_mono",
        "trace_plus_cv",
    ]
    assert get_estimator("trace_plus_prior_mono").get_params() == {"monotone": True}
    assert get_estimator("trace_plus_cv").get_params() == {}
