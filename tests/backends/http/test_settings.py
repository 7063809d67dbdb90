"""`tracecal.backends.http.settings`: one checked, frozen `HTTPSettings` — every setting refused by name when bad,
normalised once, changed only by a checked copy, and the one object `HTTPModel` holds."""

from __future__ import annotations

import dataclasses

import pytest

from tracecal.backends.http import HTTPModel, HTTPSettings
from tracecal.backends.topk import DEFAULT_TOPK_ESTIMATOR
from tracecal.errors import ValidationError


def test_settings_are_checked_and_normalised_once() -> None:
    s = HTTPSettings("http://h:1/v1/", context_length=4096, extra_body={"a": 1})
    assert (s.base_url, s.context_length, s.extra_body, s.entropy_estimator) == (
        "http://h:1/v1",
        4096,
        {"a": 1},
        DEFAULT_TOPK_ESTIMATOR,
    )
    assert s.requested_logprobs == 20 and dataclasses.replace(s, full_distribution=True).requested_logprobs == 100_000
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.chat = False  # type: ignore[misc]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"base_url": "ftp://x"}, "base_url must be an http"),
        ({"base_url": "http://u:k@x/v1"}, "must not contain credentials"),
        ({"vocab_size": 0}, "vocab_size"),
        ({"top_logprobs": -1}, "top_logprobs"),
        ({"full_distribution": 1}, "full_distribution must be True or False"),
        ({"entropy_estimator": "guess"}, "entropy_estimator must be one of"),
        ({"max_concurrency": 0}, "max_concurrency"),
        ({"context_length": 0}, "context_length"),
        ({"raw_prompts": "yes"}, "raw_prompts must be True or False"),
        ({"timeout": 0}, "timeout must be a number of seconds > 0"),
        ({"backoff": -1}, "backoff must be a number of seconds ≥ 0"),
        ({"max_retries": -1}, "max_retries"),
    ],
)
def test_a_bad_setting_is_refused_by_name(bad: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        HTTPSettings(**({"base_url": "http://x/v1"} | bad))  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match=message):  # the model refuses it alike, through its settings
        HTTPModel(**({"base_url": "http://x/v1"} | bad))  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match=message):  # and so does a changed copy
        dataclasses.replace(HTTPSettings("http://x/v1"), **bad)  # type: ignore[arg-type]


def test_the_model_holds_one_settings_object_and_reads_it() -> None:
    m = HTTPModel("http://x/v1", model="m", top_logprobs=5, max_concurrency=3, chat=False)
    s = m.settings
    assert (m.base_url, m.top_logprobs, m.batch_size, m.max_concurrency, m.chat) == (s.base_url, 5, 3, 3, False)
    assert m.model_id == "m" and m.http.timeout == s.timeout and m.http.max_retries == s.max_retries
    m.chat = True  # the evaluation sets it: a changed copy, the rest kept
    assert m.settings.chat and m.settings == dataclasses.replace(s, chat=True)
    again = HTTPModel.from_settings(m.settings)
    assert again.settings == m.settings and again.model_id == "m"
