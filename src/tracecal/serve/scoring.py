"""Confidence of answers and the running risk of answers still being written (TRACE operators, docs/method.md §2).

Per finished answer (`Scorer.confidence`): c_TRACE = exp(−R) with R = 0.4·D_2(H) + 0.4·M^(4)(H) + 0.2·L_{1/4}(s)
(`tracecal.signals.operators.trace_risk`), the calibrated probability when a calibrator is loaded (a calibrator of
any registered class, applied by `tracecal.calibrators.Calibrator.confidence`: one that reads traces - TRACE+ and its
variants - reads the trace, one that reads a score - Platt, isotonic, temperature - reads c_TRACE), and ``abstain``:
that probability (else c_TRACE) is under ``abstain_below``, or the answer is empty.

Running risk (`running_risk`, `prefix_risks`): R_t of the prefix ŷ_1 … ŷ_t, i.e. the same operators over the
tokens so far; c_t = exp(−R_t). Computed for a whole batch of prefixes at once (ragged arrays, no loop over
tokens). Early stopping ends an answer at the first t (≥ ``risk_min_tokens``) with c_t < ``stop_on_risk``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from tracecal.calibrators import Calibrator
from tracecal.errors import ValidationError
from tracecal.signals.operators import TraceConfig, trace_risk
from tracecal.signals.spans import closed_span, risk_spans
from tracecal.traces.trace import Trace, TraceBatch

__all__ = [
    "Scorer",
    "SpanTracker",
    "first_risky",
    "prefix_batch",
    "prefix_risks",
    "record_extra",
    "running_risk",
    "truncate",
]


def _num(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def running_risk(surprisal: Sequence[np.ndarray], entropy: Sequence[np.ndarray], config: TraceConfig) -> np.ndarray:
    """R of each answer's tokens so far (one ragged batch), nats, shape (B,); NaN for an answer with no token."""
    return trace_risk(TraceBatch.from_lists(surprisal, entropy), config)


def prefix_batch(batch: TraceBatch) -> TraceBatch:
    """Every prefix ŷ_1…ŷ_t (t = 1…T_i) of every answer as one ragged batch, answer by answer (Σ T_i(T_i+1)/2
    tokens)."""
    T = batch.lengths
    starts = np.repeat(batch.offsets[:-1], T)  # per token: where its answer starts
    plen = np.arange(int(batch.offsets[-1]), dtype=np.int64) - starts + 1  # prefix lengths 1…T_i per answer
    off = np.zeros(len(plen) + 1, dtype=np.int64)
    np.cumsum(plen, out=off[1:])
    within = np.arange(off[-1]) - np.repeat(off[:-1], plen)
    gather = np.repeat(starts, plen) + within
    return TraceBatch(batch.surprisal[gather], batch.entropy[gather], off, values_checked=batch.values_checked)


def prefix_risks(traces: Sequence[Trace] | TraceBatch, config: TraceConfig | None = None) -> list[np.ndarray]:
    """Per answer, R_t for t = 1…T (the running risk after each token), nats; one vectorised operator pass."""
    b = TraceBatch.from_traces(traces)
    r = trace_risk(prefix_batch(b), config) if b.offsets[-1] else np.zeros(0)
    return np.split(r, np.cumsum(b.lengths)[:-1]) if len(b) else []


def first_risky(risks: np.ndarray, stop_on_risk: float, min_tokens: int = 1) -> int | None:
    """The number of tokens kept when stopping at the first t ≥ ``min_tokens`` with exp(−R_t) < ``stop_on_risk``."""
    bad = np.flatnonzero((np.exp(-np.asarray(risks)) < stop_on_risk) & (np.arange(1, len(risks) + 1) >= min_tokens))
    return int(bad[0]) + 1 if bad.size else None


