"""The factory of every backend (`tracecal.backends.load_model`): dispatch, refused settings, clear errors."""

from __future__ import annotations

import pytest

from tracecal.backends.http import HTTPModel


def test_load_model_with_a_bad_name_fails_with_the_names(monkeypatch) -> None:
    from tracecal.backends import load_model

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(RuntimeError, match=r"could not load model 'gemma3-27m'.*named offline models: .*gemma3-270m"):
        load_model("gemma3-27m")


def test_cli_bad_model_name_is_a_clear_error(tmp_path) -> None:
    from typer.testing import CliRunner

    from tracecal.cli.app import app

    args = [
        "evaluate",
        "--model",
        "gemma3-27m",
        "--tasks",
        "triviaqa",
        "--limit",
        "2",
        "--estimators",
        "trace",
        "--run-dir",
        str(tmp_path / "run"),
        "--no-report",
    ]
    res = CliRunner().invoke(app, args)
    assert res.exit_code != 0 and (res.exception is None or isinstance(res.exception, SystemExit))
    assert "gemma3-270m" in res.output and "Traceback" not in res.output


def test_load_model_http_backend() -> None:
    from tracecal.backends import load_model

    m = load_model("http://127.0.0.1:9/v1", backend="http", batch_size=3, dtype="auto", model="m")
    assert isinstance(m, HTTPModel) and m.batch_size == 3 and m.model_id == "m"
    with pytest.raises(ValueError, match="dtype='bfloat16' does not apply to an HTTP backend"):
        load_model("http://127.0.0.1:9/v1", backend="http", dtype="bfloat16")
    with pytest.raises(ValueError, match="unknown backend 'grpc'"):
        load_model("x", backend="grpc")


def test_load_model_refuses_an_unknown_backend_and_a_dtype_for_a_server() -> None:
    import tracecal
    from tracecal.backends import backend_choices, load_model
    from tracecal.errors import ValidationError

    assert tracecal.load_model is load_model and backend_choices() == ("auto", "hf", "http", "llamacpp")
    with pytest.raises(ValidationError, match="unknown backend 'onnx'; choose auto, hf, http or llamacpp"):
        load_model("x", backend="onnx")
    with pytest.raises(ValidationError, match="device='cuda' does not apply to an HTTP backend"):
        load_model("https://example.invalid/v1", device="cuda")


def test_the_package_imports_no_torch() -> None:
    import subprocess
    import sys

    code = "import sys, tracecal.backends, tracecal; assert 'torch' not in sys.modules, 'torch imported'"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
