"""`tracecal.passes.semantic`: TokenSAR relevances and MARS importances from leave-one-out embeddings."""

from __future__ import annotations

import numpy as np
import pytest

from tracecal.passes.semantic import relevance
from tracecal.traces.trace import Trace


class BagOfLetters:
    """A toy embedder: normalised letter counts (similar texts, similar vectors)."""

    def encode(self, texts: list[str], **kw: object) -> np.ndarray:
        E = np.array([[t.count(c) + 1e-3 for c in "abcdefghijklmnopqrstuvwxyz "] for t in texts], dtype=float)
        return E / np.linalg.norm(E, axis=1, keepdims=True)


def trace(text: str, pieces: list[str]) -> Trace:
    offsets = np.cumsum([0] + [len(p) for p in pieces])[:-1]
    n = len(pieces)
    return Trace(text=text, token_ids=np.arange(n), surprisal=np.ones(n), entropy=np.ones(n), offsets=offsets)


def test_relevance_is_ragged_and_sums_to_one() -> None:
    traces = [trace("the big cat", ["the", " big", " cat"]), trace("", []), trace("dog", ["do", "g"])]
    rel, u = relevance(traces, ["q1", "q2", "q3"], BagOfLetters())
    assert rel.shape == u.shape == (5,)
    np.testing.assert_allclose([rel[:3].sum(), rel[3:].sum()], 1.0)
    np.testing.assert_allclose([u[:3].sum(), u[3:].sum()], 1.0)
    assert u[3] == u[4] == 0.5  # two tokens of one word share its importance
    with pytest.raises(ValueError, match="one question per trace"):
        relevance(traces, ["q"], BagOfLetters())
