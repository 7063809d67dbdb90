"""Every code block of the README runs as written, in order, in a new shell of the environment the set-up made
(PATH as the README says: `source .venv/bin/activate`), in a fresh folder whose ``runs/main`` stands in for the main
job's run (a synthetic run scored by the real protocol, recorded as the README's model and this machine's default
dtype). Placeholders are made small (`SMALL`: fewer questions); the two commands themselves and the install line are
not run here (`NOT_HERE` says why). A block that fails fails the test with its output."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tracecal.testing import scored_synthetic_run

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SMALL = {r"--limit 100\b": "--limit 3", r"--per-domain 150\b": "--per-domain 2"}
NOT_HERE = {
    "bash scripts/run.sh": "the main job itself: timed from a fresh clone in docs/benchmarks.md",
    "bash scripts/test.sh": "the test command: this test runs inside it",
    'pip install -e ".[serve,llamacpp]"': "the set-up (scripts/setup.sh) installs the package with these extras",
}
MODEL = "qwen2.5-coder-1.5b"

pytestmark = [pytest.mark.slow, pytest.mark.integration]


def blocks(text: str) -> list[tuple[str, str]]:
    """The fenced code blocks of a Markdown text as (language, code), in order."""
    return [(m.group(1), m.group(2)) for m in re.finditer(r"```(\w+)\n(.*?)```", text, re.S)]


def runnable(code: str) -> str:
    """A block as the test runs it: the lines of `NOT_HERE` left out, the placeholders of `SMALL` made small."""
    lines = [ln for ln in code.splitlines() if not any(ln.strip().startswith(k) for k in NOT_HERE)]
    out = "\n".join(lines)
    for pattern, small in SMALL.items():
        out = re.sub(pattern, small, out)
    return out


def test_the_readme_blocks_are_what_the_test_knows() -> None:
    found = blocks(README.read_text())
    assert {lang for lang, _ in found} <= {"bash", "python"}, "a README block in a language this test does not run"
    text = "\n".join(code for _, code in found)
    for line in NOT_HERE:
        assert line in text, f"NOT_HERE names {line!r}, which the README no longer has"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("readme")
    (d / ".venv").symlink_to(
        ROOT / ".venv"
    )  # the folder stands in for the clone: `source .venv/bin/activate` as written
    # the main job's run as llama.cpp records it: the model's name, no dtype (the GGUF's own weights)
    scored_synthetic_run(d / "runs" / "main", {"triviaqa": (300, 0.3)}, model=MODEL, dtype=None)
    return d


def _run(lang: str, code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "COV_"))}
    env |= {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": env.get("OMP_NUM_THREADS", "1")}
    if lang == "python":
        (cwd / "block.py").write_text(code)
        script = "source .venv/bin/activate && python block.py"
    else:  # a new shell; background jobs (the gateway) are stopped when the block ends
        script = "set -eo pipefail\nsource .venv/bin/activate  # each new shell, as the README says\n"
        script += f"trap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n{code}"
    return subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=1500)


def test_every_readme_block_runs_as_written(folder: Path) -> None:
    for i, (lang, code) in enumerate(blocks(README.read_text())):
        code = runnable(code)
        if not code.strip():
            continue
        r = _run(lang, code, folder)
        assert r.returncode == 0, f"README block {i} ({lang}) failed:\n{code}\n--- output ---\n{r.stdout}\n{r.stderr}"
    assert (folder / "scored.parquet").is_file() and (folder / "runs" / "main" / "calibrator.json").is_file()
    assert (folder / "runs" / "try" / "report.html").is_file()
