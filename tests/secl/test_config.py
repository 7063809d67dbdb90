"""`tracecal.secl.config`: `SECLConfig`'s constraints (declared once, messages naming the setting), its detector
settings and the JSON round trip."""

from __future__ import annotations

import json

import pytest

from tracecal.errors import ValidationError
from tracecal.secl import SECLConfig
from tracecal.stats.drift import PAGE_HINKLEY_DEFAULTS, PageHinkleySettings


def test_config_validation_and_round_trip() -> None:
    cfg = SECLConfig(lora_targets="q_proj, k_proj")  # type: ignore[arg-type]
    assert cfg.lora_targets == ("q_proj", "k_proj")
    assert SECLConfig.from_dict(json.loads(cfg.to_json())) == cfg
    old = {k: v for k, v in cfg.to_dict().items() if k not in ("target", "reset_at")}  # a run saved before them
    assert SECLConfig.from_dict(old) == cfg and (cfg.target, cfg.reset_at) == ("norm_ptrue", "update")
    for bad in ({"gate": "sometimes"}, {"loss": "l1"}, {"lr": 0.0}, {"burst_size": 0}, {"scope": "x"}):
        with pytest.raises(ValueError):
            SECLConfig(**bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown SECLConfig fields: nope"):
        SECLConfig.from_dict({"nope": 1})


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"gate": "sometimes"}, "gate must be one of detector, always, never, got 'sometimes'"),
        ({"optimizer": "lbfgs"}, "optimizer must be one of adam, sgd"),
        ({"ph_direction": "sideways"}, "ph_direction must be one of both, up, down"),
        ({"ph_lambda": 0.0}, "ph_lambda must be a finite number > 0, got 0.0"),
        ({"ph_delta": -1.0}, "ph_delta must be a finite number ≥ 0"),
        ({"ph_min_samples": 0}, "ph_min_samples must be a whole number ≥ 1"),
        ({"burst_size": 2.5}, "burst_size must be a whole number ≥ 1, got 2.5"),
        ({"max_step": float("nan")}, "max_step must be a finite number > 0"),
        ({"lora_layers": -1}, "lora_layers must be a whole number ≥ 0"),
        ({"update_threshold": -0.1}, "update_threshold must be a finite number ≥ 0"),
        ({"lora_targets": ""}, "lora_targets is empty"),
        ({"target": "labels"}, "target must be one of norm_ptrue, ptrue, trace, trace_rank, oracle, got 'labels'"),
        ({"reset_at": "domain"}, "reset_at must be one of update, shift, got 'domain'"),
        ({"reset_at": "shift"}, "reset_at='shift' needs accumulate=False (--reset) and gate='detector'"),
        ({"reset_at": "shift", "accumulate": False, "gate": "never"}, "reset_at='shift' needs accumulate=False"),
        ({"target": "oracle", "scope": "all"}, "target='oracle' needs scope='confidence'"),
    ],
)
def test_a_bad_setting_is_refused_by_name(bad: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        SECLConfig(**bad)  # type: ignore[arg-type]


def test_the_detector_settings_come_from_the_one_page_hinkley_declaration() -> None:
    cfg = SECLConfig()
    assert cfg.page_hinkley() == PAGE_HINKLEY_DEFAULTS  # the ph_* defaults are PageHinkleySettings' own
    assert SECLConfig(ph_lambda=8, ph_standardize=False).page_hinkley() == PageHinkleySettings(
        threshold=8, standardize=False
    )
    constrained = SECLConfig.parameter_constraints
    assert {"ph_delta", "ph_lambda", "ph_min_samples", "ph_direction"} <= set(constrained)
    assert constrained["ph_lambda"] == PageHinkleySettings.constraints["threshold"]
