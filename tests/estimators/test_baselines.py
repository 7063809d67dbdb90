"""The baselines: the paper's 19 in its order, registered after the TRACE family; the beam softmax scores."""

from __future__ import annotations

import numpy as np

from tracecal.estimators import PAPER_BASELINES, REGISTRY, Inputs, get_estimator
from tracecal.estimators.baselines import BeamSoftmax
from tracecal.traces.trace import TraceBatch


def test_the_paper_baselines_follow_the_trace_family_in_the_registry() -> None:
    names = list(REGISTRY)
    assert names[6 : 6 + len(PAPER_BASELINES)] == PAPER_BASELINES and len(PAPER_BASELINES) == 19


def test_beam_softmax_scores() -> None:
    beam = np.array([[0.0, -1.0, -2.0, -np.inf, -np.inf], [0.0, 0.0, 0.0, 0.0, 0.0]])
    x = Inputs(TraceBatch.from_lists([[0.1], [0.2]], [[0.3], [0.4]]), beam=beam)
    q = np.exp([0.0, -1.0, -2.0]) / np.exp([0.0, -1.0, -2.0]).sum()
    thin, negh = get_estimator("beam_tail_thinness"), get_estimator("beam_neg_entropy")
    assert isinstance(thin, BeamSoftmax) and isinstance(negh, BeamSoftmax)
    np.testing.assert_allclose(thin.score(x), [0.5 * (q * q).sum(), 0.5 * 5 * 0.2**2])
    np.testing.assert_allclose(negh.score(x), [(q * np.log(q)).sum(), np.log(0.2)])
