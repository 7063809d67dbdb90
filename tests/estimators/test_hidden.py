"""`tracecal.estimators.hidden`: the probes read the hidden pass's stats (and TRACE+'s features), opt-in."""

from __future__ import annotations

import numpy as np

from tracecal.estimators import REGISTRY, default_estimators, get_estimator, needs_of, resolve_estimators
from tracecal.estimators.base import Inputs
from tracecal.estimators.hidden import HiddenProbeEstimator, probe_features
from tracecal.traces.trace import TraceBatch


def inputs(n: int = 200, seed: int = 0) -> tuple[Inputs, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.5).astype(float)
    mean = rng.normal(size=(n, 30)) + y[:, None] * 0.8
    first = rng.normal(size=(n, 30))
    lengths = rng.integers(1, 6, size=n)
    lengths[0] = 0
    s = [list(rng.random(k) * (2 - yi)) for k, yi in zip(lengths, y, strict=True)]
    h = [list(rng.random(k)) for k in lengths]
    return Inputs(TraceBatch.from_lists(s, h), hidden_mean=mean, hidden_first=first), y


def test_registered_opt_in_and_reading_the_hidden_pass() -> None:
    for name in ("hidden_probe", "hidden_probe_trace_plus"):
        assert name in REGISTRY and name not in default_estimators()
        assert "hidden" in needs_of([name])
    assert set(resolve_estimators("hidden")) == {"hidden_probe", "hidden_probe_trace_plus"}


def test_the_probes_fit_on_the_calibration_answers() -> None:
    x, y = inputs()
    assert probe_features(x, False).shape == (200, 60) and probe_features(x, True).shape == (200, 68)
    for name in ("hidden_probe", "hidden_probe_trace_plus"):
        est = get_estimator(name, n_components=8)
        assert isinstance(est, HiddenProbeEstimator)
        p = est.fit(x.select(np.arange(150)), y[:150]).score(x.select(np.arange(150, 200)))
        assert p.shape == (50,) and np.all((p >= 0) & (p <= 1))
        got = est.score(x)
        assert np.isnan(got[0]) and np.isfinite(got[1:]).all()  # the zero-token answer
        from sklearn.metrics import roc_auc_score

        assert roc_auc_score(y[150:], p) > 0.8
