"""Schemathesis over the gateway's OpenAPI schema: generated requests (valid and invalid) never get a 5xx, and every
error is in OpenAI's shape (``{"error": {"message", "type", "param", "code"}}``).

Tiny random model, small limits (answers of at most 4 tokens, short prompts) and a bounded number of examples
per operation and generation mode, so the run stays within seconds. Each operation's Hypothesis strategy is
driven directly (schemathesis' pytest fixture loader does not support this pytest).
"""

from __future__ import annotations

import os

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from tracecal.serve import ServeConfig, create_app

EXAMPLES = int(os.environ.get("TRACECAL_FUZZ_EXAMPLES", "15"))


@pytest.fixture(scope="module")
def gateway_schema(tiny_model):  # type: ignore[no-untyped-def]
    cfg = ServeConfig(
        max_tokens=4, default_max_tokens=4, max_prompt_tokens=256, max_prompts=4, max_batch=4, request_timeout=30
    )
    return schemathesis.openapi.from_asgi("/openapi.json", create_app(tiny_model, config=cfg))


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_server_errors(gateway_schema, mode) -> None:  # type: ignore[no-untyped-def]
    operations = [op.ok() for op in gateway_schema.get_all_operations()]
    labels = {op.label for op in operations}
    posts = ("/v1/chat/completions", "/v1/completions", "/v1/score-answers", "/score")
    assert {f"POST {p}" for p in posts} | {"GET /v1/models"} <= labels
    statuses: dict[int, int] = {}
    calls: dict[str, int] = {}
    for op in operations:

        @given(case=op.as_strategy(generation_mode=mode))
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
        )
        def run(case) -> None:  # type: ignore[no-untyped-def]
            r = case.call_and_validate(checks=[not_a_server_error])
            statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
            if r.status_code >= 400:  # every error in OpenAI's shape, framework errors included (issue #37)
                err = r.json().get("error")
                assert isinstance(err, dict) and {"message", "type", "param", "code"} <= set(err), (
                    r.status_code,
                    r.text,
                )
                assert isinstance(err["message"], str) and err["message"], r.text
            calls[case.operation.label] = calls.get(case.operation.label, 0) + 1

        try:
            run()
        except Unsatisfiable:  # an operation without inputs (GET /health) has no invalid request to make
            assert mode == GenerationMode.NEGATIVE and op.method.upper() == "GET", op.label
    assert statuses and max(statuses) < 500, statuses
    assert all(calls.get(f"POST {p}", 0) >= 5 for p in posts), calls
    if mode == GenerationMode.POSITIVE:
        assert statuses.get(200, 0) >= 10, statuses  # valid requests do get answers, not only refusals
