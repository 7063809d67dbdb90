"""`tracecal.stats.drift`: Page-Hinkley (delays, false alarms, min_samples, direction, NaN) and its settings (declared
once)."""

from __future__ import annotations

import numpy as np
import pytest

from tracecal.errors import ValidationError
from tracecal.stats.drift import (
    PAGE_HINKLEY_DEFAULTS,
    PageHinkley,
    PageHinkleySettings,
    false_alarm_rate,
    page_hinkley_constraints,
)


def _first_alarm_after(det: PageHinkley, xs: np.ndarray, t0: int) -> int | None:
    hits = [i for i, x in enumerate(xs) if det.update(float(x))]
    post = [i for i in hits if i >= t0]
    return post[0] - t0 if post else None


def test_page_hinkley_fires_on_mean_shift() -> None:
    rng = np.random.default_rng(0)
    delays = []
    for _ in range(100):
        xs = np.r_[rng.normal(0.0, 1.0, 150), rng.normal(1.0, 1.0, 150)]  # +1 sd shift at t = 150
        delays.append(_first_alarm_after(PageHinkley(), xs, 150))
    detected = [d for d in delays if d is not None and d <= 32]
    assert len(detected) >= 95  # within one burst length in ≥ 95% of streams (measured: 99%)
    assert np.median(detected) <= 16
    # a downward shift of entropy (e.g. TriviaQA → SVAMP) is caught by the two-sided test
    xs = np.r_[rng.normal(2.0, 0.5, 100), rng.normal(1.0, 0.5, 100)]
    det = PageHinkley()
    d = _first_alarm_after(det, xs, 100)
    assert d is not None and d <= 16 and det.alarm_directions[-1] == "down"


def test_page_hinkley_quiet_on_stationary_stream() -> None:
    # false alarms per 1000 observations, 100 streams × 600 (the length of the 4 × 150 SECL stream)
    fa_normal = false_alarm_rate(n_streams=100, length=600, seed=1)
    fa_skewed = false_alarm_rate(n_streams=100, length=600, seed=2, dist="gamma")
    assert fa_normal < 2.0, fa_normal  # measured ≈ 1 per 1000: ≈ 0.6 spurious bursts per 600-question stream
    assert fa_skewed < 2.0, fa_skewed
    # raising λ trades delay for fewer alarms
    assert false_alarm_rate(n_streams=100, length=600, seed=1, threshold=15.0) <= fa_normal


def test_page_hinkley_min_samples_direction_and_nan() -> None:
    det = PageHinkley(min_samples=20)
    xs = np.r_[np.zeros(4), np.full(15, 50.0)]
    assert not any(det.update(x) for x in xs)  # nothing before min_samples observations
    up = PageHinkley(direction="up")
    rng = np.random.default_rng(3)
    xs = np.r_[rng.normal(0, 1, 60), rng.normal(-3, 1, 60)]
    assert not any(up.update(x) for x in xs)  # a decrease is ignored by the one-sided test
    assert not PageHinkley().update(float("nan"))
    with pytest.raises(ValueError):
        PageHinkley(direction="sideways")


def test_page_hinkley_settings_are_declared_once_and_refused_by_name() -> None:
    det = PageHinkley(threshold=8.0)
    assert isinstance(det, PageHinkleySettings) and det.clip == 3.0
    assert (det.delta, det.min_samples, det.direction) == (
        PAGE_HINKLEY_DEFAULTS.delta,
        PAGE_HINKLEY_DEFAULTS.min_samples,
        PAGE_HINKLEY_DEFAULTS.direction,
    )
    for bad, message in (
        ({"direction": "sideways"}, "direction must be one of both, up, down, got 'sideways'"),
        ({"threshold": 0.0}, "threshold must be a finite number > 0, got 0.0"),
        ({"delta": -0.5}, "delta must be a finite number ≥ 0, got -0.5"),
        ({"min_samples": 0}, "min_samples must be a whole number ≥ 1, got 0"),
    ):
        with pytest.raises(ValidationError, match=message):
            PageHinkleySettings(**bad)
    renamed = page_hinkley_constraints(delta="d", threshold="t", min_samples="m", direction="x")
    assert list(renamed) == ["d", "t", "m", "x"]
    assert list(renamed.values()) == list(PageHinkleySettings.constraints.values())
