"""The one vocabulary of parameter constraints (`tracecal._validation`)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tracecal._validation import (
    Flag,
    Interval,
    ListOf,
    Options,
    check_param,
    check_params,
    is_number,
)
from tracecal.errors import TracecalError, ValidationError


@pytest.mark.parametrize("value", [True, False, "1", None, [1], math.nan, math.inf, -math.inf])
def test_non_numbers_and_non_finite_values_are_refused(value: object) -> None:
    with pytest.raises(ValidationError, match=r"^x must be a finite number ≥ 0, got "):
        check_param("x", value, Interval(float, 0, None))


def test_integers_only_where_the_kind_is_int() -> None:
    assert check_param("n", 3, Interval(int, 1, None)) == 3
    assert check_param("n", np.int64(3), Interval(int, 1, None)) == 3
    with pytest.raises(ValidationError, match="n must be a whole number ≥ 1, got 2.5"):
        check_param("n", 2.5, Interval(int, 1, None))
    with pytest.raises(ValidationError, match="got 0"):
        check_param("n", 0, Interval(int, 1, None))


@given(st.floats(allow_nan=False, allow_infinity=False, width=64))
def test_interval_ends_follow_closed(v: float) -> None:
    for closed in ("both", "left", "right", "neither"):
        i = Interval(float, 0.0, 1.0, closed=closed)  # type: ignore[arg-type]  # every literal value is tried
        on_left, on_right = v == 0.0 and closed in ("both", "left"), v == 1.0 and closed in ("both", "right")
        inside = 0.0 < v < 1.0 or on_left or on_right
        assert i.accepts(v) == inside


def test_descriptions_name_the_interval() -> None:
    assert Interval(float, 0, 1, closed="neither").describe() == "a finite number in (0, 1)"
    assert Interval(float, 0, 1, closed="left").describe() == "a finite number in [0, 1)"
    assert Interval(float, None, 5).describe() == "a finite number ≤ 5"
    assert Interval(int, 2, None, closed="neither").describe() == "a whole number > 2"


def test_options_alternatives_and_none() -> None:
    c = (Options("platt", "isotonic"), None)
    assert check_param("calibrator", None, c) is None
    assert check_param("calibrator", "platt", c) == "platt"
    with pytest.raises(ValidationError, match="calibrator must be one of platt, isotonic or None, got 'x'"):
        check_param("calibrator", "x", c)
    with pytest.raises(ValidationError):
        check_param("calibrator", 3, Options("a"))


def test_check_params_renames_and_uses_the_callers_error() -> None:
    class ConfigError(TracecalError, ValueError):
        pass

    cons = {"cal_frac": Interval(float, 0, 1, closed="neither"), "unused": Options("a")}
    check_params({"cal_frac": 0.35}, cons)
    with pytest.raises(ConfigError, match="--cal-frac must be"):
        check_params({"cal_frac": 1.0}, cons, ConfigError, rename=lambda n: "--" + n.replace("_", "-"))


def test_is_number() -> None:
    assert is_number(1) and is_number(1.5) and is_number(np.float32(2)) and not is_number(True)
    assert is_number(3, integer=True) and not is_number(3.0, integer=True) and not is_number(math.nan)


def test_flag_and_list_constraints() -> None:
    assert Flag().accepts(True) and Flag().accepts(np.bool_(False)) and not Flag().accepts(1)
    lams = ListOf(Interval(float, 0, None, closed="neither"), "decay rates λ > 0")
    assert lams.accepts((2.0, 4)) and lams.accepts([0.5]) and lams.accepts(np.array([1.0, 2.0]))
    for bad in ((), "2,4", (2.0, -1.0), (float("inf"),), (True,), np.ones((2, 2)), None):
        assert not lams.accepts(bad), bad
    assert lams.problem("lams", (2.0, -1.0)) == "; lams[1] = -1.0 is not a finite number > 0"
    pens = ListOf(Interval(float, 0, None, closed="neither"), "λ", allow_inf=True)
    assert pens.accepts((1.0, float("inf"))) and not pens.accepts((float("-inf"),))
    names = ListOf(Options("a", "b"), "names", unique=True)
    assert names.accepts(("a", "b")) and not names.accepts(("a", "a")) and not names.accepts(("c",))
    assert names.problem("n", ["a", "a"]) == "; 'a' is given twice"


def test_check_params_checks_in_order_with_one_message_format() -> None:
    constraints = {
        "k": Interval(int, 1, None),
        "kind": Options("x", "y"),
        "flag": Flag(),
        "lams": ListOf(Interval(float, 0, None, closed="neither"), "decay rates"),
    }
    check_params({"k": 2, "kind": "x", "flag": False, "lams": [1.0], "other": object()}, constraints)
    with pytest.raises(ValidationError, match=r"^k must be a whole number ≥ 1, got 0$"):
        check_params({"k": 0, "kind": "z"}, constraints)  # the first declared fails first
    with pytest.raises(ValidationError, match=r"^kind must be one of x, y, got 'z'$"):
        check_params({"kind": "z"}, constraints)
    with pytest.raises(ValueError, match=r"^flag must be true or false, got 'yes'$"):
        check_params({"flag": "yes"}, constraints)
    with pytest.raises(ValueError, match=r"^lams must be a non-empty list of decay rates, got \[\]$"):
        check_params({"lams": []}, constraints)


def _same_message(messages: list[str], names: list[str]) -> str:
    """The part after each surface's name of the setting, asserted identical on every surface."""
    rests = []
    for msg, name in zip(messages, names, strict=True):
        assert name in msg, (name, msg)
        rests.append(msg[msg.index(name) + len(name) :])
    assert len(set(rests)) == 1, rests
    return rests[0]


