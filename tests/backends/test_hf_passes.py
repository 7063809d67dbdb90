"""The forward passes of the HF backend besides generation (`tracecal.backends.hf_passes`): teacher forcing,
next-token log-probs, beam scores."""

from __future__ import annotations

import numpy as np


def test_beam_scores_shared_prefill_equals_plain_beam_search(tiny_model) -> None:  # type: ignore[no-untyped-def]
    prompts = ["Who wrote Hamlet?", "What is the capital of Peru? Answer in one word, please."]
    plain = tiny_model.beam_scores(prompts, num_beams=3, max_new_tokens=6, shared_prefill=False)
    shared = tiny_model.beam_scores(prompts, num_beams=3, max_new_tokens=6, shared_prefill=True)
    assert plain.shape == (2, 3) and np.all(np.isfinite(plain))
    assert np.all(np.diff(plain, axis=1) <= 0), "best beam first"
    assert np.abs(plain - shared).max() <= 1e-4


def test_next_token_logprobs_equal_the_teacher_forced_pass(tiny_model) -> None:  # type: ignore[no-untyped-def]
    prompts = [tiny_model.encode_prompt("What is 2 + 2?"), tiny_model.encode_prompt("Name a colour.")]
    tokens = [5, 17, 42]
    lp = tiny_model.next_token_logprobs(prompts, tokens, batch_size=2)
    assert lp.shape == (2, 3)
    for i, p in enumerate(prompts):
        for j, tok in enumerate(tokens):
            s, h = tiny_model.teacher_forced(p, [tok])
            assert abs(-s[0] - lp[i, j]) < 1e-4 and h[0] >= 0
    assert tiny_model.cache_kw() in ("cache", "past_key_values")
    assert tiny_model.context_length >= 2048 or tiny_model.context_length > 0
