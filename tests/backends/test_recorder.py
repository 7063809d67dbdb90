"""`tracecal.backends.recorder`: s_t and H_t recorded from the logits a decoder uses, the scores left unchanged."""

from __future__ import annotations

import numpy as np
import torch

from tracecal.backends.recorder import TraceRecorder, output_cache


def test_recorder_records_entropy_and_surprisal_without_changing_scores() -> None:
    rec = TraceRecorder(top_logprobs=2)
    scores = torch.tensor([[0.0, 1.0, 2.0], [3.0, 0.0, -torch.inf]])
    out = rec(torch.zeros((2, 1), dtype=torch.long), scores.clone())
    assert torch.equal(out, scores)
    chosen = torch.tensor([[0, 2], [0, 0]])  # the second step's input: the tokens chosen at step 1
    rec(chosen, scores.clone())
    S, H, ti, tl = rec.finish(torch.tensor([[0, 2, 1], [0, 0, 1]]))
    logp = torch.log_softmax(scores.double(), -1).numpy()
    p = np.exp(logp)
    h = -np.sum(p * np.where(p > 0, logp, 0.0), axis=1)
    np.testing.assert_allclose(H[:, 0], h, rtol=1e-6)
    np.testing.assert_allclose(S[:, 0], [-logp[0, 2], -logp[1, 0]], rtol=1e-6)  # tokens chosen at step 1
    np.testing.assert_allclose(S[:, 1], [-logp[0, 1], -logp[1, 1]], rtol=1e-6)  # the last step: from sequences
    assert ti is not None and tl is not None and ti[0, 0].tolist() == [2, 1]


def test_recorder_temperature_divides_the_logits() -> None:
    rec = TraceRecorder(temperature=2.0)
    rec(torch.zeros((1, 1), dtype=torch.long), torch.tensor([[0.0, 2.0]]))
    S, H, _, _ = rec.finish(torch.tensor([[0, 1]]))
    logp = torch.log_softmax(torch.tensor([0.0, 1.0], dtype=torch.float64), -1).numpy()
    np.testing.assert_allclose(S[0, 0], -logp[1], rtol=1e-6)
    np.testing.assert_allclose(H[0, 0], -(np.exp(logp) * logp).sum(), rtol=1e-6)


def test_output_cache_reads_either_name() -> None:
    assert output_cache({"cache": 1}) == 1

    class Old(dict):  # type: ignore[type-arg]
        past_key_values = 2

    assert output_cache(Old()) == 2