def test_a_seed_gets_one_message_from_python_the_cli_and_config_json(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    from typer.testing import CliRunner

    from tracecal.analysis.ablations import run_ablations
    from tracecal.analysis.selective import run_selective
    from tracecal.cli.app import app
    from tracecal.testing import write_synthetic_run

    run = write_synthetic_run(tmp_path / "r", tasks=("triviaqa",), n_per_task=40)
    with pytest.raises(ValidationError) as python:
        run_ablations(run, seed=-1)
    cli = CliRunner().invoke(app, ["ablate", str(run), "--seed", "-1"])
    assert cli.exit_code == 2 and not (run / "ablations.json").exists()
    doc = json.loads((run / "config.json").read_text())
    doc["config"]["seed"] = -1
    (run / "config.json").write_text(json.dumps(doc))
    with pytest.raises(ValidationError) as stored:
        run_selective(run)
    file_cli = CliRunner().invoke(app, ["selective", str(run)])
    assert file_cli.exit_code == 2 and not (run / "selective.json").exists()
    messages = [str(python.value), " ".join(cli.output.split()), str(stored.value), " ".join(file_cli.output.split())]
    names = ["seed", "--seed", f"config.json of {run}: seed", f"config.json of {run}: seed"]
    assert _same_message(messages, names) == " must be a whole number in [0, 4294967295], got -1"


def test_stop_on_risk_gets_one_message_from_python_the_cli_and_a_json_field() -> None:
    import pydantic
    from typer.testing import CliRunner

    from tracecal.cli.app import app
    from tracecal.serve.config import ServeConfig
    from tracecal.serve.errors import validation_detail
    from tracecal.serve.schemas import ChatCompletionRequest

    with pytest.raises(ValidationError) as python:
        ServeConfig(stop_on_risk=2)
    cli = CliRunner().invoke(app, ["serve", "--no-model", "--stop-on-risk", "2"])
    assert cli.exit_code == 2
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stop_on_risk": 2}
    with pytest.raises(pydantic.ValidationError) as field:
        ChatCompletionRequest.model_validate(body)
    messages = [str(python.value), " ".join(cli.output.split()), validation_detail(field.value.errors())[0]["msg"]]
    rest = _same_message([m.replace("2.0", "2") for m in messages], ["stop_on_risk", "--stop-on-risk", "stop_on_risk"])
    assert rest == " must be a finite number in [0, 1] or None, got 2"
