"""`tracecal ablate` and `tracecal cross-model` on synthetic runs: tables printed and written."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from tracecal.cli.app import app
from tracecal.testing import write_synthetic_run


def test_ablate_writes_and_prints_the_tables(tmp_path: Path) -> None:
    write_synthetic_run(tmp_path / "r", tasks=("triviaqa",), n_per_task=80)
    r = CliRunner().invoke(app, ["ablate", str(tmp_path / "r"), "--seeds", "2", "--groups", "ladder,operators"])
    assert r.exit_code == 0, r.output
    assert "From TRACE to TRACE+" in r.output and "Each operator alone" in r.output
    doc = json.loads((tmp_path / "r" / "ablations.json").read_text())
    assert {v["group"] for v in doc["variants"].values()} == {"ladder", "operators"} and "transfer" not in doc


def test_cross_model_from_results_files(tmp_path: Path) -> None:
    for name in ("a", "b"):
        write_synthetic_run(tmp_path / name, tasks=("triviaqa", "svamp"), n_per_task=60, seed=len(name))
    out = tmp_path / "table.md"
    r = CliRunner().invoke(app, ["cross-model", f"A={tmp_path / 'a'}", f"B={tmp_path / 'b'}", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "**pooled**" in out.read_text() and json.loads(out.with_suffix(".json").read_text())["pooled"]


def test_cross_model_reads_null_metrics_and_writes_standard_json(tmp_path: Path) -> None:
    for name in ("a", "b"):
        write_synthetic_run(tmp_path / name, tasks=("triviaqa",), n_per_task=60, seed=len(name))
    res = tmp_path / "a" / "results.json"
    doc = json.loads(res.read_text())
    for m in doc["metrics"]["triviaqa"]["trace"].values():
        m |= {"mean": None, "sd": None}  # how a NaN (a metric undefined on every split) is stored
    res.write_text(json.dumps(doc, allow_nan=False))
    out = tmp_path / "table.md"
    r = CliRunner().invoke(app, ["cross-model", f"A={tmp_path / 'a'}", f"B={tmp_path / 'b'}", "--out", str(out)])
    assert r.exit_code == 0, r.output
    text = out.with_suffix(".json").read_text()
    json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(AssertionError(f"non-standard JSON: {c}")))


def test_cross_model_never_writes_over_a_runs_results(tmp_path: Path) -> None:
    """``--out a/results.md`` would write ``a/results.json`` beside it, run A's input: refused before anything is
    read, both runs byte-identical."""
    for name in ("a", "b"):
        write_synthetic_run(tmp_path / name, tasks=("triviaqa",), n_per_task=60, seed=len(name))
    before = {p: p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()}
    for out in (tmp_path / "a" / "results.md", tmp_path / "b" / "results.json"):
        r = CliRunner().invoke(app, ["cross-model", f"A={tmp_path / 'a'}", f"B={tmp_path / 'b'}", "--out", str(out)])
        assert r.exit_code == 2 and "Traceback" not in r.output, r.output
        assert "is the results of" in r.output and "would destroy that input" in r.output
    assert {p: p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()} == before


def test_frontier_prints_and_writes_the_table(tmp_path: Path) -> None:
    from tracecal.evaluation.runstore import RunStore
    from tracecal.testing import add_synthetic_samples

    run = write_synthetic_run(tmp_path / "r", tasks=("triviaqa",), n_per_task=100, n_seeds=3)
    add_synthetic_samples(RunStore(run), "triviaqa", k=2)
    timings = tmp_path / "timings.json"
    timings.write_text(json.dumps({"samples/triviaqa": 5.0, "extra/triviaqa": 50.0}))
    args = ["frontier", str(run), "--estimators", "trace,trace_plus,sampling", "--n-boot", "20"]
    r = CliRunner().invoke(app, [*args, "--timings", str(timings)])
    assert r.exit_code == 0, r.output
    assert "self_consistency_k2" in r.output and (run / "frontier_triviaqa.svg").exists()
    doc = json.loads((run / "frontier.json").read_text())
    assert {p["estimator"] for p in doc["tasks"]["triviaqa"]["points"]} >= {"trace", "semantic_entropy_k2"}
    timings.write_text("[1, 2]")
    bad = CliRunner().invoke(app, [*args, "--timings", str(timings)])
    assert bad.exit_code == 2 and "timings.json" in bad.output
