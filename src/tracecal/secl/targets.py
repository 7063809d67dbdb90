"""The targets SECL can pull the verbalised confidence v toward (`SECLConfig.target`, the signal-quality ablation).

Every target is a number in [0, 1] per question of the stream, computed from the frozen pass (the base model's
answers, traces and P(True) reads; ``scope="confidence"``):

    norm_ptrue   τ = P(yes) / (P(yes) + P(no))                        (docs/method.md §6; the default)
    ptrue        τ = P(yes), raw: Σ over the Yes variants, not renormalised against No
    trace        τ = c_TRACE = exp(−R), R = 0.4·D_2(H) + 0.4·M^(4)(H) + 0.2·L_{1/4}(s)  (docs/method.md §2, no fitting)
    trace_rank   τ_i = (#{j < i: c_j < c_i} + ½·#{j < i: c_j = c_i} + ½) / i   (i = 1, 2, …: the mid-rank of
                 c_TRACE among the answers seen so far, this one included — online, label-free, uniform on
                 (0, 1) for an exchangeable stream; the first question gets ½)
    oracle       τ = z, the answer's correctness label (an upper bound: the one target that reads labels)

c_TRACE ranks answers and is not a probability, so ``trace`` measures what an uncalibrated label-free score does as
a target, and ``trace_rank`` what its ordering alone does. A zero-token answer has no trace: its c_TRACE is 0 (it
is labelled wrong). What a target costs to read, in token-forwards: the P(True) prompt for ``norm_ptrue`` and
``ptrue``, nothing for the others (the trace is there already; the oracle is free by assumption).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from tracecal.errors import ValidationError

if TYPE_CHECKING:
    from tracecal.secl.frozen import FrozenPass
    from tracecal.secl.stream import StreamItem

__all__ = ["TARGET_NAMES", "READS_PTRUE", "trace_target", "online_rank", "target_series"]

TARGET_NAMES = {
    "norm_ptrue": "NormPTrue",
    "ptrue": "raw P(True)",
    "trace": "c_TRACE = exp(−R)",
    "trace_rank": "online rank of c_TRACE",
    "oracle": "labels (oracle)",
}
"""A short name of each target for tables and titles."""

READS_PTRUE = ("norm_ptrue", "ptrue")
"""The targets read from the P(True) prompt (they cost its forward pass on a gated question)."""


def trace_target(entropy: Sequence[np.ndarray], surprisal: Sequence[np.ndarray]) -> np.ndarray:
    """c_TRACE = exp(−R) per answer with the fixed TRACE configuration (0 for a zero-token answer)."""
    from tracecal.signals.operators import trace_confidence
    from tracecal.traces.trace import TraceBatch

    c = trace_confidence(TraceBatch.from_lists(list(surprisal), list(entropy)))
    return np.nan_to_num(c, nan=0.0)


def online_rank(c: np.ndarray) -> np.ndarray:
    """u_i = (#{j < i: c_j < c_i} + ½·#{j < i: c_j = c_i} + ½) / i, i = 1…n: each value's mid-rank among itself
    and the values before it, in (0, 1)."""
    c = np.asarray(c, dtype=np.float64)
    u = np.empty(len(c))
    for i in range(len(c)):
        seen = c[:i]
        u[i] = (np.sum(seen < c[i]) + 0.5 * np.sum(seen == c[i]) + 0.5) / (i + 1)
    return u


def target_series(kind: str, frozen: FrozenPass, items: Sequence[StreamItem]) -> np.ndarray:
    """The target of every question of the stream (see the module docstring), from the frozen pass.

    ``ptrue`` needs the frozen pass's raw P(yes) (`FrozenPass.p_yes`, recorded by `frozen_pass` and filled into
    an older cache by `tracecal.secl.cache.frozen_for`); ``oracle`` labels the frozen answers.
    """
    if kind == "norm_ptrue":
        return np.asarray(frozen.tau, dtype=np.float64).copy()
    if kind == "ptrue":
        if frozen.p_yes is None:
            raise ValidationError("target 'ptrue' needs the frozen pass's raw P(yes); recompute the frozen pass")
        return np.asarray(frozen.p_yes, dtype=np.float64).copy()
    if kind in ("trace", "trace_rank"):
        c = trace_target(frozen.entropy, frozen.surprisal)
        return c if kind == "trace" else online_rank(c)
    if kind == "oracle":
        return np.array([float(it.task.label(it.example, a)) for it, a in zip(items, frozen.answers, strict=True)])
    raise ValidationError(f"unknown target {kind!r}; known: {', '.join(TARGET_NAMES)}")
