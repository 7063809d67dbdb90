"""A fuzzing harness over the command line (issue #37, item 6): every option and argument of every command, read
from the typer app itself (a new option is covered without editing this file), fed boundary and absurd values.

For each value the command must end with exit status 2 and one line naming the option (or the value), or exit 0,
or reach the point where its work starts; never a traceback, never a raw control character on the terminal, and
nothing written when it refuses. Work never starts for real: the entry points that load a model, evaluate, train
SECL, serve or fetch (`WORK`) are replaced by a sentinel that raises `Reached`, so only the validation path runs.
A value of an always-invalid class (NaN or ±∞ for a number, a negative count, text that is no number) must be
refused before that point.

``TRACECAL_FUZZ_EXAMPLES`` sets the examples per parameter (default 6; docs/reliability.md reports a larger run).
"""

from __future__ import annotations

import math
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
import typer
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests.fuzzing import fuzz_settings
from tracecal.cli.app import app
from tracecal.cli.common import safe_text

EXAMPLES = int(os.environ.get("TRACECAL_FUZZ_EXAMPLES", "6"))

#: The entry points where a command's work starts: replaced by a sentinel for every example.
WORK = (
    "tracecal.backends.load_model",
    "tracecal.evaluation.run.evaluate",
    "tracecal.serve.app.run",
    "tracecal.serve.proxy.proxy_backends",
    "tracecal.secl.run.run_secl",
    "tracecal.backends.catalogue.NamedModel.fetch",
)

#: Integer options that may be negative (none: every count, size, seed and port is ≥ 0).
NEGATIVE_OK: set[tuple[str, str]] = set()

#: A raw control character a terminal may act on (the newline of a line break aside).
RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


class Reached(Exception):
    """A command got past its validation to the work (a model load, an evaluation, a server)."""


def _sentinel(*args: Any, **kwargs: Any) -> Any:
    raise Reached


#: The app as click sees it, built once (typer builds it anew on every ``CliRunner.invoke``: a second each).
GROUP = typer.main.get_command(app)


def _commands() -> dict[str, Any]:
    return dict(GROUP.commands)  # type: ignore[attr-defined]  # the app is a click Group


def _kind(param: Any) -> Any:
    return param.type_descriptor.annotation  # typer's: ``int | None`` is ``int``


#: The values `_base_args` gives the required parameters (an error naming one is about them, not the fuzzed value).
BASE_VALUES = ("missing-input", "missing-run", "out.parquet")
#: Commands whose required inputs are a rule between options rather than required parameters.
BASE_ARGS = {
    "generate": ["--out", "out.parquet", "--prompts", "missing-input.jsonl"],
    "fit-calibrator": ["missing-input.parquet", "--out", "out.json", "--labels", "missing-input.csv"],
    "score-answers": ["missing-input.jsonl", "--out", "out.parquet"],
    "evaluate": ["--run-dir", "run"],
    "secl": ["--data-dir", "missing-input"],
}


def _base_args(command: str, params: list[Any]) -> list[str]:
    """Arguments that make ``command`` parse: each required parameter given a harmless value (an input that does
    not exist, an output in the empty working folder)."""
    args: list[str] = []
    for p in params:
        if not p.required:
            continue
        value = "A=missing-run" if p.name == "runs" else "missing-input" if p.param_type_name == "argument" else None
        if p.param_type_name == "argument":
            args.append(value or "missing-input")
        else:
            suffix = {"out": "out.parquet"}.get(p.name, "x")
            args += [p.opts[0], suffix]
    return list(BASE_ARGS.get(command, args))


def _cases() -> list[tuple[str, str]]:
    """(command, parameter) for every parameter that takes a value (flags take none), from the app."""
    return [
        (name, p.name)
        for name, cmd in sorted(_commands().items())
        for p in cmd.params
        if not getattr(p, "is_flag", False) and p.name not in ("help",)
    ]


CONTROL = ["\x1b[2J", "\x1b]0;owned\x07", "a\x9bb", "\u202eevil", "x\ry", "\t"]
NUMBER_TEXT = ["", " ", "abc", "1,2", "0x10", "1_0", "--", "١"]
INTS = ["-1", "0", "-0", "1", "2", "-100000000000000000000", "100000000000000000000", "1e3", "1.5"]
FLOATS = ["nan", "NaN", "inf", "-inf", "1e309", "-1", "0", "-0.0", "1e-320", "0.5", "1", "1e30"]
TEXTS = ["", " ", ",", ",,", "a,a", "x" * 5000, "nan", "-1", "0", "[red]x[/red]", "../..", "a=b=c", "="]
PATHS = ["", ".", "/", "/dev/null", "/dev/zero", "missing/x.json", "afile/x.parquet", "afile", "dir"]


def values(kind: Any) -> st.SearchStrategy[str]:
    """Boundary and absurd values for a parameter of Python type ``kind`` (as the command line types them)."""
    controls = st.sampled_from(CONTROL)
    if kind is int:
        return st.one_of(st.sampled_from(INTS + NUMBER_TEXT), st.integers().map(str), st.floats().map(repr), controls)
    if kind is float:
        return st.one_of(st.sampled_from(FLOATS + NUMBER_TEXT), st.floats().map(repr), controls)
    if kind is Path:
        return st.one_of(st.sampled_from(PATHS), controls, st.text(max_size=20))
    return st.one_of(st.sampled_from(TEXTS), controls, st.text(max_size=30))


