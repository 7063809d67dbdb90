"""The SECL fixtures of tests/secl/ (a small stream on the random-weight ``tiny_model``, its frozen pass and an
always-open run), for the tables read from a real SECL result file."""

from tests.secl.conftest import always_run, frozen, stream

__all__ = ["always_run", "frozen", "stream"]
