"""Risky spans: where inside an answer the TRACE risk sits (risk localisation, per token and per span).

TRACE's R = α·D_λ(H) + β·M^(w)(H) + γ·L_ρ(s) (`tracecal.signals.operators`) is built from per-token local
quantities, all in nats; `risk_profile` exposes them for every token t of every answer:

* ``entropy``       H_t, the local quantity of D_λ and M^(w);
* ``surprisal``     s_t, the local quantity of L_ρ (L_ρ = Σ_t s_t / T^ρ);
* ``decay_weight``  w_t / Σ_u w_u, D_λ's normalised weight (D_λ = Σ_t weight_t · H_t);
* ``window_mean``   mean(H_t … H_{t+w−1}), M^(w)'s candidate starting at t (NaN where the window would run past
  the answer; for T < w the first token holds the mean of all T values), so M^(w) = max_t window_mean_t;
* ``risk``          r_t = (α+β)·H_t + γ·s_t, TRACE's mix evaluated at one token (our choice: D_λ's decay weighting
  is left out on purpose, or every span would sit at the start of the answer).

**The merging rule** (a named parameter, ``threshold`` ∈ (0, 1], default 0.5): a token is risky when
r_t ≥ threshold · max_u r_u of its answer; each maximal run of contiguous risky tokens is one span. A span's
``risk`` is its largest r_t (nats); the top-``k`` spans of each answer by risk (ties: the earlier one) are kept,
riskiest first, so every non-empty answer has at least one span (the one around its riskiest token).
**Which operator flagged it**, decided at the span's riskiest token t*: ``"surprisal"`` (L_ρ) when
γ·s_t* > (α+β)·H_t*; else ``"peak"`` (M^(w)) when the span overlaps TRACE's peak window (the w tokens whose mean
entropy is M^(w)); else ``"entropy"`` (D_λ). Under greedy decoding s_t ≤ H_t, so ``"surprisal"`` needs sampling.

**Character ranges** in `Trace.text` come from ``Trace.offsets`` (the start of each token; a character belongs to
the token that completes it, as the backends' ``char_offsets`` records): token t covers
``[offsets[t], offsets[t+1])`` (the last one ends at ``len(text)``), clipped into the text and made monotone; a token
that completes no character (a leading byte piece of a CJK character or emoji) covers the character it begins.
The range of a span is therefore always a substring of the text, whole characters only. A trace without offsets
(all zero) whose ``token_strings`` tile the text uses their cumulative lengths; otherwise every span covers the text.

Everything is vectorised NumPy over the concatenated tokens of a batch (no per-token Python loop); only the
`RiskSpan` objects of the top-k are built in Python.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from tracecal._validation import Interval, check_params
from tracecal.signals.operators import TraceConfig, as_batch, get_kernel, trace_config
from tracecal.traces.segments import Segments
from tracecal.traces.trace import Trace, TraceBatch, check_traces

__all__ = [
    "OPERATORS",
    "SPANS_K",
    "SPAN_THRESHOLD",
    "RiskProfile",
    "RiskSpan",
    "char_bounds",
    "closed_span",
    "risk_profile",
    "risk_spans",
    "span_table",
    "spans_json",
    "token_char_bounds",
]

OPERATORS = ("entropy", "peak", "surprisal")
SPANS_K = Interval(int, 1, None)
"""Spans kept per answer (``k``): a whole number ≥ 1."""
SPAN_THRESHOLD = Interval(float, 0, 1, closed="right")
"""The merging rule's ``threshold``: a fraction of the answer's peak token risk, in (0, 1]."""
"""The operator a span is flagged by: D_λ(H) (``"entropy"``), M^(w)(H) (``"peak"``), L_ρ(s) (``"surprisal"``)."""


@dataclass(frozen=True)
class RiskProfile:
    """Per-token local quantities of every answer (ragged: answer i owns ``[offsets[i], offsets[i+1])``), nats."""

    offsets: np.ndarray
    entropy: np.ndarray
    surprisal: np.ndarray
    decay_weight: np.ndarray
    window_mean: np.ndarray
    risk: np.ndarray

    def answer(self, i: int) -> dict[str, list[float]]:
        """The profile of answer ``i`` as lists (JSON-ready; NaN stays NaN)."""
        a, z = int(self.offsets[i]), int(self.offsets[i + 1])
        names = ("entropy", "surprisal", "decay_weight", "window_mean", "risk")
        return {n: getattr(self, n)[a:z].tolist() for n in names}


@dataclass(frozen=True)
class RiskSpan:
    """One risky span: tokens ``[token_start, token_end)``, characters ``[char_start, char_end)`` of the answer text
    (``text`` is that substring), its risk (the largest r_t inside, nats) and the operator that flagged it."""

    token_start: int
    token_end: int
    char_start: int
    char_end: int
    risk: float
    operator: str
    text: str

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of the fields."""
        return asdict(self)


