"""The `tracecal` CLI: generate → score → fit-calibrator, and clear errors on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import tracecal
from tracecal.cli import app

runner = CliRunner()


@pytest.fixture()
def shared_model(model, monkeypatch):  # type: ignore[no-untyped-def]
    """Reuse the session's model instead of loading it again inside the command."""
    monkeypatch.setattr(tracecal, "load_model", lambda *a, **k: model)
    return model


def test_generate_score_fit(tmp_path: Path, shared_model) -> None:  # type: ignore[no-untyped-def]
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(
        "\n".join(
            json.dumps({"id": f"q{i}", "prompt": p})
            for i, p in enumerate(["What is 2+2?", "Name a fruit.", "Capital of Spain?", "Say hi."])
        )
        + "\n"
    )
    out = tmp_path / "t.parquet"
    r = runner.invoke(
        app,
        [
            "generate",
            "--prompts",
            str(prompts),
            "--out",
            str(out),
            "--max-new-tokens",
            "8",
            "--jsonl",
            str(tmp_path / "t.jsonl"),
        ],
    )
    assert r.exit_code == 0, r.output
    traces = tracecal.load_traces(out)
    assert [t.id for t in traces] == ["q0", "q1", "q2", "q3"]
    assert len((tmp_path / "t.jsonl").read_text().splitlines()) == 4

    labels = tmp_path / "labels.csv"
    labels.write_text("id,label\nq0,1\nq1,0\nq2,1\nq3,0\n")
    cal = tmp_path / "cal.json"
    r = runner.invoke(app, ["fit-calibrator", str(out), "--labels", str(labels), "--out", str(cal)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["score", str(out), "--calibrator", str(cal), "--csv", str(tmp_path / "s.csv")])
    assert r.exit_code == 0, r.output
    rows = (tmp_path / "s.csv").read_text().splitlines()
    assert rows[0].startswith("id,tokens,stop,c_trace,p_trace_plus") and len(rows) == 5


def test_errors_are_clear(tmp_path: Path, shared_model) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{not json\n')
    r = runner.invoke(app, ["generate", "--prompts", str(bad), "--out", str(tmp_path / "x.parquet")])
    assert r.exit_code == 2 and "bad.jsonl:2" in r.output
    corrupt = tmp_path / "c.parquet"
    corrupt.write_text("not parquet")
    r = runner.invoke(app, ["score", str(corrupt)])
    assert r.exit_code == 2 and "not a readable Parquet" in r.output
    r = runner.invoke(app, ["generate", "--out", str(tmp_path / "x.parquet")])
    assert r.exit_code == 2 and "exactly one of" in r.output
