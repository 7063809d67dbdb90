"""`tracecal models`: the named models listed with size, family, licence and presence; fetch refuses unknown names."""

from __future__ import annotations

from typer.testing import CliRunner

from tracecal.backends.catalogue import CATALOGUE
from tracecal.cli.app import app


def test_models_lists_every_named_model_with_its_facts() -> None:
    r = CliRunner().invoke(app, ["models"], env={"COLUMNS": "250"})
    assert r.exit_code == 0, r.output
    for m in CATALOGUE.values():
        assert m.name in r.output and m.licence in r.output and m.family in r.output
    assert "1,117 MB" in r.output and "Apache-2.0" in r.output
    row = next(line for line in r.output.splitlines() if "smollm2-135m-instruct" in line)
    assert " yes " in row  # the default is installed by the set-up


def test_an_absent_model_says_how_to_fetch_it(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TRACECAL_MODEL_CACHE", str(tmp_path))
    monkeypatch.setattr("tracecal.backends.catalogue.qwen_chunk_paths", lambda: [tmp_path / "nope"])
    r = CliRunner().invoke(app, ["models"], env={"COLUMNS": "250"})
    row = next(line for line in r.output.splitlines() if "qwen2.5-coder-1.5b" in line)
    assert " no " in row and "tracecal models fetch" in row  # (the name wraps onto the next line)


def test_fetch_without_a_name_lists_the_names() -> None:
    r = CliRunner().invoke(app, ["models", "fetch"])
    assert r.exit_code == 2 and "gemma3-270m" in r.output and "qwen2.5-coder-1.5b" in r.output