def _window_means(h: np.ndarray, seg: Segments, w: int) -> np.ndarray:
    """mean(H_t … H_{t+w−1}) per start t (NaN where the window leaves the answer; mean of all for T < w). The
    window sums are added up as `window_peak` adds them (w shifted adds), so the maximum is M^(w) to the bit."""
    n = seg.n_tokens
    sums = np.array(h, dtype=np.float64, copy=True)
    for j in range(1, min(w, n)):  # w − 1 vectorised adds (w is the TRACE window, 4 by default)
        sums[: n - j] += h[j:]
    idx = np.arange(n)
    full = idx + w <= seg.broadcast(seg.ends)
    out = np.where(full, sums / w, np.nan)
    short = seg.nonempty & (seg.lengths < w)
    if short.any():
        out[seg.starts[short]] = seg.reduce(np.add, h)[short] / seg.lengths[short]
    return out


def risk_profile(traces: Sequence[Trace] | TraceBatch, config: TraceConfig | None = None) -> RiskProfile:
    """The per-token risk profile of every answer (module docstring), values validated as in `trace_risk`."""
    cfg = trace_config(config)
    b = as_batch(traces)
    seg = b.segments
    w, wsum = seg.kernel_weights(get_kernel(cfg.kernel), cfg.lam)
    with np.errstate(invalid="ignore", divide="ignore"):
        weight = w / seg.broadcast(wsum)
    risk = (cfg.alpha + cfg.beta) * b.entropy + cfg.gamma * b.surprisal
    return RiskProfile(b.offsets, b.entropy, b.surprisal, weight, _window_means(b.entropy, seg, cfg.window), risk)


def char_bounds(traces: Sequence[Trace]) -> tuple[np.ndarray, np.ndarray]:
    """Concatenated character ``(start, end)`` of every token of ``traces`` in its own ``Trace.text`` (module
    docstring): int64, shape ``(N,)``, ``0 ≤ start ≤ end ≤ len(text)``, monotone within an answer."""
    starts: list[np.ndarray] = []
    for t in traces:  # one step per answer (its offsets array), never per token
        off = np.asarray(t.offsets, np.int64)
        if t.length > 1 and not off.any() and "".join(t.token_strings) == t.text:
            off = np.concatenate([[0], np.cumsum([len(s) for s in t.token_strings])[:-1]]).astype(np.int64)
        starts.append(off)
    if not starts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in starts])]).astype(np.int64)
    return token_char_bounds(np.concatenate(starts), offsets, np.asarray([len(t.text) for t in traces], np.int64))


