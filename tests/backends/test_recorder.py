"""`tracecal.backends.recorder`: s_t and H_t recorded from the logits a decoder uses, the scores left unchanged;
the one (lse, H) formula; a recorded row made a trace (stop token, stop string, early stop)."""

from __future__ import annotations

import numpy as np
import torch

from tracecal.backends.recorder import TraceRecorder, generated_trace, logit_stats, output_cache


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


def test_logit_stats_is_logsumexp_and_entropy_with_masked_tokens() -> None:
    x = torch.tensor([[0.0, 1.0, 2.0, -torch.inf], [5.0, 5.0, 5.0, 5.0]])
    lse, h = logit_stats(x)
    p = torch.softmax(x.double(), -1)
    ref = -(p * torch.where(p > 0, p.log(), torch.zeros_like(p))).sum(-1)
    np.testing.assert_allclose(lse.numpy(), torch.logsumexp(x, -1).numpy(), rtol=1e-6)
    np.testing.assert_allclose(h.numpy(), ref.numpy(), rtol=1e-6)
    assert abs(float(h[1]) - np.log(4)) < 1e-6


def test_recorder_with_warpers_records_the_truncated_distribution() -> None:
    from transformers import LogitsProcessorList, TopKLogitsWarper

    scores = torch.tensor([[0.0, 1.0, 2.0, 3.0]])
    rec = TraceRecorder(warpers=LogitsProcessorList([TopKLogitsWarper(top_k=2)]))
    out = rec(torch.zeros((1, 1), dtype=torch.long), scores.clone())
    assert torch.equal(out, scores)  # the scores the decoder goes on with are untouched
    S, H, _, _ = rec.finish(torch.tensor([[0, 2]]))
    p = np.exp([2.0, 3.0]) / np.exp([2.0, 3.0]).sum()
    np.testing.assert_allclose(H[0, 0], -(p * np.log(p)).sum(), rtol=1e-6)
    np.testing.assert_allclose(S[0, 0], -np.log(p[0]), rtol=1e-6)


def test_generated_trace_cuts_at_stop_tokens_strings_and_early_stops(tokenizer) -> None:  # type: ignore[no-untyped-def]
    ids = tokenizer("Paris is big", add_special_tokens=False)["input_ids"]
    eos = tokenizer.eos_token_id
    new = np.array([*ids, eos, 7, 7])
    s, h = np.arange(len(new), dtype=float), np.ones(len(new))
    top = (np.zeros((len(new), 2), np.int64), np.zeros((len(new), 2)))
    t = generated_trace(tokenizer, [eos], [1, 2], new, (s, h, *top), (), "m", {"x": 1})
    assert (t.text, t.stop_reason, t.length, t.model_id) == ("Paris is big", "eos", len(ids), "m")
    assert t.surprisal.tolist() == s[: len(ids)].tolist() and t.topk_ids.shape == (len(ids), 2)
    t = generated_trace(tokenizer, [eos], [1, 2], new, (s, h, *top), (" is",), "m", {})
    assert t.text == "Paris" and t.stop_reason == "stop_string"
    t = generated_trace(tokenizer, [eos], [1, 2], new, (s, h, *top), (), "m", {}, kept=1)
    assert t.length == 1 and t.stop_reason == "stopped"
    t = generated_trace(tokenizer, [eos], [1, 2], np.array([eos]), (s, h, *top), (), "m", {})
    assert t.length == 0 and t.topk_ids is None  # a zero-token answer keeps no top-k (was a reshape error)
    t = generated_trace(tokenizer, [eos], [1, 2], np.array(ids), (s, h, None, None), (), "m", {})
    assert t.stop_reason == "length" and t.topk_ids is None
