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


def test_forced_pass_equals_one_unpadded_pass_per_answer(lively_model) -> None:  # type: ignore[no-untyped-def]
    from tracecal.backends.hf_passes import forced_pass

    m = lively_model
    rows = [
        (m.encode_prompt("What is 2 + 2?"), [5, 17, 42, 7]),
        (m.encode_prompt("Name a colour, please."), [9]),
        (m.encode_prompt("Hi"), []),
    ]
    batch = forced_pass(m.model, rows, m.pad_id, m.stop_ids, top_logprobs=2)
    for (p, a), f in zip(rows, batch, strict=True):
        s, h = m.teacher_forced(p, [*a, 3])  # one more token: the position after the answer
        assert (
            np.abs(f.surprisal - s[: len(a)]).max(initial=0) <= 1e-4
            and np.abs(f.entropy - h[: len(a)]).max(initial=0) <= 1e-4
        )
        assert f.topk_ids is not None and f.topk_ids.shape == (len(a), 2)
        probe = m.next_token_logprobs([[*p, *a]], list(range(m.vocab_size)))[0]
        assert f.next_id == int(np.argmax(probe))
        assert abs(f.end_prob - float(np.exp(probe[m.stop_ids]).sum())) <= 1e-5
    hot = forced_pass(m.model, rows[:1], m.pad_id, m.stop_ids, temperature=0.5)[0]
    assert np.all(hot.entropy < batch[0].entropy)  # a lower temperature sharpens every step


def test_left_pad(tiny_model) -> None:  # type: ignore[no-untyped-def]
    from tracecal.backends.hf_passes import left_pad

    ids, mask = left_pad([[1, 2, 3], [4], []], 0, "cpu")
    assert ids.tolist() == [[1, 2, 3], [0, 0, 4], [0, 0, 0]] and mask.tolist() == [[1, 1, 1], [0, 0, 1], [0, 0, 0]]
    assert tiny_model.left_pad([[5]])[0].tolist() == [[5]]
