"""`tracecal serve` (tracecal.cli.serve): options → ServeConfig and the app, refusals with one line."""

from __future__ import annotations

from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from tracecal.cli.app import app
from tracecal.cli.serve import CONFIG_OPTIONS, _abstain_from, serve_app
from tracecal.errors import ValidationError


def _defaults(**over: Any) -> dict[str, Any]:
    """The `serve` command's options at their defaults (by parameter name), with ``over`` applied."""
    cmd = typer.main.get_command(app).commands["serve"]  # type: ignore[attr-defined]  # a click Group
    return {p.name: p.default for p in cmd.params} | over


def test_the_config_options_are_serve_config_fields() -> None:
    from tracecal.serve.config import ServeConfig

    assert set(CONFIG_OPTIONS) <= set(ServeConfig().as_dict())
    assert set(CONFIG_OPTIONS) <= set(_defaults())


def test_no_model_builds_a_score_only_app() -> None:
    from fastapi.testclient import TestClient

    server = serve_app(_defaults(no_model=True, max_batch=2, max_queue=3))
    with TestClient(server) as c:
        health = c.get("/health").json()
    assert health["limits"]["max_batch"] == 2 and health["limits"]["max_queue"] == 3, health


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"upstream": "http://h/v1", "no_model": True}, "leave out --model and --no-model"),
        ({"backend": "vllm"}, "--backend must be hf or llamacpp, got 'vllm'"),
        ({"dtype": "int8"}, "--dtype must be auto, float32, bfloat16 or float16"),
        ({"dtype": "float16", "backend": "llamacpp"}, "--dtype applies to the in-process HF backend only"),
        ({"threads": 0}, "--threads must be a whole number ≥ 1, got 0"),
        ({"abstain_task": "svamp"}, "--abstain-task goes with --abstain-from"),
    ],
)
def test_contradicting_options_are_refused(over: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        serve_app(_defaults(**over))


def test_abstain_from_refuses_a_threshold_given_twice(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValidationError, match="not both"):
        _abstain_from(tmp_path / "s.json", None, 0.5, None, "auto", None, "hf")
    assert _abstain_from(None, None, 0.5, None, "auto", None, "hf") == {}


def test_a_bad_limit_exits_2_with_one_line() -> None:
    r = CliRunner().invoke(app, ["serve", "--max-queue", "0", "--no-model"])
    assert r.exit_code == 2 and r.output.startswith("error: ") and r.output.count("\n") == 1, r.output
