"""Gateway fixtures: a fitted TRACE+ calibrator, a fake backend and a test client on both (no network)."""

from __future__ import annotations

import numpy as np
import pytest
from fastapi.testclient import TestClient

import tracecal
from tests.serve.helpers import FakeModel
from tracecal.serve import ServeConfig, create_app
from tracecal.traces.trace import TraceBatch


@pytest.fixture(scope="module")
def calibrator():  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(0)
    b = TraceBatch.from_lists([rng.random(5) for _ in range(40)], [rng.random(5) * 2 for _ in range(40)])
    return tracecal.TracePlus().fit(b, rng.integers(0, 2, 40))


@pytest.fixture()
def fake() -> FakeModel:
    return FakeModel()


@pytest.fixture()
def client(fake, calibrator):  # type: ignore[no-untyped-def]
    with TestClient(create_app(fake, calibrator, ServeConfig(abstain_below=0.5, max_prompts=3))) as c:
        yield c