def token_char_bounds(
    starts: np.ndarray, offsets: np.ndarray, text_lengths: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """`char_bounds` from flat arrays, for a batch held column-wise (a run's stored traces): ``starts`` the recorded
    character offset where each token starts (``Trace.offsets`` concatenated; answer i owns
    ``[offsets[i], offsets[i+1])``), ``text_lengths`` each answer's ``len(text)``. Vectorised (no loop)."""
    seg = Segments(np.asarray(offsets, np.int64))
    text_len = seg.broadcast(np.asarray(text_lengths, np.int64))
    start = np.clip(np.asarray(starts, np.int64), 0, text_len)
    # monotone within an answer: one running maximum, each answer lifted above every earlier one's values
    lift = seg.broadcast(np.arange(len(seg), dtype=np.int64)) * (int(text_len.max(initial=0)) + 1)
    start = np.maximum.accumulate(start + lift) - lift if start.size else start
    last = np.zeros(len(start), bool)
    last[seg.ends[seg.nonempty] - 1] = True
    nxt = np.where(last, text_len, np.roll(start, -1))
    # a token that completes no character (its bytes all lie inside the character at ``start``) covers that one
    end = np.where(nxt > start, nxt, np.minimum(start + 1, text_len))
    return start, end


def _runs(risk: np.ndarray, seg: Segments, threshold: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Start and end (exclusive) flat token index and answer of each run of risky tokens (r ≥ threshold·max r)."""
    top = seg.reduce(np.maximum, risk)
    risky = risk >= seg.broadcast(threshold * top)
    first = np.zeros(seg.n_tokens, bool)
    first[seg.starts[seg.nonempty]] = True
    last = np.zeros(seg.n_tokens, bool)
    last[seg.ends[seg.nonempty] - 1] = True
    prev = np.concatenate([[False], risky[:-1]]) & ~first
    nxt = np.concatenate([risky[1:], [False]]) & ~last
    starts = np.flatnonzero(risky & ~prev)
    ends = np.flatnonzero(risky & ~nxt) + 1
    answer = np.searchsorted(seg.offsets, starts, side="right") - 1
    return starts, ends, answer


def span_table(
    b: TraceBatch, k: int = 3, threshold: float = 0.5, config: TraceConfig | None = None
) -> dict[str, np.ndarray]:
    """The top-``k`` risky spans of every answer of ``b`` as flat arrays (module docstring for the rule).

    Keys: ``answer`` (index in the batch), ``rank`` (0 = riskiest), ``token_start`` / ``token_end`` (0-based within
    the answer, end exclusive), ``peak_token`` (the riskiest token, within the answer), ``risk`` (nats),
    ``operator`` (index into `OPERATORS`), ``mean_risk`` (mean r_t over the span, nats); sorted by answer, then rank.
    """
    check_params({"k": k, "threshold": threshold}, {"k": SPANS_K, "threshold": SPAN_THRESHOLD})
    cfg = trace_config(config)
    b = as_batch(b)
    seg = b.segments
    prof = risk_profile(b, cfg)
    r = prof.risk
    starts, ends, answer = _runs(r, seg, threshold)
    if starts.size == 0:
        empty = np.zeros(0, np.int64)
        keys = ("answer", "rank", "token_start", "token_end", "peak_token", "operator")
        return {**{key: empty for key in keys}, "risk": np.zeros(0), "mean_risk": np.zeros(0)}
    run_seg = Segments(np.concatenate([starts, [ends[-1]]]))  # runs plus the gaps after them
    in_run = np.zeros(seg.n_tokens + 1, np.int64)
    np.add.at(in_run, starts, 1)
    np.add.at(in_run, ends, -1)
    inside = np.cumsum(in_run)[:-1] > 0
    masked = np.where(inside, r, -np.inf)[starts[0] : ends[-1]]
    rel = run_seg.offsets - starts[0]
    risk = np.maximum.reduceat(masked, rel[:-1])
    peak = _first_argmax(masked, rel, risk) + starts[0]
    total = np.add.reduceat(np.where(np.isfinite(masked), masked, 0.0), rel[:-1])
    mean_risk = total / (ends - starts)
    order = np.lexsort((starts, -risk, answer))
    answer, starts, ends, risk, peak, mean_risk = (x[order] for x in (answer, starts, ends, risk, peak, mean_risk))
    group_first = np.searchsorted(answer, answer, side="left")
    rank = np.arange(len(answer)) - group_first
    keep = rank < k
    base = seg.starts[answer]
    op = _operators(b, seg, cfg, prof, starts, ends, peak, answer)
    return {
        "answer": answer[keep],
        "rank": rank[keep],
        "token_start": (starts - base)[keep],
        "token_end": (ends - base)[keep],
        "peak_token": (peak - base)[keep],
        "risk": risk[keep],
        "operator": op[keep],
        "mean_risk": mean_risk[keep],
    }


def _first_argmax(masked: np.ndarray, rel: np.ndarray, best: np.ndarray) -> np.ndarray:
    """Index (relative to ``masked``) of the first element of each segment ``[rel[i], rel[i+1])`` equal to its max."""
    seg_of = np.repeat(np.arange(len(best)), np.diff(rel))
    hit = np.flatnonzero(masked == best[seg_of])
    found, first = np.unique(seg_of[hit], return_index=True)
    out = np.full(len(best), -1, np.int64)  # -1: an empty segment
    out[found] = hit[first]
    return out


def _operators(
    b: TraceBatch,
    seg: Segments,
    cfg: TraceConfig,
    prof: RiskProfile,
    starts: np.ndarray,
    ends: np.ndarray,
    peak: np.ndarray,
    answer: np.ndarray,
) -> np.ndarray:
    """`OPERATORS` index of each span (flat token indices), by the rule of the module docstring."""
    surprisal_wins = cfg.gamma * b.surprisal[peak] > (cfg.alpha + cfg.beta) * b.entropy[peak]
    wm = np.where(np.isnan(prof.window_mean), -np.inf, prof.window_mean)
    best = seg.reduce(np.maximum, wm)
    # TRACE's peak window: the first start whose window mean is M^(w) (checked equal to `window_peak`)
    pstart = _first_argmax(wm, seg.offsets, best)[answer]
    pend = np.minimum(pstart + cfg.window, seg.ends[answer])
    overlaps = (starts < pend) & (ends > pstart)
    return np.where(surprisal_wins, 2, np.where(overlaps, 1, 0)).astype(np.int64)


def risk_spans(
    traces: Sequence[Trace], k: int = 3, threshold: float = 0.5, config: TraceConfig | None = None
) -> list[list[RiskSpan]]:
    """The top-``k`` risky spans of every answer, riskiest first (rule, risk and character ranges: module docstring).

    A hesitant number in an otherwise fluent answer (s_t, H_t in nats; offsets: where each token starts):

    >>> import tracecal
    >>> t = tracecal.Trace(text="It is 1912.", token_ids=[1, 2, 3, 4, 5],
    ...     surprisal=[0.01, 0.01, 0.02, 0.9, 0.05], entropy=[0.05, 0.1, 0.2, 2.1, 0.3],
    ...     offsets=[0, 2, 5, 6, 10], token_strings=["It", " is", " ", "1912", "."])
    >>> [(s.text, s.char_start, s.char_end, round(s.risk, 2), s.operator) for s in tracecal.risk_spans([t])[0]]
    [('1912', 6, 10, 1.86, 'peak')]
    """
    traces = check_traces(traces)
    b = as_batch(traces)
    table = span_table(b, k, threshold, config)
    cs, ce = char_bounds(traces)
    flat_start = b.offsets[table["answer"]] + table["token_start"]
    flat_end = b.offsets[table["answer"]] + table["token_end"] - 1
    c0, c1 = cs[flat_start], ce[flat_end]
    out: list[list[RiskSpan]] = [[] for _ in traces]
    for j, i in enumerate(table["answer"].tolist()):  # one step per span kept (≤ k per answer)
        a, z = int(c0[j]), int(c1[j])
        out[i].append(
            RiskSpan(
                int(table["token_start"][j]),
                int(table["token_end"][j]),
                a,
                z,
                float(table["risk"][j]),
                OPERATORS[int(table["operator"][j])],
                traces[i].text[a:z],
            )
        )
    return out


def closed_span(
    trace: Trace, threshold: float = 0.5, config: TraceConfig | None = None, tokens: int | None = None
) -> RiskSpan | None:
    """The span that token ``tokens`` (default: the newest, T) closed, for streaming: the rule applied to the prefix
    of ``tokens`` tokens (threshold × that prefix's peak r_t), and that prefix's newest token no longer risky while the
    one before it was; None otherwise. A provisional span: each span `risk_spans` finds in the whole answer lies inside
    one sent by then or ends at the answer's last token (the threshold only rises as the peak grows)."""
    n = trace.length if tokens is None else tokens
    if n < 2:
        return None
    prefix = Trace(
        text=trace.text[: int(trace.offsets[n])] if n < trace.length else trace.text,
        token_ids=trace.token_ids[:n],
        surprisal=trace.surprisal[:n],
        entropy=trace.entropy[:n],
        token_strings=trace.token_strings[:n],
        offsets=trace.offsets[:n],
    )
    table = span_table(as_batch([prefix]), k=n, threshold=threshold, config=config)
    hit = np.flatnonzero(table["token_end"] == n - 1)
    if not hit.size:
        return None
    j = int(hit[0])
    cs, ce = char_bounds([prefix])
    a, z = int(cs[table["token_start"][j]]), int(ce[n - 2])
    op = OPERATORS[int(table["operator"][j])]
    return RiskSpan(int(table["token_start"][j]), n - 1, a, z, float(table["risk"][j]), op, prefix.text[a:z])


def spans_json(traces: Sequence[Trace], k: int = 3, threshold: float = 0.5) -> list[str]:
    """Per answer, its risky spans as one compact JSON text (the ``spans`` column of ``tracecal score --csv`` and
    ``tracecal score-answers``): ``[{"char_start", "char_end", "text", "risk" (nats, 4 decimals), "operator"}]``."""
    keep = ("char_start", "char_end", "text", "operator")
    return [
        json.dumps([{**{f: getattr(x, f) for f in keep}, "risk": round(x.risk, 4)} for x in spans], ensure_ascii=False)
        for spans in risk_spans(traces, k, threshold)
    ]