def record_extra(model: Any, prompts: Sequence[Any], traces: Sequence[Trace], options: dict[str, Any]) -> Any:
    """Give each finished trace what a calibrator reads beyond it (``options``: `Scorer.backend_options`, e.g. a
    hidden-state probe's ``hidden_layers``) from one teacher-forced pass over its prompt and tokens
    (``model.trace_answers(**options)``: the hidden summary equals what ``generate`` records, to float round-off),
    for answers generated without them (a backend without step hooks; HF records them during generation).
    Returns None, or the exception it raised."""
    if not options:
        return None
    try:
        ids = [t.token_ids.tolist() for t in traces]
        forced = model.trace_answers(list(prompts), ids, batch_size=max(len(ids), 1), **options)
    except Exception as e:
        return e
    for t, f in zip(traces, forced, strict=True):
        t.hidden, t.hidden_layers = f.hidden, f.hidden_layers
    return None


def truncate(trace: Trace, n: int, stop_reason: str) -> Trace:
    """The first ``n`` tokens of ``trace`` (text cut at the token boundary), for early stopping after the fact."""
    if n >= trace.length:
        return trace
    cut = int(trace.offsets[n])
    top = (None, None) if trace.topk_ids is None else (trace.topk_ids[:n], trace.topk_logprobs[:n])  # type: ignore[index]
    return Trace(
        text=trace.text[:cut],
        token_ids=trace.token_ids[:n],
        surprisal=trace.surprisal[:n],
        entropy=trace.entropy[:n],
        token_strings=trace.token_strings[:n],
        offsets=trace.offsets[:n],
        prompt=trace.prompt,
        prompt_ids=trace.prompt_ids,
        entropy_kind=trace.entropy_kind,
        stop_reason=stop_reason,
        model_id=trace.model_id,
        decoding=dict(trace.decoding),
        topk_ids=top[0],
        topk_logprobs=top[1],
        id=trace.id,
        meta=dict(trace.meta),
    )


