"""Tests of the self-evaluation batches (`tracecal.backends.prefill`)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tracecal.backends.prefill import last_logits_only, length_batches


@settings(max_examples=200, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 3000), max_size=80),
    batch_size=st.integers(1, 40),
    max_tokens=st.integers(1, 20000),
)
def test_length_batches_cover_each_row_once_within_both_bounds(lengths, batch_size, max_tokens):
    batches = length_batches(lengths, batch_size, max_tokens)
    flat = np.concatenate(batches) if batches else np.zeros(0, np.int64)
    assert sorted(flat.tolist()) == list(range(len(lengths)))  # every row once
    assert [lengths[i] for i in flat] == sorted(lengths, reverse=True)  # longest first
    for b in batches:
        assert 1 <= len(b) <= batch_size
        longest = max(lengths[i] for i in b)
        assert len(b) == 1 or len(b) * longest <= max_tokens  # a prompt longer than the budget goes alone


def test_last_logits_only_follows_the_forward_signature():
    class Keeps:
        def forward(self, input_ids, logits_to_keep=0): ...

    class Plain:
        def forward(self, input_ids): ...

    assert last_logits_only(Keeps()) == {"logits_to_keep": 1}
    assert last_logits_only(Plain()) == {}
    assert last_logits_only(object()) == {}
