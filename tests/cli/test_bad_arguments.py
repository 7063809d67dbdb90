"""Every `tracecal` command, given a bad argument, exits with status 2 and one line naming what to fix: no
traceback, and rich markup in the message escaped (a path holding ``[red]x[/red]`` is printed as it is).

The commands are listed from the typer app itself, so a new command without a case here fails
`test_every_command_has_a_case`. Each bad argument is refused before any model is loaded.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tracecal.cli.app import app

MARKUP = "[red]x[/red]"

#: command → (arguments, the text the one-line message must hold); ``{bad}`` is a missing path with markup in its
#: name, ``{tmp}`` an empty temporary folder.
CASES: dict[str, tuple[list[str], str]] = {
    "generate": (["--prompts", "{bad}.jsonl", "--out", "{tmp}/t.parquet"], "prompts file not found: {bad}.jsonl"),
    "score": (["{bad}.parquet"], "traces file not found: {bad}.parquet"),
    "score-answers": (["{bad}.jsonl", "--out", "{tmp}/s.parquet"], "answers file not found: {bad}.jsonl"),
    "fit-calibrator": (
        ["{bad}.parquet", "--labels", "{tmp}/l.csv", "--out", "{tmp}/c.json"],
        "traces file not found: {bad}.parquet",
    ),
    "evaluate": (["--run-dir", "{tmp}/run", "--metrics", MARKUP], f"unknown metric '{MARKUP}'"),
    "tasks": ([f"--{MARKUP}"], f"No such option: --{MARKUP}"),
    "estimators": ([f"--{MARKUP}"], f"No such option: --{MARKUP}"),
    "passes": ([f"--{MARKUP}"], f"No such option: --{MARKUP}"),
    "report": (["{bad}"], "run directory not found: {bad}"),
    "selective": (["{bad}"], "{bad} is not a run directory"),
    "learning-curve": (["{bad}"], "{bad} is not a run directory"),
    "secl": (["--stream", MARKUP, "--per-domain", "2"], f"no such file: '{MARKUP}'"),
    "serve": (["--abstain-from", "{bad}.json"], "guarantee file not found: {bad}.json"),
    "ablate": (["{bad}"], "{bad} is not a run directory"),
    "cross-model": (["A={bad}"], "{bad}"),
    "frontier": (["{bad}"], "{bad} is not a run directory"),
    "models": (["fetch", MARKUP], f"fetch which model? got '{MARKUP}'"),
}

#: More bad values (negative numbers, unknown names) for commands that take them.
MORE_CASES: list[tuple[str, list[str], str]] = [
    ("generate", ["--prompts", "{bad}.jsonl", "--out", "{tmp}/t.parquet", "--limit", "-1"], "--limit must be"),
    ("generate", ["--out", "{tmp}/t.parquet"], "give exactly one of --task or --prompts"),
    ("generate", ["--task", MARKUP, "--out", "{tmp}/t.parquet"], MARKUP),
    ("score-answers", ["{bad}.jsonl", "--out", "{tmp}/s.parquet", "--on-error", MARKUP], "--on-error must be one of"),
    ("score-answers", ["{bad}.txt", "--out", "{tmp}"], "{tmp} is a folder"),
    ("evaluate", ["--run-dir", "{tmp}/run", "--threads", "-2"], "--threads must be a whole number in [1, 4096]"),
    ("evaluate", ["--run-dir", "{tmp}/run", "--limit", "-5"], "limit must be"),
    ("evaluate", ["--run-dir", "{tmp}/none", "--score-only", "--ray"], "{tmp}/none is not a run directory"),
    ("evaluate", ["--run-dir", "{tmp}/run", "--backend", "nope"], "backend must be one of auto, hf, llamacpp"),
    (
        "evaluate",
        ["--run-dir", "{tmp}/run", "--embedder-dtype", MARKUP],
        f"embedder-dtype must be one of auto, float32, bfloat16, got '{MARKUP}'",
    ),
    ("evaluate", ["--run-dir", "{tmp}", "--backend", "llamacpp", "--dtype", "bfloat16"], "--dtype applies to the HF"),
    ("selective", ["{bad}", "--splits", "-1"], "--splits must be a whole number in [1, 10000], got -1"),
    ("selective", ["{bad}", "--splits", "1000000000"], "--splits must be a whole number in [1, 10000]"),
    ("evaluate", ["--run-dir", "{tmp}/run", "--seeds", "1000000000"], "must be a whole number in [1, 10000]"),
    ("evaluate", ["--run-dir", "{tmp}/run", "--n-boot", "1000000000"], "must be a whole number in [0, 100000]"),
    ("ablate", ["{tmp}", "--seeds", "1000000000"], "--seeds must be a whole number in [1, 10000], got 1000000000"),
    ("learning-curve", ["{bad}", "--sizes", "10,x"], "--sizes must be comma-separated whole numbers"),
    ("secl", ["--per-domain", "-1"], "per_domain must be"),
    ("secl", ["--stream", "triviaqa,svamp,triviaqa", "--per-domain", "1"], "names the domain 'triviaqa' twice"),
    ("secl", ["--set", f"{MARKUP}=1"], f"unknown SECLConfig field '{MARKUP}'"),
    ("secl", ["--backend", "llamacpp"], "SECL runs on the HF backend only"),
    ("secl", ["--backend", MARKUP], f"--backend must be one of auto, hf, llamacpp, got '{MARKUP}'"),
    ("secl", ["--target", MARKUP], "target must be one of norm_ptrue, ptrue, trace, trace_rank, oracle"),
    ("secl", ["--reset-at", MARKUP], f"reset_at must be one of update, shift, got '{MARKUP}'"),
    ("secl", ["--reset-at", "shift"], "reset_at='shift' needs accumulate=False (--reset)"),
    ("secl", ["--reset", "--reset-at", "shift", "--gate", "always"], "only the detector sees shifts"),
    ("secl", ["--target", "trace", "--scope", "all"], "target='trace' needs scope='confidence'"),
    ("secl", ["--domain-order", f"1,{MARKUP}"], "--domain-order must name each of the stream's 4 domains"),
    ("secl", ["--domain-order", "1,1,2,3"], "got '1,1,2,3'"),
    ("secl", ["--update-threshold", "-0.1"], "update_threshold must be a finite number ≥ 0"),
    ("secl", ["--ph-lambda", "0"], "ph_lambda must be a finite number > 0, got 0.0"),
    ("secl", ["--lora-rank", "0"], "lora_r must be a whole number ≥ 1, got 0"),
    ("serve", ["--max-batch", "-1"], "--max-batch must be"),
    ("serve", ["--threads", "0"], "--threads must be a whole number in [1, 4096], got 0"),
    ("serve", ["--calibrator", "{bad}.json", "--no-model"], "{bad}.json"),
    ("serve", ["--tokenizer", MARKUP], "--tokenizer goes with --upstream"),
    ("serve", ["--upstream", "http://127.0.0.1:9/v1", "--tokenizer", "{bad}"], "could not load the tokenizer of"),
    ("secl", ["--save-adapter", "/dev/null"], "--save-adapter /dev/null is not a folder"),
    ("report", ["{tmp}", "--estimators", MARKUP], "{tmp}"),
    ("ablate", ["{tmp}", "--seeds", "0"], "--seeds must be a whole number in [1, 10000], got 0"),
    ("ablate", ["{tmp}", "--groups", MARKUP], f"unknown ablation group '{MARKUP}'"),
    ("cross-model", [MARKUP], f"expected LABEL=RUN_DIR (e.g. Qwen2.5-1.5B=runs/qwen), got '{MARKUP}'"),
    ("cross-model", ["A={bad}", "A={tmp}"], "label 'A' is given twice (A={bad}, A={tmp}): one label per model"),
    ("models", [MARKUP], f"unknown action '{MARKUP}'"),
]


def _commands() -> list[str]:
    group = typer.main.get_command(app)
    return list(group.commands)  # type: ignore[attr-defined]  # the app is a click Group


def _fill(text: str, tmp: Path) -> str:
    return text.format(bad=tmp / MARKUP, tmp=tmp)


def _check(command: str, args: list[str], needle: str, tmp_path: Path) -> None:
    """Run ``tracecal COMMAND ARGS``: exit 2, no traceback, and exactly one line holding ``needle`` (markup and
    all: it was escaped), which is the ``error:`` line (or, for click's usage errors, the line of its panel)."""
    r = CliRunner().invoke(app, [command, *[_fill(a, tmp_path) for a in args]])
    out, want = r.output, _fill(needle, tmp_path)
    assert r.exit_code == 2, (command, r.exit_code, out, r.exception)
    assert "Traceback" not in out and isinstance(r.exception, SystemExit), out
    lines = [line for line in out.splitlines() if want in line]
    assert len(lines) == 1, f"{command}: {want!r} not on one line of:\n{out}"
    if "No such option" in want:
        return  # click's usage error (its usage line, a hint, the message in a panel)
    assert [line for line in out.splitlines() if line.strip()] == lines, out  # one line, nothing else
    assert lines[0].startswith("error: "), out


def test_every_command_has_a_case() -> None:
    assert sorted(_commands()) == sorted(CASES), "add a bad-argument case for each new command"


@pytest.mark.parametrize("command", sorted(CASES))
def test_a_bad_argument_exits_2_with_one_escaped_line(command: str, tmp_path: Path) -> None:
    args, needle = CASES[command]
    _check(command, args, needle, tmp_path)


@pytest.mark.parametrize(("command", "args", "needle"), MORE_CASES)
def test_more_bad_values_exit_2_with_one_line(command: str, args: list[str], needle: str, tmp_path: Path) -> None:
    _check(command, args, needle, tmp_path)
