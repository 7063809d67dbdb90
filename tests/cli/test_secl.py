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
    cfg.scope, cfg.seed, cfg.target, cfg.reset_at = "confidence", 0, "trace_rank", "update"
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
    assert "target=trace_rank" in text and "τ (online rank of c_TRACE)" in text
    assert f"τ itself {MISSING})" in text and "nan" not in text


def test_bad_options_are_refused_before_a_model_loads() -> None:
    r = CliRunner().invoke(app, ["secl", "--gate", "sometimes", "--stream", "triviaqa", "--per-domain", "1"])
    assert r.exit_code == 2 and r.output.startswith("error: ") and "gate" in r.output, r.output


def test_a_bad_dtype_is_refused_before_a_model_loads_and_a_good_one_reaches_the_loader(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import tracecal.backends

    r = CliRunner().invoke(app, ["secl", "--dtype", "int3", "--stream", "triviaqa", "--per-domain", "1"])
    assert r.exit_code == 2 and r.output.startswith("error: --dtype: unknown dtype 'int3'"), r.output
    seen: dict[str, Any] = {}

    def fake_load(*a: Any, **k: Any) -> Any:
        seen.update(k)
        raise ValidationError("stop here")

    monkeypatch.setattr(tracecal.backends, "load_model", fake_load)
    r = CliRunner().invoke(app, ["secl", "--dtype", "bfloat16", "--stream", "triviaqa", "--per-domain", "1"])
    assert r.exit_code == 2 and "stop here" in r.output and seen["dtype"] == "bfloat16", r.output


def test_the_ablation_options_reach_the_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each ablation option sets its `SECLConfig` field (the run itself is replaced: no model loads), the domain
    order permutes the stream, and an option left out keeps the config's default."""
    import tracecal.cli.secl as cli_secl

    seen: dict[str, Any] = {}

    def fake_run(model, items, cfg, cache, run):  # type: ignore[no-untyped-def]
        seen["cfg"], seen["domains"] = cfg, list(dict.fromkeys(it.domain for it in items))
        raise ValidationError("stop here")

    monkeypatch.setattr(cli_secl, "_run", fake_run)
    args = ["secl", "--stream", "triviaqa,svamp,arc_easy", "--per-domain", "1", "--domain-order", "3,1,2"]
    args += ["--target", "oracle", "--reset", "--reset-at", "shift", "--update-threshold", "0.2"]
    args += ["--ph-lambda", "5", "--lora-rank", "4", "--lora-layers", "0", "--loss", "mse", "--gate", "detector"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2 and "stop here" in r.output, r.output
    cfg = seen["cfg"]
    assert (cfg.target, cfg.accumulate, cfg.reset_at, cfg.update_threshold) == ("oracle", False, "shift", 0.2)
    assert (cfg.ph_lambda, cfg.lora_r, cfg.lora_layers, cfg.loss, cfg.lora_alpha) == (5.0, 4, 0, "mse", 16)
    assert seen["domains"] == ["arc_easy", "triviaqa", "svamp"]
    r = CliRunner().invoke(app, ["secl", "--stream", "triviaqa", "--per-domain", "1"])
    assert (seen["cfg"].update_threshold, seen["cfg"].ph_lambda, seen["cfg"].lora_r) == (0.1, 10.0, 8)


def test_the_output_is_never_the_cache_and_both_are_checked_first(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``--out`` equal to ``--cache`` (before the cache exists, or through a link to it) is refused before the
    stream is read or a model loads; the cache stays byte-identical."""
    import os

    cache = tmp_path / "frozen.json"
    r = CliRunner().invoke(app, ["secl", "--out", str(cache), "--cache", str(cache)])
    assert r.exit_code == 2 and "--out" in r.output and "are the same file: give two paths" in r.output, r.output
    cache.write_text('{"format": "x"}')
    os.link(cache, tmp_path / "hard.json")
    r = CliRunner().invoke(app, ["secl", "--out", str(tmp_path / "hard.json"), "--cache", str(cache)])
    assert r.exit_code == 2 and "is the --cache file" in r.output and "Traceback" not in r.output, r.output
    assert cache.read_text() == '{"format": "x"}'


def test_secl_on_llama_cpp_says_it_needs_the_hf_backend_and_how(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("TRACECAL_MODEL_CACHE", str(tmp_path / "cache"))
    r = CliRunner().invoke(app, ["secl", "--backend", "llamacpp", "--per-domain", "2"])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    msg = " ".join(r.output.split())
    assert msg.startswith(
        "error: SECL runs on the HF backend only: it trains LoRA weights by gradient steps, which "
        "llama.cpp (the GGUF run by llama-cpp-python) cannot take"
    ), msg
    # how to get an HF checkpoint of the same model: named models and .gguf files are converted into the cache
    assert "smollm2-135m-instruct" in msg and "gemma3-270m" in msg and ".gguf file given to --model" in msg
    assert str(tmp_path / "cache" / "hf") in msg and not (tmp_path / "cache").exists()  # refused before any load


def test_save_adapter_never_writes_over_a_file_an_input_or_a_folder_of_other_files(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``--save-adapter`` is refused before the stream is read or a model loads when it is a file (the cache, a
    device), holds an input or ``--cache``, or is a non-empty folder that is not a saved adapter; what is there
    stays byte-identical."""
    mine, data = tmp_path / "mine", tmp_path / "data"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    cache = tmp_path / "frozen.json"
    cache.write_text('{"format": "x"}')
    data.mkdir()
    (data / "triviaqa.json").write_text("[]")
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    cases = [
        (["--save-adapter", str(mine)], "is not empty and is not a saved SECL adapter (it holds 'thesis.tex')"),
        (["--save-adapter", str(cache), "--cache", str(cache)], "is the --cache file"),
        (["--save-adapter", "/dev/stdout"], "is not a folder (a file or a device)"),
        (["--save-adapter", str(tmp_path / "new"), "--cache", str(tmp_path / "new" / "c.json")], "lies inside"),
        (["--save-adapter", str(data), "--data-dir", str(data)], "is the --data-dir folder"),
        (["--save-adapter", str(tmp_path), "--model", str(model)], "holds the model"),
    ]
    for args, message in cases:
        r = CliRunner().invoke(app, ["secl", "--stream", "triviaqa", "--per-domain", "1", *args])
        assert r.exit_code == 2 and message in " ".join(r.output.split()), (args, r.output)
        assert r.output.startswith("error: --save-adapter") or "--cache" in r.output, r.output
        assert "Traceback" not in r.output
    assert (mine / "thesis.tex").read_text() == "years of work" and sorted(p.name for p in mine.iterdir()) == [
        "thesis.tex"
    ]
    assert cache.read_text() == '{"format": "x"}' and not (tmp_path / "new").exists()


def test_save_adapter_writes_a_folder_and_replaces_its_own_earlier_one(tmp_path, tiny_model, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import tracecal.backends

    monkeypatch.setattr(tracecal.backends, "load_model", lambda *a, **k: tiny_model)
    out = tmp_path / "ad"
    args = ["secl", "--stream", "triviaqa", "--per-domain", "2", "--gate", "always", "--save-adapter", str(out)]
    for _ in range(2):  # the second run replaces the adapter the first saved
        r = CliRunner().invoke(app, args)
        assert r.exit_code == 0, r.output
        assert f"saved the LoRA adapter to {out}" in " ".join(r.output.split())
    assert {"adapter_model.safetensors", "secl_config.json"} <= {p.name for p in out.iterdir()}
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_progress_shows_each_twentieth_of_a_stage_whatever_the_batch_size(monkeypatch: pytest.MonkeyPatch) -> None:
    import tracecal.cli.secl as secl

    lines: list[str] = []
    monkeypatch.setattr(secl, "note", lines.append)
    monkeypatch.setattr(secl, "_SHOWN", {})
    for done in range(16, 600 + 1, 16):  # batches of 16 never land on a multiple of 50 before 400
        secl._progress("frozen pass", done, 600)
    secl._progress("frozen pass", 600, 600)
    counts = [int(line.split(": ")[1].split("/")[0]) for line in lines]
    assert counts[0] == 32 and counts[-1] == 600 and len(counts) >= 19
    assert all(b - a <= 2 * 30 for a, b in zip(counts, counts[1:], strict=False))


def test_progress_starts_again_for_a_second_run_in_the_same_process(monkeypatch: pytest.MonkeyPatch) -> None:
    import tracecal.cli.secl as secl

    lines: list[str] = []
    monkeypatch.setattr(secl, "note", lines.append)
    monkeypatch.setattr(secl, "_SHOWN", {})
    for _ in range(2):
        for done in range(16, 160 + 1, 16):
            secl._progress("frozen pass", done, 160)
    first, second = lines[: len(lines) // 2], lines[len(lines) // 2 :]
    assert first == second and len(first) >= 5
