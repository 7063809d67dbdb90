"""``tracecal secl`` end to end on the tiny model (the command of `tracecal.cli.secl`, registered in a Typer app)."""

from __future__ import annotations

import json
from pathlib import Path


def test_cli_registered_in_a_typer_app(tiny_model, monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import typer
    from typer.testing import CliRunner

    import tracecal.backends
    from tracecal.cli.secl import secl_command

    monkeypatch.setattr(tracecal.backends, "load_model", lambda *a, **k: tiny_model)
    app = typer.Typer()
    app.command("secl")(secl_command)
    app.command("noop")(lambda: None)  # two commands, so `secl` is addressed by name as in the main CLI
    runner = CliRunner()
    out, ad, cache = tmp_path / "r.json", tmp_path / "adapter", tmp_path / "frozen.json"
    args = ["secl", "--stream", "triviaqa,arc_easy", "--per-domain", "2", "--cache", str(cache)]
    r = runner.invoke(app, [*args, "--gate", "always", "--out", str(out), "--save-adapter", str(ad)])
    assert r.exit_code == 0, r.output
    assert "SECL v" in r.output and "τ (NormPTrue)" in r.output and "overall" in r.output
    assert json.loads(out.read_text())["summary"]["n"] == 4
    assert (ad / "adapter_model.safetensors").is_file() and cache.is_file()
    r = runner.invoke(
        app, [*args, "--gate", "never", "--reset", "--loss", "mse", "--set", "ph_lambda=8", "--set", "lr=0.01"]
    )
    assert r.exit_code == 0, r.output
    assert "reusing the frozen pass" in r.output
    r = runner.invoke(app, [*args, "--gate", "sometimes"])
    assert r.exit_code == 2


def test_overrides_are_typed_like_the_config_fields() -> None:
    import pytest

    from tracecal.cli.secl import parse_overrides

    o = parse_overrides(["ph_lambda=8", "start_burst=false", "lora_targets=q_proj,o_proj", "burst_size=4"])
    assert o == {"ph_lambda": 8.0, "start_burst": False, "lora_targets": ("q_proj", "o_proj"), "burst_size": 4}
    with pytest.raises(ValueError):
        parse_overrides(["nope=1"])
