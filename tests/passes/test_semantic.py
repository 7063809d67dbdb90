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


def test_bf16_embedder_gives_the_float32_relevances_within_0_01() -> None:
    """The real (offline) embedder with bf16 matrix products: TokenSAR R̃ and MARS u within 0.01 of float32's on a
    few short answers (measured ≤ 0.004), each still summing to 1 per answer; float32 embeddings either way."""
    from tracecal.passes.semantic import Autocast, load_embedder

    apples = ["She", " has", " 12", " apples", ",", " so", " the", " answer", " is", " 12", "."]
    traces = [
        trace("The capital is Paris", ["The", " capital", " is", " Paris"]),
        trace("".join(apples), apples),
        trace("Shakespeare", ["Shakes", "peare"]),
    ]
    qs = ["What is the capital of France?", "Mary had 5 apples and got 7 more. How many now?", "Who wrote Hamlet?"]
    fp32, bf16 = load_embedder(), load_embedder(dtype="bfloat16")
    assert isinstance(bf16, Autocast) and not isinstance(fp32, Autocast) and bf16.tokenizer is not None
    assert next(bf16.model.parameters()).dtype == next(fp32.parameters()).dtype  # the weights stay float32
    E = bf16.encode(["a short text", "another one"], normalize_embeddings=True, convert_to_numpy=True)
    assert E.dtype == np.float32 and np.allclose(np.linalg.norm(E, axis=1), 1.0, atol=1e-5)
    (r32, u32), (r16, u16) = relevance(traces, qs, fp32), relevance(traces, qs, bf16)
    for x in (r32, u32, r16, u16):
        np.testing.assert_allclose([x[:4].sum(), x[4:15].sum(), x[15:].sum()], 1.0, rtol=1e-6)
    np.testing.assert_allclose(r16, r32, atol=0.01)
    np.testing.assert_allclose(u16, u32, atol=0.01)
    assert np.argmax(r16[:4]) == np.argmax(r32[:4]) == 3  # "Paris" matters most in both
    with pytest.raises(ValueError, match="embedder dtype must be one of float32, bfloat16, got 'float16'"):
        load_embedder(dtype="float16")
