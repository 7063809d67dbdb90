"""`tracecal.serve.drift`: the Page-Hinkley drift alarm on the answers' statistic."""

from __future__ import annotations

import numpy as np
import pytest

from tracecal.serve.drift import DriftMonitor
from tracecal.stats.drift import PageHinkleySettings


def test_drift_monitor_alarms_after_a_shift_and_not_before() -> None:
    rng = np.random.default_rng(0)
    mon = DriftMonitor("mean_entropy", PageHinkleySettings(threshold=8.0, min_samples=20))
    alarms = [mon.observe(rng.normal(1.0, 0.2, size=5), None) for _ in range(100)]
    assert not any(alarms) and mon.state()["alarm"] is False
    shifted = [mon.observe(rng.normal(2.0, 0.2, size=5), None) for _ in range(50)]
    assert any(shifted) and mon.state()["alarm"] is True and mon.state()["alarm_at_answers"][0] > 100
    assert mon.observe(np.zeros(0), None) is False  # an empty answer is skipped
    with pytest.raises(ValueError):
        DriftMonitor("perplexity")


def test_the_state_shows_the_detector_settings() -> None:
    from tracecal.serve.config import ServeConfig

    mon = DriftMonitor("c_trace")
    state = mon.state()
    assert state["statistic"] == "c_trace" and state["answers"] == 0 and state["alarm"] is False
    want = ServeConfig().page_hinkley()
    assert state["detector"] == {
        "kind": "page_hinkley",
        "delta": want.delta,
        "threshold": want.threshold,
        "min_samples": want.min_samples,
        "direction": want.direction,
    }
    assert DriftMonitor.value("c_trace", np.zeros(0), None) != DriftMonitor.value("c_trace", np.zeros(0), None)  # NaN
    assert DriftMonitor.value("mean_entropy", np.array([1.0, 3.0]), 0.5) == 2.0
    with pytest.raises(ValueError, match="statistic must be one of mean_entropy, c_trace, got 'perplexity'"):
        DriftMonitor("perplexity")
