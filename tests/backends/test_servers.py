"""`tracecal.backends.servers`: a free port, and a child server that exits early or never answers."""

from __future__ import annotations

import socket
import sys

import pytest

from tracecal.backends.servers import ServerExitedError, ServerTimeoutError, free_port, served_process


def test_free_port_can_be_bound() -> None:
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_a_server_that_exits_is_an_error_naming_its_code() -> None:
    with pytest.raises(ServerExitedError, match="the toy server exited with code 3"):
        with served_process([sys.executable, "-c", "raise SystemExit(3)"], free_port(), "m", what="toy server"):
            pass


def test_a_server_that_never_answers_times_out_and_is_stopped() -> None:
    cmd = [sys.executable, "-c", "import time; time.sleep(60)"]
    with pytest.raises(ServerTimeoutError, match="did not answer GET"):
        with served_process(cmd, free_port(), "m", timeout=0.5, grace=2.0):
            pass
