"""The extra-inference estimators read one value per answer, the stat named by their ``field``."""

from __future__ import annotations

import numpy as np
import pytest

from tracecal.estimators import REGISTRY, Inputs, MissingStatError, get_estimator, needs_of
from tracecal.estimators.extra import ExtraInference
from tracecal.traces.trace import TraceBatch


def test_p_true_and_verbalized_read_their_stat() -> None:
    batch = TraceBatch.from_lists([[0.1], [0.2]], [[0.3], [0.4]])
    x = Inputs(batch, p_true=[0.9, 0.2], verbalized=[0.5, 0.7])
    np.testing.assert_array_equal(get_estimator("p_true").score(x), [0.9, 0.2])
    np.testing.assert_array_equal(get_estimator("verbalized").score(x), [0.5, 0.7])
    for name in ("p_true", "verbalized"):
        cls = REGISTRY[name]
        assert issubclass(cls, ExtraInference) and cls.stats == frozenset({name}) and cls.family == "extra inference"
    assert needs_of(["p_true"]) == ["traces", "extra"]
    with pytest.raises(MissingStatError, match="extra"):
        get_estimator("p_true").score(Inputs(batch))
