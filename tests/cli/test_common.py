"""What every command shares (tracecal.cli.common): `fail`, `user_errors`, `fmt_num`, `split_names`."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from tracecal.cli.app import app
from tracecal.cli.common import MISSING, fail, fmt_num, one_line, split_names, user_errors
from tracecal.errors import TracecalError, ValidationError


def _app(error: BaseException | None) -> typer.Typer:
    app = typer.Typer()

    @app.command("boom")
    @user_errors
    def boom(path: str = "x") -> None:
        """Raise ``error`` (if any), else fail on ``path``."""
        if error is not None:
            raise error
        fail(f"cannot read {path}")

    app.command("noop")(lambda: None)
    return app


@pytest.mark.parametrize(
    "error",
    [
        TracecalError("bad [red]thing[/red]"),
        ValidationError("bad [red]thing[/red]"),
        FileNotFoundError("bad [red]thing[/red]"),
        OSError("bad [red]thing[/red]"),
        ValueError("bad [red]thing[/red]"),
        RuntimeError("bad [red]thing[/red]"),
        ImportError("bad [red]thing[/red]"),
    ],
)
def test_user_errors_exit_2_with_one_escaped_line(error: BaseException) -> None:
    r = CliRunner().invoke(_app(error), ["boom"])
    assert r.exit_code == 2 and "Traceback" not in r.output
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert lines == ["error: bad [red]thing[/red]"], r.output


def test_running_out_of_memory_is_one_line_saying_what_to_do() -> None:
    """A request too large for the machine (``evaluate --seeds 1000000000`` was a MemoryError traceback before the
    bounds) ends as a user error: exit 2, one line."""
    r = CliRunner().invoke(_app(MemoryError()), ["boom"])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert (
        r.output.strip()
        == "error: out of memory (MemoryError): ask for less (a smaller --limit, --batch-size or --n-boot)"
    )


def test_other_exceptions_are_not_swallowed() -> None:
    r = CliRunner().invoke(_app(KeyError("k")), ["boom"])
    assert r.exit_code == 1 and isinstance(r.exception, KeyError)


def test_fail_escapes_and_puts_the_message_on_one_line() -> None:
    r = CliRunner().invoke(_app(None), ["boom", "--path", "[bold]a\n  b"])
    assert r.exit_code == 2 and r.output.strip() == "error: cannot read [bold]a b", r.output
    assert one_line("a\n   b\nc ") == "a b c"


def test_the_decorated_command_keeps_its_signature_and_help() -> None:
    r = CliRunner().invoke(_app(None), ["boom", "--help"])
    assert r.exit_code == 0 and "--path" in r.output and "Raise" in r.output


def test_fmt_num_shows_every_missing_number_the_same_way() -> None:
    assert fmt_num(0.12345) == "0.123" and fmt_num(0.12345, 4) == "0.1235" and fmt_num(np.float32(0.5), 2) == "0.50"
    assert fmt_num(0.256, 1, pct=True) == "25.6%" and fmt_num(3) == "3.000"
    for missing in (None, math.nan, np.nan, math.inf, -math.inf, "0.5", True):
        assert fmt_num(missing) == MISSING and fmt_num(missing, 1, pct=True) == MISSING


def test_split_names() -> None:
    assert split_names(" a, b,,c ") == ["a", "b", "c"]
    assert split_names(None) == [] and split_names("") == [] and split_names(" , ") == []


def test_refuse_input_as_output_sees_through_links_and_shard_folders(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import os
    from pathlib import Path

    from tracecal.cli.common import refuse_input_as_output

    data = tmp_path / "in.parquet"
    data.write_bytes(b"input")
    shards = tmp_path / "shards"
    shards.mkdir()
    (shards / "00000.parquet").write_bytes(b"shard")
    (shards / "notes.csv").write_bytes(b"not read by the command")
    sym, hard = tmp_path / "sym.parquet", tmp_path / "hard.parquet"
    sym.symlink_to(data)
    os.link(data, hard)
    for out in (data, sym, hard, tmp_path / "." / "in.parquet"):
        with pytest.raises(ValidationError, match=rf"--out {out} is the traces {data}: writing it would destroy"):
            refuse_input_as_output(out, "--out", [("traces", data)])
    with pytest.raises(ValidationError, match=r"--csv .*00000.parquet is the traces .*00000.parquet \(a file of"):
        refuse_input_as_output(shards / "00000.parquet", "--csv", [("traces", shards)])
    for out in (tmp_path / "new.json", shards / "notes.csv", Path(str(data) + ".bak")):
        refuse_input_as_output(out, "--out", [("traces", data), ("traces", shards), ("labels", None)])


@pytest.mark.parametrize(
    ("error", "line"),
    [
        (
            OSError(28, "No space left on device", "/o/c.json"),
            "error: cannot write /o/c.json: No space left on device; free some space and run the same command "
            "again (nothing was half-written)",
        ),
        (
            OSError(30, "Read-only file system", "/o/c.json"),
            "error: cannot write /o/c.json: Read-only file system; the folder is read-only or immutable: make it "
            "writable or choose another output path, then run again",
        ),
        (
            PermissionError(13, "Permission denied", "/o/c.json"),
            "error: /o/c.json: Permission denied; check that you may read it and write into its folder, or choose "
            "another output path",
        ),
        (FileNotFoundError(2, "No such file or directory", "/o/x"), "error: /o/x: No such file or directory"),
        (
            OSError(28, "Error writing bytes to file. Detail: [errno 28] No space left on device"),
            "error: No space left on device; free",
        ),
    ],
)
def test_os_errors_are_one_line_with_what_to_do(error: OSError, line: str) -> None:
    """The one mapping (`tracecal.errors.os_error_message`) for every command: no ``[Errno 28]`` and advice."""
    r = CliRunner().invoke(_app(error), ["boom"])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert " ".join(r.output.split()).startswith(line), r.output


HOSTILE = "\x1b[2J\x1b[31mred\x1b]0;owned title\x07\x9b1m\u202eevil\r\x00"


def test_safe_text_escapes_every_control_a_terminal_acts_on() -> None:
    from tracecal.cli.common import safe_text, shown

    out = safe_text(HOSTILE)
    assert out == "\\x1b[2J\\x1b[31mred\\x1b]0;owned title\\x07\\x9b1m\\u202eevil\\r\\x00"
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in out)
    assert safe_text("ünï — ok [x]") == "ünï — ok [x]" and shown("[red]a\x1b") == "\\[red]a\\x1b"
    assert safe_text("a\x1b\nb", newlines=True) == "a\\x1b\nb"


def test_tracecal_score_shows_hostile_answers_and_ids_escaped(tmp_path: Path) -> None:
    """Answers and ids holding ESC[2J, a colour and an OSC title were printed raw by `tracecal score` (terminal
    injection): now each control character is shown as its escape, on the table and on an error line alike."""
    from tests.traces.test_io import make_traces
    from tracecal.traces.io import save_traces

    traces = make_traces()
    traces[0].text, traces[0].id = "4" + HOSTILE, "id" + HOSTILE
    path = tmp_path / "t.parquet"
    save_traces(traces, path)
    r = CliRunner().invoke(app, ["score", str(path)])
    assert r.exit_code == 0, r.output
    assert "\x1b" not in r.output and "\x07" not in r.output and "\x9b" not in r.output and "\u202e" not in r.output
    assert "\\x1b[2J" in r.output and "\\x1b]0;owned" in r.output
    bad = tmp_path / ("x" + HOSTILE.replace("\x00", "") + ".parquet")  # a path holds no NUL
    r = CliRunner().invoke(app, ["score", str(bad)])
    assert r.exit_code == 2 and "\x1b" not in r.output and "traces file not found" in r.output, r.output


def test_no_cli_module_prints_user_data_around_the_one_escaping() -> None:
    """Every CLI module shows user data through `shown` / `safe_text`: none imports rich's markup escape itself."""
    import ast

    root = Path(__file__).resolve().parents[2] / "src" / "tracecal" / "cli"
    for path in root.glob("*.py"):
        if path.name == "common.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "rich.markup":
                raise AssertionError(f"{path.name} imports rich.markup: show user data with cli.common.shown")


@pytest.fixture
def bf16_cpu(monkeypatch):  # type: ignore[no-untyped-def]
    """This machine played as a CPU with bf16 matrix units and no GPU (what scripts/run.sh's machines have)."""
    import torch

    import tracecal.backends.runtime as runtime

    monkeypatch.setattr(runtime, "cpu_has_bf16", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    return runtime


def test_a_calibrator_fitted_on_bf16_answers_is_used_by_score_score_answers_and_serve_at_their_defaults(
    tmp_path, tiny_model, bf16_cpu
) -> None:  # type: ignore[no-untyped-def]
    """Issue #35: every command resolves ``--dtype auto`` by one rule (`tracecal.backends.runtime`). On a bf16 CPU the
    main job's run is bf16 (`EvalConfig.identity`), and so are the answers of ``generate``, ``score-answers`` and
    ``serve`` at their defaults: a calibrator fitted on bf16 answers is used by all of them, no
    ``--allow-foreign-calibrator``; traces made with an explicit ``--dtype float32`` are still refused."""
    import json

    from fastapi.testclient import TestClient

    from tracecal.cli.app import app
    from tracecal.cli.serve import serve_app
    from tracecal.evaluation.config import EvalConfig
    from tracecal.traces.io import load_traces

    model = tmp_path / "m"
    tiny_model.model.save_pretrained(model)
    tiny_model.tokenizer.save_pretrained(model)
    assert EvalConfig(["triviaqa"], model=str(model)).identity()["dtype"] == "bfloat16"  # what the main job records
    (tmp_path / "p.jsonl").write_text(
        "".join(json.dumps({"id": f"q{i}", "prompt": f"Q {i}?"}) + "\n" for i in range(8))
    )
    run = CliRunner()

    def ok(*args: str) -> str:
        r = run.invoke(app, [str(a) for a in args])
        assert r.exit_code == 0, r.output
        return " ".join(r.output.split())

    gen = ["generate", "--model", model, "--prompts", tmp_path / "p.jsonl", "--max-new-tokens", "3"]
    ok(*gen, "--out", tmp_path / "fit.parquet")
    assert {t.decoding["dtype"] for t in load_traces(tmp_path / "fit.parquet")} == {"bfloat16"}
    (tmp_path / "labels.csv").write_text("id,label\n" + "".join(f"q{i},{i % 2}\n" for i in range(8)))
    ok("fit-calibrator", tmp_path / "fit.parquet", "--labels", tmp_path / "labels.csv", "--out", tmp_path / "cal.json")
    assert json.loads((tmp_path / "cal.json").read_text())["provenance"]["dtype"] == "bfloat16"
    cal = ["--calibrator", tmp_path / "cal.json"]

    ok(*gen, "--out", tmp_path / "new.parquet")  # score: new answers at the defaults
    assert "--allow-foreign-calibrator" not in ok("score", tmp_path / "new.parquet", *cal)
    (tmp_path / "a.jsonl").write_text(json.dumps({"id": "a", "prompt": "Q 1?", "answer": "Paris"}) + "\n")
    ok("score-answers", tmp_path / "a.jsonl", "--model", model, *cal, "--out", tmp_path / "s.parquet")
    assert {t.decoding["dtype"] for t in load_traces(tmp_path / "s.parquet")} == {"bfloat16"}
    cmd = typer.main.get_command(app).commands["serve"]  # type: ignore[attr-defined]  # a click Group
    defaults = {p.name: p.default for p in cmd.params}
    with TestClient(serve_app(defaults | {"model": str(model), "calibrator": tmp_path / "cal.json"})) as c:
        assert c.get("/health").json()["dtype"] == "bfloat16"
        body = {"model": str(model), "messages": [{"role": "user", "content": "Q 1?"}], "max_tokens": 2}
        r = c.post("/v1/chat/completions", json=body)
        assert r.status_code == 200 and r.json()["choices"][0]["confidence"]["probability"] is not None, r.text

    # a real mismatch is still refused: float32 answers (asked for) against the bf16 calibrator
    ok(*gen, "--out", tmp_path / "fp32.parquet", "--dtype", "float32")
    refused = "was made on bfloat16 answers; the traces scored are float32 answers"
    for args in (
        ["score", tmp_path / "fp32.parquet", *cal],
        [
            "score-answers",
            tmp_path / "a.jsonl",
            "--model",
            model,
            *cal,
            "--out",
            tmp_path / "s2.parquet",
            "--dtype",
            "float32",
        ],
    ):
        r = run.invoke(app, [str(a) for a in args])
        assert r.exit_code == 2 and refused in " ".join(r.output.split()), r.output
    with pytest.raises(ValidationError, match="this server's weights are float32"):
        serve_app(defaults | {"model": str(model), "calibrator": tmp_path / "cal.json", "dtype": "float32"})


@pytest.mark.parametrize("command", ["generate", "score-answers", "evaluate", "serve", "secl"])
def test_every_command_that_loads_a_model_has_the_same_dtype_and_threads_options(command: str) -> None:
    from tracecal.cli.app import app
    from tracecal.cli.common import DtypeOpt, ThreadsOpt

    params = {p.name: p for p in typer.main.get_command(app).commands[command].params}  # type: ignore[attr-defined]
    for name, opt in (("dtype", DtypeOpt), ("threads", ThreadsOpt)):
        info = opt.__metadata__[0]
        assert params[name].help == info.help and params[name].opts == ["--" + name], (command, name)
    assert params["dtype"].default == "auto" and params["threads"].default is None


def test_bad_dtype_or_threads_are_refused_before_a_model_loads(monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import tracecal.backends as backends
    from tracecal.cli.app import app

    monkeypatch.setattr(backends, "load_model", lambda *a, **k: pytest.fail("the model must not load"))
    (tmp_path / "a.jsonl").write_text('{"prompt": "q", "answer": "a"}\n')
    for cmd in (["generate", "--task", "triviaqa"], ["score-answers", str(tmp_path / "a.jsonl")]):
        for opt, message in (
            (["--dtype", "int8"], "--dtype must be one of auto, float32, bfloat16, float16"),
            (["--threads", "0"], "--threads must be a whole number in [1, 4096], got 0"),
        ):
            r = CliRunner().invoke(app, [*cmd, "--out", str(tmp_path / "o.parquet"), *opt])
            assert r.exit_code == 2 and message in r.output, (cmd, r.output)


def test_every_command_hands_its_dtype_and_threads_to_the_loader(monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``--dtype`` / ``--threads`` reach `load_model` (``auto`` and the rule when not given); ``evaluate`` applies the
    threads for its whole run (every model and embedder it loads)."""
    import tracecal.backends as backends
    import tracecal.backends.runtime as runtime
    import tracecal.evaluation.run as run
    from tracecal.cli.app import app

    seen: list[dict[str, object]] = []

    def fake_load(*a: object, **k: object) -> object:
        seen.append(k)
        raise ValidationError("stop here")

    monkeypatch.setattr(backends, "load_model", fake_load)
    (tmp_path / "a.jsonl").write_text('{"prompt": "q", "answer": "a"}\n')
    out = ["--out", str(tmp_path / "o.parquet")]
    commands = {
        "generate": ["generate", "--prompts", str(tmp_path / "a.jsonl"), *out],
        "score-answers": ["score-answers", str(tmp_path / "a.jsonl"), *out],
        "serve": ["serve"],
        "secl": ["secl", "--stream", "triviaqa", "--per-domain", "1"],
    }
    for name, args in commands.items():
        for extra, want in (([], ("auto", "auto")), (["--dtype", "float32", "--threads", "3"], ("float32", 3))):
            r = CliRunner().invoke(app, [*args, *extra])
            assert r.exit_code == 2 and "stop here" in r.output, (name, r.output)
            got = (seen[-1].get("dtype", "auto"), seen[-1]["threads"])
            if name == "serve" and not extra:  # serve loads the dtype it compared calibrators with: auto resolved
                got = ("auto", got[1]) if got[0] == runtime.resolve_dtype("auto") else got
            assert got == want, (name, extra, seen[-1])
    applied: list[object] = []
    monkeypatch.setattr(runtime, "apply_threads", lambda t="auto": applied.append(t) or 1)
    monkeypatch.setattr(run, "evaluate", lambda *a, **k: None)  # nothing computed: the threads are set before
    for extra, want in (([], "auto"), (["--threads", "3"], 3)):
        r = CliRunner().invoke(app, ["evaluate", "--run-dir", str(tmp_path / "run"), "--no-score", *extra])
        assert r.exit_code == 0 and applied[-1] == want, r.output


def test_a_library_warning_on_the_command_line_is_one_line_without_source(capsys: pytest.CaptureFixture[str]) -> None:
    import warnings

    from typer.testing import CliRunner

    from tracecal.cli.app import app
    from tracecal.cli.common import show_warning

    assert CliRunner().invoke(app, ["tasks"]).exit_code == 0
    assert warnings.showwarning is show_warning  # every command installs it
    warnings.showwarning(UserWarning("file-csqa: beam pass incomplete\nnot scored"), UserWarning, "/x/run.py", 210)
    err = capsys.readouterr().err
    assert err.startswith("warning: file-csqa: beam pass incomplete") and "run.py" not in err
    assert err.count("\n") == 1
