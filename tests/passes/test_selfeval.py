"""`tracecal.passes.selfeval`: P(True), verbalised confidence, their number distributions and parsing."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tracecal.backends.base import BackendUnsupportedError
from tracecal.errors import ValidationError
from tracecal.passes.selfeval import (
    SelfEvalUnavailableError,
    confidence_bins,
    number_distribution,
    p_true,
    p_true_prompt_ids,
    parse_confidence,
    verbalized_confidence,
    verbalized_prompt_ids,
)


class LogprobsOnly:
    """A backend seen as a `Judge` only (tokenizer, prompt ids, next-token log-probs; no torch model): what the
    llama.cpp backend offers, so `number_distribution` reads the digits' tree from log-probs. Counts the prompts."""

    def __init__(self, lm: Any) -> None:
        self.lm, self.tokenizer, self.chat, self.batch_size, self.rows = lm, lm.tokenizer, lm.chat, lm.batch_size, 0

    def encode_prompt(self, prompt: Any) -> list[int]:
        return list(self.lm.encode_prompt(prompt))

    def next_token_logprobs(self, prompt_ids: Any, token_ids: Any, batch_size: int | None = None) -> np.ndarray:
        self.rows += len(prompt_ids)
        return np.asarray(self.lm.next_token_logprobs(prompt_ids, token_ids, batch_size))


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


def test_the_digit_tree_from_log_probs_equals_the_kv_cache_tree(tiny_model) -> None:  # type: ignore[no-untyped-def]
    """The llama.cpp path of `number_distribution` (12 prompts per answer through next-token log-probs) gives the
    HF path's distribution (one KV cache repeated 10×) on the same model, and P(True) is the same call on both."""
    qs, ans = ["Capital of France?", "2+2?", "Largest planet?"], ["Paris", "5", "Jupiter, by far"]
    v, dist, mass = verbalized_confidence(tiny_model, qs, ans)
    judge = LogprobsOnly(tiny_model)
    v2, dist2, mass2 = verbalized_confidence(judge, qs, ans)
    assert judge.rows == 12 * len(qs) and dist.max() < 0.9  # a spread distribution: the comparison can fail
    np.testing.assert_allclose(dist2, dist, rtol=0, atol=1e-6)
    np.testing.assert_allclose(v2, v, rtol=0, atol=1e-6)
    np.testing.assert_allclose(mass2, mass, rtol=1e-4)
    np.testing.assert_allclose(p_true(judge, qs, ans), p_true(tiny_model, qs, ans), rtol=1e-6)
    with pytest.raises(BackendUnsupportedError, match="gradients need the HF backend"):
        number_distribution(judge, [verbalized_prompt_ids(judge, qs[0], ans[0])], grad=True)


def test_self_evaluation_on_llama_cpp_reads_the_same_prompts(tiny_model, tokenizer) -> None:  # type: ignore[no-untyped-def]
    from tracecal.backends.llamacpp import LlamaCppModel

    lc = LlamaCppModel.load(n_threads=1, tokenizer=tokenizer)  # the real default GGUF
    q, a = "What is the capital of France?", "Paris"
    assert verbalized_prompt_ids(lc, q, a) == verbalized_prompt_ids(tiny_model, q, a)
    assert p_true_prompt_ids(lc, q, a) == p_true_prompt_ids(tiny_model, q, a)
    pt = p_true(lc, [q, "What is 2 + 2?"], [a, "5"])
    assert pt.shape == (2,) and np.all((pt > 0) & (pt < 1))
    v, dist, mass = verbalized_confidence(lc, [q], [a])
    np.testing.assert_allclose(dist.sum(1), 1.0, rtol=1e-9)
    assert 0 < v[0] < 1 and mass[0] > 0.5  # after "Confidence: " the real model writes a number
