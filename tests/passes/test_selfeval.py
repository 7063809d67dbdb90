"""`tracecal.passes.selfeval`: P(True), verbalised confidence, their number distributions and parsing."""

from __future__ import annotations

import numpy as np
import pytest

from tracecal.errors import ValidationError
from tracecal.passes.selfeval import (
    SelfEvalUnavailableError,
    confidence_bins,
    number_distribution,
    p_true,
    parse_confidence,
    verbalized_confidence,
    verbalized_prompt_ids,
)


def test_parse_confidence() -> None:
    assert parse_confidence("85%") == 0.85 and parse_confidence("0.85") == 0.85
    assert parse_confidence("85/100") == 0.85 and parse_confidence("250") == 1.0
    assert np.isnan(parse_confidence("no idea"))


def test_confidence_bins_collapse_101_numbers() -> None:
    dist = np.zeros((1, 101))
    dist[0, [5, 55, 100]] = [0.2, 0.3, 0.5]
    np.testing.assert_allclose(confidence_bins(dist, 10)[0], [0.2, 0, 0, 0, 0, 0.3, 0, 0, 0, 0.5])


def test_mismatched_lengths_are_refused(tiny_model) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValidationError, match="p_true needs one answer per question"):
        p_true(tiny_model, ["q1", "q2"], ["a"])
    with pytest.raises(ValidationError, match="verbalized_confidence needs one answer per question"):
        verbalized_confidence(tiny_model, ["q1"], [])
    assert issubclass(SelfEvalUnavailableError, RuntimeError)


def test_p_true_and_verbalized_on_the_tiny_model(tiny_model) -> None:  # type: ignore[no-untyped-def]
    pt = p_true(tiny_model, ["Capital of France?", "2+2?"], ["Paris", "5"])
    assert pt.shape == (2,) and np.all((pt > 0) & (pt < 1))
    v, dist, mass = verbalized_confidence(tiny_model, ["Capital of France?"], ["Paris"], batch_size=1)
    np.testing.assert_allclose(dist.sum(1), 1.0, rtol=1e-6)
    assert 0 <= v[0] <= 1 and 0 <= mass[0] <= 1
    ids = verbalized_prompt_ids(tiny_model, "Capital of France?", "Paris")
    d2, m2 = number_distribution(tiny_model, [ids])
    np.testing.assert_allclose(d2.double().numpy(), dist, rtol=1e-5, atol=1e-9)
