"""SECL fixtures: a small stream (TriviaQA + ARC-Easy, 4 questions each) on the session's random-weight ``tiny_model``,
its frozen pass and an always-open run, computed once for the package."""

from __future__ import annotations

import pytest

from tests.secl.helpers import ALWAYS
from tracecal.secl import (
    build_stream,
    frozen_pass,
    run_secl,
)


@pytest.fixture(scope="package")
def stream():  # type: ignore[no-untyped-def]
    return build_stream("triviaqa,arc_easy", 4)


@pytest.fixture(scope="package")
def frozen(tiny_model, stream):  # type: ignore[no-untyped-def]
    return frozen_pass(tiny_model, stream, batch_size=8)


@pytest.fixture(scope="package")
def always_run(tiny_model, stream, frozen):  # type: ignore[no-untyped-def]
    return run_secl(tiny_model, stream, ALWAYS, frozen=frozen)
