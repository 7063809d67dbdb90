"""Before/after numbers from one command: the same benchmark code run on the tracecal of another commit.

`source_of` extracts ``src/tracecal`` of a git commit (``git archive``, read-only: the working tree and the
repository are not touched) into a temporary folder; `in_child` runs a benchmark script in a fresh Python process
whose ``PYTHONPATH`` puts that source first (the working tree's own ``src`` when ``src`` is None), reads the JSON
object the child prints as its last line of output, and adds the child's wall seconds and peak resident memory
(``ru_maxrss`` from ``wait4``, GiB).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def source_of(ref: str, dest: Path) -> Path:
    """``src`` of commit ``ref`` extracted under ``dest`` (created); returns the folder to put on ``PYTHONPATH``."""
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "src/tracecal"], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    return dest / "src"


def in_child(script: str, args: list[str], src: Path | None = None) -> dict[str, Any]:
    """Run ``python script args`` with ``src`` (default: this tree's) first on ``PYTHONPATH``; the JSON object of its
    last output line plus ``wall_s`` and ``peak_rss_gib``; ``{"failed": returncode, ...}`` when it fails."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(src or ROOT / "src"), str(ROOT / "benchmarks")]))
    env.setdefault("OMP_NUM_THREADS", "1")
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, script, *args], env=env, stdout=subprocess.PIPE, text=True)
    out = p.stdout.read() if p.stdout else ""
    _, status, usage = os.wait4(p.pid, 0)
    wall, code = time.perf_counter() - t0, os.waitstatus_to_exitcode(status)
    extra = {"wall_s": wall, "peak_rss_gib": usage.ru_maxrss / 2**20}
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if code or not lines:
        return {"failed": code, **extra}
    return json.loads(lines[-1]) | extra
