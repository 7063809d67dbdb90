"""Fixtures of the CLI tests: the gateway's fake backend and fitted calibrator (defined in tests/serve)."""

from tests.serve.conftest import calibrator, fake

__all__ = ["calibrator", "fake"]
