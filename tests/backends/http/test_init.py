"""`tracecal.backends.http`: the package's public names, importable from the package as before it was one."""

from __future__ import annotations

import tracecal.backends.http as http
from tracecal.backends import HTTPModel as lazy_http_model
from tracecal.backends.http.client import HTTPBackendError
from tracecal.backends.http.model import HTTPModel
from tracecal.backends.http.settings import HTTPSettings


def test_the_public_names_are_the_modules_ones() -> None:
    assert http.HTTPModel is HTTPModel is lazy_http_model
    assert http.HTTPSettings is HTTPSettings and http.HTTPBackendError is HTTPBackendError
    assert all(getattr(http, name) is not None for name in http.__all__)