class Scorer:
    """Turns finished traces into confidence objects (see the module docstring).

    Args:
        calibrator: a fitted calibrator of any class (`tracecal.calibrators.load_calibrator`), or None.
        abstain_below: threshold under which ``abstain`` is true; None: never.
        config: the TRACE configuration (default: docs/method.md §2's).
        abstain_on: the score ``abstain_below`` applies to: ``auto`` (the probability with a calibrator, else
            c_TRACE), ``c_trace`` (e.g. a `tracecal selective` threshold of the ``trace`` estimator) or
            ``probability``.
        spans: risky spans per answer in each confidence (``spans``: `tracecal.signals.spans.risk_spans`, character
            offsets into the answer text the client receives); ``span_threshold`` the rule's ``threshold``.
    """

    def __init__(
        self,
        calibrator: Any = None,
        abstain_below: float | None = None,
        config: TraceConfig | None = None,
        abstain_on: str = "auto",
        spans: int = 3,
        span_threshold: float = 0.5,
    ):
        if calibrator is not None and not isinstance(calibrator, Calibrator):
            raise ValidationError(
                "calibrator must be a fitted tracecal calibrator (tracecal.load_calibrator), "
                f"got {type(calibrator).__name__}"
            )
        self.calibrator = calibrator
        self.abstain_below = abstain_below
        if abstain_on == "probability" and calibrator is None:
            raise ValidationError("abstain_on='probability' needs a calibrator (--calibrator)")
        self.abstain_on = "c_trace" if abstain_on == "c_trace" or calibrator is None else "probability"
        self.config = config or TraceConfig()
        self.spans, self.span_threshold = spans, span_threshold

    @property
    def kind(self) -> str | None:
        """The calibrator's class name (None without one)."""
        return None if self.calibrator is None else type(self.calibrator).__name__

    def probabilities(self, traces: Sequence[Trace] | TraceBatch, c: np.ndarray) -> np.ndarray | None:
        """P(correct) per answer from the calibrator (`Calibrator.confidence`: the traces - with the hidden summaries
        they carry, for a hidden-state reader -, or the c_TRACE ``c`` for one that reads a score; NaN for empty
        answers); None without a calibrator."""
        if self.calibrator is None:
            return None
        return self.calibrator.confidence(traces, score=c)

    def backend_options(self, model: Any, where: str = "--no-model") -> dict[str, Any]:
        """The ``generate`` / ``trace_answers`` keywords that give the calibrator what it reads from ``model``'s
        answers (`Calibrator.backend_options`: a hidden-state probe's ``hidden_layers``); `ValidationError` naming
        the capability and what to use instead when ``model``'s backend (None: no model, ``where`` says how) does not
        declare every capability the calibrator ``needs``."""
        from tracecal.backends.registry import CAPABILITIES, backend_of, get_backend

        cal = self.calibrator
        if cal is None or not cal.needs:
            return {} if cal is None else cal.backend_options()
        name = None if model is None else backend_of(model)
        spec = None if name is None else get_backend(name)
        lacking = sorted(cal.needs if spec is None else cal.needs - spec.capabilities)
        if lacking:
            who = f"this {where} server" if model is None else f"the {name or type(model).__name__} backend"
            why = "; ".join(spec.why_not(c) if spec else f"{who} has no {CAPABILITIES[c]}" for c in lacking)
            raise ValidationError(
                f"the {type(cal).__name__} calibrator reads what {who} cannot give ({why}): use an HF model "
                "(--backend hf), or a calibrator that reads the traces (TracePlus, Platt)"
            )
        return cal.backend_options()

    def confidence(self, traces: Sequence[Trace], return_trace: bool = False) -> list[dict[str, Any]]:
        """One ``confidence`` object per answer: c_trace, risk, probability, calibrator, abstain, spans, (trace)."""
        batch = TraceBatch.from_traces(traces)
        r = trace_risk(batch, self.config)
        c = np.exp(-r)
        p = self.probabilities(list(traces), c)
        spans = risk_spans(traces, self.spans, self.span_threshold, self.config) if self.spans else [[]] * len(r)
        out = []
        for i, t in enumerate(traces):
            value = c[i] if p is None or self.abstain_on == "c_trace" else p[i]
            conf: dict[str, Any] = {
                "c_trace": _num(c[i]),
                "risk": _num(r[i]),
                "probability": None if p is None else _num(p[i]),
                "calibrator": self.kind,
                "abstain": self.abstain_below is not None
                and not (math.isfinite(value) and value >= self.abstain_below),
                "abstain_below": self.abstain_below,
                "abstain_on": self.abstain_on,
                "tokens": t.length,
                "entropy_kind": t.entropy_kind,
                "spans": [x.to_dict() for x in spans[i]],
            }
            if return_trace:
                conf["trace"] = {
                    "tokens": list(t.token_strings),
                    "surprisal": t.surprisal.tolist(),
                    "entropy": t.entropy.tolist(),
                }
            out.append(conf)
        return out

    def score_batch(self, batch: TraceBatch) -> dict[str, Any]:
        """``/score``: c_TRACE and the calibrated probability of traces given as numbers (null for empty answers)."""
        c = np.exp(-trace_risk(batch, self.config))
        p = self.probabilities(batch, c)
        return {"trace_confidence": [_num(x) for x in c], "trace_plus": None if p is None else [_num(x) for x in p]}


class SpanTracker:
    """The risky spans of one answer being streamed: `add` each token (its new text, s_t, H_t); it returns the span
    that token closed (`tracecal.signals.spans.closed_span`, character offsets into the text streamed so far)."""

    def __init__(self, threshold: float = 0.5, config: TraceConfig | None = None) -> None:
        self.threshold, self.config = threshold, config
        self.text = ""
        self.starts: list[int] = []
        self.s: list[float] = []
        self.h: list[float] = []

    def add(self, delta: str, surprisal: float, entropy: float) -> dict[str, Any] | None:
        """Record one token; the span it closed as a dict (`RiskSpan.to_dict`), or None."""
        self.starts.append(len(self.text))
        self.text += delta
        self.s.append(max(float(surprisal), 0.0))
        self.h.append(max(float(entropy), 0.0))
        n = len(self.s)
        s, h, starts = np.asarray(self.s), np.asarray(self.h), np.asarray(self.starts, np.int64)
        t = Trace(text=self.text, token_ids=np.zeros(n, np.int64), surprisal=s, entropy=h, offsets=starts)
        span = closed_span(t, self.threshold, self.config)
        return None if span is None else span.to_dict()
