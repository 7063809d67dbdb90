"""`tracecal_papers.secl_grid`: the variants of the SECL grid (each one change against the default, selectable by the
CLI's own ``--set`` parsing), the run folders, what is done, and the time estimate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tracecal.cli.secl import parse_overrides
from tracecal.errors import ValidationError
from tracecal.secl import SECLConfig
from tracecal_papers.secl_grid import (
    DEFAULT_STREAM,
    GROUPS,
    VARIANTS,
    estimate_seconds,
    finish_run,
    is_done,
    model_slug,
    plan,
    secl_args,
    select_variants,
)


def test_every_variant_changes_one_thing_against_the_default() -> None:
    default = SECLConfig().to_dict()
    assert len({v.name for v in VARIANTS}) == len(VARIANTS) and VARIANTS[0].name == "default"
    assert [g for g in GROUPS if any(v.group == g for v in VARIANTS)] == list(GROUPS)  # the default + 7 ablations
    for v in VARIANTS:
        got = v.config(seed=3).to_dict()
        changed = {k for k in got if got[k] != default[k]} - {"seed"}
        assert changed == {k for k, _ in v.overrides}, v.name
        assert sorted(v.domains()) == sorted(DEFAULT_STREAM)
        assert (v.domains() != list(DEFAULT_STREAM)) == (v.group == "order")
        assert not (changed and v.group == "order"), v.name
    orders = {tuple(v.domains()) for v in VARIANTS}
    assert len(orders) >= 3  # at least three orders of the four domains
    targets = {v.config().target for v in VARIANTS if v.group == "signal"}
    assert targets == {"ptrue", "trace", "trace_rank", "oracle"}
    layers = sorted(v.config().lora_layers for v in VARIANTS if v.group == "layers")
    assert layers == [0, 1, 2, 8, 16]  # a sweep of top-K and all (0)
    hyper = {k for v in VARIANTS if v.group == "hyper" for k, _ in v.overrides}
    assert hyper == {"lr", "update_threshold", "burst_size", "ph_lambda", "lora_r", "lora_alpha"}


def test_a_variants_arguments_are_parsed_back_to_its_overrides_by_the_cli() -> None:
    for v in VARIANTS:
        args = v.args()
        pairs = [args[i + 1] for i, a in enumerate(args) if a == "--set"]
        assert parse_overrides(pairs) == dict(v.overrides), v.name
        assert ("--domain-order" in args) == (v.order is not None)


def test_select_variants_by_name_and_group() -> None:
    assert select_variants(None) == select_variants("all") == list(VARIANTS)
    got = [v.name for v in select_variants("default, gating,gate-never")]
    assert got == ["default", "gate-always", "gate-never"]
    with pytest.raises(ValidationError, match="unknown SECL variant or group 'nope'; groups: default, signal"):
        select_variants("default,nope")


def test_run_folders_plan_and_finishing_a_run(tmp_path: Path) -> None:
    assert model_slug("qwen2.5-coder-1.5b") == "qwen2.5-coder-1.5b"
    assert model_slug("/models/Qwen2.5_Coder.Q4.gguf") == "qwen2.5-coder.q4"
    variants = select_variants("default,loss")
    runs = plan(tmp_path, "smollm2-135m-instruct", variants, [0, 1])
    assert [r.folder.name for r in runs] == [
        "secl-smollm2-135m-instruct-default-s0",
        "secl-smollm2-135m-instruct-default-s1",
        "secl-smollm2-135m-instruct-loss-mse-s0",
        "secl-smollm2-135m-instruct-loss-mse-s1",
    ]
    assert not any(r.done for r in runs)
    full = tmp_path / "full.json"
    full.write_text(json.dumps({"summary": {"n": 4}, "questions": [{"id": "a"}]}))
    written = finish_run(full, runs[2].folder)
    assert json.loads(written.read_text()) == {"summary": {"n": 4}}  # the per-question records stay in the full file
    (runs[1].folder).mkdir()
    (runs[1].folder / "secl.json").write_text('{"summ')  # an interrupted write is not a finished run
    assert [r.done for r in plan(tmp_path, "smollm2-135m-instruct", variants, [0, 1])] == [False, False, True, False]
    assert is_done(runs[2].folder) and not is_done(tmp_path / "nothing")
    args = secl_args("m", 150, runs[2], tmp_path / "c.json", tmp_path / "o.json", threads=2)
    assert args[:2] == ["secl", "--model"] and "--per-domain" in args and args[args.index("--seed") + 1] == "0"
    assert args[-4:] == ["--set", "loss=mse", "--threads", "2"]
    assert args[args.index("--stream") + 1] == ",".join(DEFAULT_STREAM)
    assert "--dtype" not in args  # tracecal secl's own default
    bf16 = secl_args("m", 150, runs[2], tmp_path / "c.json", tmp_path / "o.json", dtype="bfloat16")
    assert bf16[-2:] == ["--dtype", "bfloat16"]


def test_estimate_seconds() -> None:
    # 2 runs of 4 × 10 questions at 0.5 s/question, + the frozen pass once at 2 s/question, + 25 s start each
    assert estimate_seconds(2, 10, 0.5, 2.0, frozen_cached=False) == pytest.approx(80 + 2 * (25 + 20))
    assert estimate_seconds(2, 10, 0.5, 2.0, frozen_cached=True) == pytest.approx(2 * (25 + 20))
    assert estimate_seconds(0, 10, 0.5, 2.0, frozen_cached=False) == 0.0
