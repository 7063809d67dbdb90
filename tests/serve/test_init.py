"""`tracecal.serve`: the package's two names are imported lazily (the command line starts without FastAPI)."""

from __future__ import annotations

import pytest

import tracecal.serve
from tracecal.serve.app import create_app
from tracecal.serve.config import ServeConfig


def test_the_lazy_exports() -> None:
    assert tracecal.serve.create_app is create_app and tracecal.serve.ServeConfig is ServeConfig
    assert sorted(tracecal.serve.__all__) == ["ServeConfig", "create_app"]
    with pytest.raises(AttributeError, match="has no attribute 'Gateway'"):
        tracecal.serve.Gateway  # noqa: B018
