"""Run an OpenAI-compatible server as a child process on 127.0.0.1 for the length of a ``with`` block.

One owner of what llama.cpp's and vLLM's launchers share: pick a free port, start the command, poll
``GET {url}/models`` until the served name is listed (or the process exits, or the deadline passes), yield
the ``/v1`` URL, then terminate the process (SIGTERM, then SIGKILL after ``grace`` seconds).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from tracecal.errors import TracecalError

__all__ = ["ServerExitedError", "ServerTimeoutError", "free_port", "served_process"]

POLL_S = 0.2  # readiness poll interval (s)


class ServerExitedError(TracecalError, RuntimeError):
    """A server process exited before it was ready."""


class ServerTimeoutError(TracecalError, TimeoutError):
    """A server process did not become ready within its timeout."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _lists(url: str, name: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/models", timeout=2) as r:
            return any(m.get("id") == name for m in json.load(r).get("data", []))
    except (urllib.error.URLError, OSError, ValueError):
        return False


@contextlib.contextmanager
def served_process(
    cmd: Sequence[str],
    port: int,
    name: str,
    what: str = "server",
    timeout: float = 180.0,
    log: Any = subprocess.DEVNULL,
    env: Mapping[str, str] | None = None,
    grace: float = 10.0,
) -> Iterator[str]:
    """Start ``cmd`` (which must serve on 127.0.0.1:``port``); yield ``http://127.0.0.1:PORT/v1`` once
    ``GET /v1/models`` lists ``name``.

    Raises `ServerExitedError` (a RuntimeError) if the process exits first (with its exit code and the command)
    and `ServerTimeoutError` (a TimeoutError) if
    it is not ready within ``timeout`` seconds; the process is stopped in every case. ``env`` is added to
    this process's environment.
    """
    proc = subprocess.Popen(list(cmd), stdout=log, stderr=log, env={**os.environ, **(env or {})})
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + timeout
        while not _lists(url, name):
            if proc.poll() is not None:
                raise ServerExitedError(f"the {what} exited with code {proc.returncode}: {' '.join(cmd)}")
            if time.monotonic() > deadline:
                raise ServerTimeoutError(f"the {what} did not answer GET {url}/models within {timeout:.0f} s")
            time.sleep(POLL_S)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