def always_invalid(kind: Any, raw: str) -> bool:
    """A value no numeric option takes: text that is no number, NaN, ±∞ (a float too large is ∞)."""
    if kind not in (int, float):
        return False
    try:
        value = float(raw)
    except ValueError:
        return True
    if kind is int:  # typer reads a whole number written as a float ("1.0") as that number
        return not (math.isfinite(value) and value == int(value)) or value < 0
    return not math.isfinite(value)


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.fixture(scope="module")
def workspace() -> Any:
    """An empty working folder (with a plain file ``afile`` and a folder ``dir``), the `WORK` entry points
    replaced by the sentinel; the folder and the patches last the module."""
    mp = pytest.MonkeyPatch()
    root = Path(tempfile.mkdtemp(prefix="tracecal-fuzz-"))
    for target in WORK:
        mp.setattr(target, _sentinel)
    mp.setattr("typer.testing._get_command", lambda _app: GROUP)
    mp.chdir(root)
    yield root
    mp.undo()
    shutil.rmtree(root, ignore_errors=True)


def _reset(root: Path) -> set[str]:
    for p in root.iterdir():
        shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    (root / "afile").write_text("a plain file\n")
    (root / "dir").mkdir()
    return _tree(root)


def _names(param: Any) -> list[str]:
    """The ways a message may name ``param``: each of its flags, its name with dashes or underscores."""
    name = param.name.rstrip("_")
    return [*param.opts, name, name.replace("_", "-"), name.replace("_", " ")]


def _names_value(raw: str, text: str) -> bool:
    """Whether ``text`` names the value ``raw`` or one of its comma- or ``=``-separated parts (escaped as the
    terminal shows it) where a word starts: ``got -1``, ``'a'``, ``/ is a folder``, ``./triviaqa/...``."""
    parts = {raw.strip(), raw.split("=", 1)[-1], os.path.abspath(raw or "."), *re.split("[,=]", raw)}
    if not raw:  # typer reads an empty path as the current folder
        parts.add(".")
    words = {w for p in parts for w in (p, p.strip()) if w}  # a path of only a tab is shown as \t
    shown = {form for w in words for form in (safe_text(w), repr(w)[1:-1]) if form.strip()}
    return any(re.search(r"(?:^|[\s'\"(=:])" + re.escape(form), text) for form in shown)


def check_run(command: str, param: Any, raw: str, root: Path) -> str:
    """Run ``tracecal COMMAND`` with ``param`` set to ``raw`` (the rest: `_base_args`); assert what the user sees.
    Returns the outcome: ``refused``, ``ok`` or ``reached``."""
    cmd = _commands()[command]
    before = _reset(root)
    args = _base_args(command, cmd.params)
    if param.param_type_name == "argument":
        required = [p for p in cmd.params if p.param_type_name == "argument"]
        args = [raw if p is param else a for p, a in zip(required, args, strict=False)] + args[len(required) :]
    else:
        flag = param.opts[0]
        if flag in args:
            i = args.index(flag)
            args = args[:i] + args[i + 2 :]
        args += [flag, raw]
    r = CliRunner().invoke(app, [command, *args])
    out = r.output
    where = f"tracecal {command} {args!r} → exit {r.exit_code}: {out[-600:]!r}"
    assert "Traceback" not in out, where
    assert not RAW_CONTROL.search(out), f"raw control character: {where}"
    invalid = always_invalid(_kind(param), raw) and (command, param.name) not in NEGATIVE_OK
    if isinstance(r.exception, Reached):
        assert not invalid, f"accepted: {where}"
        return "reached"
    assert r.exit_code in (0, 2) and (r.exception is None or isinstance(r.exception, SystemExit)), (
        where,
        r.exception,
    )
    if r.exit_code == 0:
        assert not invalid, f"accepted: {where}"
        return "ok"
    assert _tree(root) == before, f"wrote {_tree(root) - before} while refusing: {where}"
    text = out.replace("\n", " ")  # (not str.split: a path may hold a no-break space)
    if any(n in text for n in _names(param)) or _names_value(raw, text):
        return "refused"
    # refused for one of the base arguments (an input that does not exist): the value itself passed its check,
    # which an always-invalid value must not (options are checked before any input is read)
    named = f"the message names neither {param.opts} nor the value: {where}"
    assert not invalid and any(b in text for b in BASE_VALUES), named
    return "passed"


@pytest.mark.parametrize(("command", "name"), _cases())
def test_every_option_refuses_absurd_values_by_name(command: str, name: str, workspace: Path) -> None:
    param = next(p for p in _commands()[command].params if p.name == name)

    @fuzz_settings(EXAMPLES)
    @given(raw=values(_kind(param)))
    def run(raw: str) -> None:
        check_run(command, param, raw, workspace)

    run()


def test_the_harness_covers_every_command_and_option() -> None:
    cases = _cases()
    assert {c for c, _ in cases} >= set(_commands()) - {"tasks", "estimators", "passes"}
    assert ("evaluate", "cal_frac") in cases and ("serve", "port") in cases and ("score", "traces_path") in cases
    assert len(cases) > 150


def test_click_usage_errors_show_control_characters_escaped() -> None:
    """An unknown command or option holding ``ESC[2J`` (click's own usage errors, not a command's) is echoed
    escaped: the terminal is never told to clear the screen."""
    for args in (["sc\x1b[2Jore"], ["score", "--\x1b]0;owned\x07"], ["models", "fetch", "\x1b[31m"]):
        r = CliRunner().invoke(app, args)
        assert r.exit_code == 2 and not RAW_CONTROL.search(r.output), repr(r.output)
        assert "\\x1b" in r.output, r.output
