"""`tracecal.serve.config`: every limit validated by its one declared constraint, refused by name."""

from __future__ import annotations

import pytest

from tests.serve.helpers import FakeModel
from tracecal.serve import ServeConfig, create_app


def test_config_validates_every_limit() -> None:
    for bad in (
        {"max_batch": 0},
        {"max_queue": True},
        {"request_timeout": 0},
        {"abstain_below": 1.5},
        {"stop_on_risk": -0.1},
        {"drift_statistic": "x"},
        {"drift_direction": "sideways"},
        {"default_max_tokens": 600},
        {"batch_wait_ms": float("nan")},
        {"auth_token_env": ""},
    ):
        with pytest.raises(ValueError):
            ServeConfig(**bad)  # type: ignore[arg-type]


def test_abstain_on_probability_needs_a_calibrator(fake: FakeModel) -> None:
    with pytest.raises(ValueError, match="abstain_on must be"):
        ServeConfig(abstain_on="p")
    with pytest.raises(ValueError, match="needs a calibrator"):
        create_app(fake, None, ServeConfig(abstain_on="probability"))


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"max_batch": 0}, "max_batch must be a whole number ≥ 1, got 0"),
        ({"max_queue": True}, "max_queue must be a whole number ≥ 1, got True"),
        ({"batch_wait_share": 1.5}, "batch_wait_share must be a finite number in [0, 1], got 1.5"),
        ({"request_timeout": 0}, "request_timeout must be a finite number ≥ 0.001, got 0"),
        ({"abstain_below": 1.5}, "abstain_below must be a finite number in [0, 1] or None, got 1.5"),
        ({"abstain_on": "p"}, "abstain_on must be one of auto, c_trace, probability, got 'p'"),
        ({"drift_statistic": "x"}, "drift_statistic must be one of mean_entropy, c_trace, got 'x'"),
        ({"drift_direction": "sideways"}, "drift_direction must be one of both, up, down, got 'sideways'"),
        ({"drift_threshold": 0.0}, "drift_threshold must be a finite number > 0, got 0.0"),
        ({"drift_min_samples": 0}, "drift_min_samples must be a whole number ≥ 1, got 0"),
        ({"default_max_tokens": 600}, "default_max_tokens (600) exceeds max_tokens (512)"),
        ({"auth_token_env": ""}, "auth_token_env must name an environment variable"),
    ],
)
def test_a_bad_setting_is_refused_by_name(bad: dict[str, object], message: str) -> None:
    from tracecal.errors import ValidationError

    with pytest.raises(ValidationError) as e:
        ServeConfig(**bad)  # type: ignore[arg-type]
    assert str(e.value) == message


def test_the_drift_settings_are_page_hinkley_settings() -> None:
    from tracecal.stats.drift import PAGE_HINKLEY_DEFAULTS, PageHinkleySettings

    cfg = ServeConfig()
    assert cfg.page_hinkley() == PageHinkleySettings(threshold=8.0)  # the gateway's λ, the shared δ and window
    assert (cfg.drift_delta, cfg.drift_min_samples) == (PAGE_HINKLEY_DEFAULTS.delta, PAGE_HINKLEY_DEFAULTS.min_samples)
    assert ServeConfig.parameter_constraints["drift_threshold"] == PageHinkleySettings.constraints["threshold"]
    assert set(ServeConfig.parameter_constraints) <= set(cfg.as_dict())  # every constraint names a setting
