"""`tracecal_papers.secl_tables`: docs/secl.md's tables from synthetic run JSONs — runs matched to their variant by
their configuration and stream order, means ± seed sd, "not run" rows for what is missing, notes for what is left out
— and from a real (tiny-model) result file."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from tracecal.errors import ValidationError
from tracecal.secl import SECLConfig
from tracecal_papers.secl_grid import DEFAULT_STREAM
from tracecal_papers.secl_tables import (
    ablation_table,
    classify,
    family_table,
    load_runs,
    measured_rates,
    render,
    write_between_markers,
)


def _result(
    model: str, cfg: SECLConfig, reduction: float, order: list[str] | None = None, n: int = 10
) -> dict[str, Any]:
    summary = {"n": 4 * n, "ece_frozen_v": 0.3, "ece_secl_v": 0.3 * (1 - reduction), "ece_reduction": reduction}
    summary |= {"trained_share": 0.1, "overhead_vs_tau_all": 0.4, "ece_tau": 0.2}
    summary |= {"seconds": {"frozen_pass": 8.0 * n, "secl_pass": 2.0 * n}}
    overall = {"frozen_v": {"auroc": 0.6}, "secl_v": {"auroc": 0.55}, "tau": {"auroc": 0.5}}
    stream = {d: n for d in (order or DEFAULT_STREAM)}
    return {
        "model_id": model,
        "config": cfg.to_dict(),
        "stream": stream,
        "summary": summary,
        "metrics": {"overall": overall},
    }


def _write(root: Path, name: str, d: dict[str, Any]) -> None:
    (root / name).parent.mkdir(parents=True, exist_ok=True)
    (root / name).write_text(json.dumps(d))


@pytest.fixture()
def runs_dir(tmp_path: Path) -> Path:
    smol = "smollm2-135m-instruct"
    for seed, red in enumerate((0.4, 0.5, 0.6)):
        _write(tmp_path, f"secl-smol-default-s{seed}/secl.json", _result(smol, SECLConfig(seed=seed), red))
    _write(tmp_path, "secl-smol-gate-always-s0/secl.json", _result(smol, SECLConfig(gate="always"), 0.45))
    rev = list(DEFAULT_STREAM)[::-1]
    _write(tmp_path, "secl-smol-order-reverse-s0/secl.json", _result(smol, SECLConfig(), 0.3, order=rev))
    old = _result(smol, SECLConfig(accumulate=False), 0.0)
    del old["config"]["target"], old["config"]["reset_at"]  # a run written before these fields existed
    _write(tmp_path, "secl150/reset.json", old)
    _write(tmp_path, "secl150/qkvo.json", _result(smol, SECLConfig(lora_targets=("q_proj", "k_proj")), 0.5))
    _write(tmp_path, "secl150/again.json", _result(smol, SECLConfig(gate="always"), 0.9))  # a duplicate
    _write(tmp_path, "secl150/other.json", {"results": []})  # not a SECL result
    _write(tmp_path, "qwen1000/secl.json", _result("qwen2.5-coder-1.5b", SECLConfig(), 0.7))  # not a secl* folder
    qwen = _result("qwen2.5-coder-1.5b", SECLConfig(), 0.7, n=20) | {"dtype": "bfloat16"}
    _write(tmp_path, "secl-qwen-default-s0/secl.json", qwen)
    return tmp_path


def test_runs_are_matched_to_their_variant(runs_dir: Path) -> None:
    runs, notes = load_runs(runs_dir)
    got = sorted((r.model[:4], r.variant, r.seed, r.per_domain) for r in runs)
    assert got == [
        ("qwen", "default", 0, 20),
        ("smol", "default", 0, 10),
        ("smol", "default", 1, 10),
        ("smol", "default", 2, 10),
        ("smol", "gate-always", 0, 10),
        ("smol", "order-reverse", 0, 10),
        ("smol", "reset-update", 0, 10),
    ]
    assert len(notes) == 2 and "qkvo.json: matches no grid variant" in notes[1]
    assert "again.json: a second run of gate-always" in notes[0]
    assert classify({"nope": 1}, list(DEFAULT_STREAM)) is None
    assert classify(SECLConfig(batch_size=2, seed=7).to_dict(), list(DEFAULT_STREAM)).name == "default"  # type: ignore[union-attr]


def test_the_family_table_with_seed_spread_and_a_missing_model(runs_dir: Path) -> None:
    runs, _ = load_runs(runs_dir)
    lines = family_table(runs).splitlines()
    assert lines[0].startswith("| model | n per domain | seeds | ECE of v: frozen → SECL | ECE reduction |")
    smol, gemma, qwen, published = lines[2:]
    cells = [c.strip() for c in smol.strip("|").split("|")]
    assert cells[:5] == ["SmolLM2-135M-Instruct (float32)", "10", "0,1,2", "0.300 → 0.150 ± 0.030", "50 ± 10 %"]
    assert cells[5:] == ["10.0 ± 0.0 %", "0.40 ± 0.00×", "0.600 → 0.550 ± 0.000", "0.200"]
    assert gemma.startswith("| Gemma-3-270M | — | not run | — |")
    assert qwen.startswith(
        "| Qwen2.5-Coder-1.5B-Instruct (bfloat16) | 20 | 0 | 0.300 → 0.090 | 70 % |"
    )  # one seed: no spread
    assert "56–78 %" in published and "6–26 %" in published
    assert "not run" in family_table(runs, per_domain=15)  # another size: nothing of it was run


def test_the_ablation_table_lists_every_variant_with_not_run_rows(runs_dir: Path) -> None:
    from tracecal_papers.secl_grid import VARIANTS

    runs, _ = load_runs(runs_dir)
    lines = ablation_table(runs, "smollm2-135m-instruct").splitlines()[2:]
    assert len(lines) == len(VARIANTS)
    by_name = {line.split("`")[1]: line for line in lines}
    assert "| 0 | 0.300 → 0.165 | 45 % |" in by_name["gate-always"]
    assert "| 0 | 0.300 → 0.210 | 30 % |" in by_name["order-reverse"]
    assert "| 0 | 0.300 → 0.300 | 0 % |" in by_name["reset-update"]
    assert "| 10 | not run |" in by_name["reset-shift"] and "| 10 | not run |" in by_name["target-oracle"]
    assert sum("not run" in line for line in lines) == len(VARIANTS) - 4
    block = render(runs, ["qwen2.5-coder-1.5b"])
    assert "The seven ablations on Qwen2.5-Coder-1.5B-Instruct" in block and block.count("not run") >= len(VARIANTS) - 1


def test_write_between_markers(tmp_path: Path) -> None:
    doc = tmp_path / "secl.md"
    doc.write_text("# SECL\nbefore\n<!-- secl-tables:start -->\nold\n<!-- secl-tables:end -->\nafter\n")
    write_between_markers(doc, "NEW TABLE")
    assert doc.read_text() == "# SECL\nbefore\n<!-- secl-tables:start -->\nNEW TABLE\n<!-- secl-tables:end -->\nafter\n"
    write_between_markers(doc, "AGAIN")
    assert "AGAIN" in doc.read_text() and "NEW TABLE" not in doc.read_text()
    (tmp_path / "plain.md").write_text("no markers")
    with pytest.raises(ValidationError, match="has no <!-- secl-tables:start --> … <!-- secl-tables:end --> pair"):
        write_between_markers(tmp_path / "plain.md", "x")


def test_measured_rates(runs_dir: Path) -> None:
    runs, _ = load_runs(runs_dir)
    assert measured_rates(runs, "smollm2-135m-instruct") == pytest.approx((0.5, 2.0))  # 2n s, 8n s over 4n questions
    assert measured_rates(runs, "gemma3-270m") is None


def test_a_real_result_file_is_read(tmp_path: Path, always_run) -> None:  # type: ignore[no-untyped-def]
    """The result `SECLResult.to_json` writes (tiny model, gate always) has what the tables read."""
    d = json.loads(always_run.to_json())
    d["stream"] = {dom: 2 for dom in DEFAULT_STREAM}  # the grid's four domains (the tiny stream has two)
    _write(tmp_path, "secl-tiny/secl.json", d)
    runs, notes = load_runs(tmp_path)
    assert notes == [] and [(r.variant, r.per_domain) for r in runs] == [("gate-always", 2)]
    s = always_run.summary()
    assert runs[0].values["ece_reduction"] == pytest.approx(s["ece_reduction"])
    assert runs[0].values["auroc_secl"] == d["metrics"]["overall"]["secl_v"]["auroc"]  # null (one class) → None
    assert runs[0].values["trained_share"] == pytest.approx(s["trained_share"])
    assert dataclasses.asdict(runs[0])["seed"] == 0
    assert d["dtype"] == runs[0].dtype == "float32"  # the weights' dtype is recorded (the tiny model's: fp32)
