"""`tracecal secl` (tracecal.cli.secl): --set overrides, the result table, refusals before any model loads."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from tracecal.cli.app import app
from tracecal.cli.common import MISSING
from tracecal.cli.secl import CONFIG_OPTIONS, parse_overrides, print_result
from tracecal.errors import ValidationError


def test_parse_overrides_types_each_field_like_its_default() -> None:
    got = parse_overrides(["ph_lambda=8", "lr=0.01", "accumulate=no", "lora_targets=q_proj, k_proj", "gate=never"])
    assert got == {"ph_lambda": 8.0, "lr": 0.01, "accumulate": False, "lora_targets": ("q_proj", "k_proj")} | {
        "gate": "never"
    }
    assert parse_overrides(None) == {}


@pytest.mark.parametrize(
    ("pair", "message"),
    [
        ("lr", "--set expects key=value"),
        ("nope=1", "unknown SECLConfig field 'nope'"),
        ("accumulate=maybe", "accumulate expects true/false"),
        ("burst_size=many", "burst_size expects a whole number, got 'many'"),
        ("lr=fast", "lr expects a number, got 'fast'"),
    ],
)
def test_bad_overrides_are_refused(pair: str, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        parse_overrides([pair])


def test_the_config_options_are_secl_config_fields() -> None:
    from tracecal.secl.config import SECLConfig

    assert set(CONFIG_OPTIONS) <= set(SECLConfig().to_dict())


def _fake_result() -> Any:
    m = {"n": 4, "ece": 0.1, "brier": 0.2, "auroc": math.nan, "acc": 0.5, "mean_conf": 0.6}
    cfg = SimpleNamespace(gate="always", accumulate=True, loss="mse", lora_targets=("q_proj",), lora_layers=0)
    cfg.scope, cfg.seed = "confidence", 0
    summary = {"ece_frozen_v": 0.2, "ece_secl_v": 0.1, "ece_reduction": 0.5, "ece_tau": None, "updates": 1, "n": 4}
    summary |= {"trained_share": 0.25, "gated_share": 0.5, "bursts": 1, "alarms": [2], "overhead_vs_tau_all": 1.0}
    summary |= {"overhead_vs_base_pipeline": 0.5, "overhead_seconds": 1.0, "tau_all_seconds": 2.0}
    summary |= {"overhead_time_vs_tau_all": 0.5, "seconds": {"frozen_pass": 3.0, "secl_pass": 4.0}}
    return SimpleNamespace(
        config=cfg,
        model_id="[red]m[/red]",
        metrics=lambda: {"d": {"frozen_v": m, "tau": m, "secl_v": m}},
        trained_share=lambda dom: 0.25,
        summary=lambda: summary,
    )


def test_print_result_shows_missing_numbers_as_a_dash() -> None:
    console = Console(record=True, width=200)
    print_result(_fake_result(), console)
    text = console.export_text()
    assert "SECL on [red]m[/red]" in text and "SECL v" in text and "25.0%" in text
    assert f"τ itself {MISSING})" in text and "nan" not in text


def test_bad_options_are_refused_before_a_model_loads() -> None:
    r = CliRunner().invoke(app, ["secl", "--gate", "sometimes", "--stream", "triviaqa", "--per-domain", "1"])
    assert r.exit_code == 2 and r.output.startswith("error: ") and "gate" in r.output, r.output
