"""The report's risky spans (issue 38): each shown answer's spans, and the section "Where answers go wrong".

The spans are `tracecal.signals.spans`' (the same rule as ``tracecal.risk_spans`` and the gateway: a token is risky
when its risk r_t = (α+β)·H_t + γ·s_t is at least ``threshold`` × its answer's largest r_t, each maximal run of risky
tokens is a span, the ``SPAN_K`` riskiest kept), computed from the run's stored traces:

* `example_spans`: per shown answer, ``[char_start, char_end, risk × 100 (nats), operator, token_start, token_end]``
  of each span, characters into the trace's ``Trace.text`` (`tracecal.signals.spans.token_char_bounds`), which the page
  highlights in the answer with the risk and operator on hover;
* `task_positions` / `positions_svg`: **where in the answer the riskiest span falls** — for every answer of the
  run with at least one token, the relative position of its riskiest token, (t* + ½) / T ∈ (0, 1), in
  `POSITION_BINS` equal bins, as the share of the task's correct and of its wrong answers (both splits: a span
  depends on the trace only, never on a calibration). One panel per task; the tooltip of each bar holds its counts.

Why this figure: it answers the first question a user of the spans asks — does the trace mark the answer's end (its
final number or entity) or its start (where the model chooses how to go on)? — from the run alone, with no rule
that needs the gold answer. The rule-based hit rate of docs/localisation.md needs a per-task error rule and lives in
``scripts/localisation_tables.py``.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from html import escape
from pathlib import Path

import numpy as np

from tracecal._outputs import InputPaths, atomic_write
from tracecal.report.data import RunData, TaskTokens
from tracecal.report.svg import BAD, OK, PW, XML_PROLOG, svg_document, text_width
from tracecal.signals.spans import OPERATORS, span_table, token_char_bounds
from tracecal.traces.segments import Segments
from tracecal.traces.trace import TraceBatch

__all__ = [
    "SPAN_K",
    "OPERATOR_NAMES",
    "POSITION_BINS",
    "FIGURE_FILE",
    "Positions",
    "task_span_table",
    "example_spans",
    "task_positions",
    "positions_svg",
    "localisation_section",
]

SPAN_K = 3
"""Risky spans kept per answer (the gateway's default)."""
POSITION_BINS = 10
FIGURE_FILE = "where_wrong.svg"
"""The section's figure as written by ``--figures DIR``."""
OPERATOR_WORDS = {
    "entropy": "D_λ (a hesitant token)",
    "peak": "M⁽ʷ⁾ (TRACE's peak window)",
    "surprisal": "L_ρ (an unlikely sampled token)",
}
"""How the page names each operator of `OPERATORS` on hover."""
OPERATOR_NAMES = [[op, OPERATOR_WORDS[op]] for op in OPERATORS]
"""The payload's ``ops``: ``[name, words]`` per operator index of a span."""


def task_span_table(tt: TaskTokens, k: int = SPAN_K) -> dict[str, np.ndarray]:
    """`tracecal.signals.spans.span_table` of every row of a task (a row without a trace has no tokens, no span)."""
    return span_table(TraceBatch(tt.surprisal, tt.entropy, tt.offsets), k=k)


def _token_starts(tt: TaskTokens, take: int) -> np.ndarray:
    """Where each token of the first ``take`` answers starts in its text: the stored ``Trace.offsets``; for an answer
    stored without them (all zero), the cumulative lengths of its token strings, as `char_bounds` does."""
    end = int(tt.offsets[take])
    chars = tt.chars[:end] if len(tt.chars) >= end else np.zeros(end, np.int64)
    seg = Segments(tt.offsets[: take + 1])
    missing = (seg.reduce(np.maximum, chars, empty=0) == 0) & (seg.lengths > 1)
    if not missing.any():
        return chars
    size = np.fromiter(map(len, tt.strings[:end]), np.int64, count=end)
    within = np.cumsum(size) - size - seg.broadcast(np.concatenate([[0], np.cumsum(size)])[seg.starts])
    return np.where(seg.broadcast(missing), within, chars)


def example_spans(tt: TaskTokens, table: dict[str, np.ndarray], take: int) -> list[list[list[int]]]:
    """The spans of the task's first ``take`` rows, each ``[char_start, char_end, round(risk × 100), operator index,
    token_start, token_end]`` (characters into ``tt.texts[i]``, `tracecal.signals.spans.token_char_bounds`),
    riskiest first. Vectorised but for the one step per span kept."""
    off = tt.offsets
    lengths = np.fromiter((len(tt.texts[j]) if j < len(tt.texts) else 0 for j in range(take)), np.int64, count=take)
    cs, ce = token_char_bounds(_token_starts(tt, take), off[: take + 1], lengths)
    out: list[list[list[int]]] = [[] for _ in range(take)]
    answers = table["answer"]
    keep = np.flatnonzero(answers < take)
    first = off[answers[keep]] + table["token_start"][keep]
    last = off[answers[keep]] + table["token_end"][keep] - 1
    risk = np.rint(table["risk"][keep] * 100).astype(np.int64)
    cols = (cs[first], ce[last], risk, table["operator"][keep], table["token_start"][keep], table["token_end"][keep])
    for i, *row in zip(answers[keep].tolist(), *(c.tolist() for c in cols), strict=True):
        out[i].append(row)
    return out


@dataclass
class Positions:
    """Where the riskiest span falls in one task's answers: counts per relative-position bin (``edges``)."""

    task: str
    edges: np.ndarray
    correct: np.ndarray
    wrong: np.ndarray
    median_correct: float
    median_wrong: float


def task_positions(run: RunData, task: str, table: dict[str, np.ndarray], bins: int = POSITION_BINS) -> Positions:
    """Relative position (t* + ½) / T of each answer's riskiest token, binned, correct and wrong answers apart."""
    tt = run.tokens[task]
    first = table["rank"] == 0
    answer, peak = table["answer"][first], table["peak_token"][first]
    length = np.diff(tt.offsets)[answer]
    pos = (peak + 0.5) / length
    # bin k holds k/bins ≤ (t* + ½)/T < (k+1)/bins, in integers (no float edge decides a bin)
    k = np.minimum((2 * peak + 1) * bins // (2 * length), bins - 1)
    ok = run.correct[run.task_rows[task][answer]] == 1
    edges = np.linspace(0.0, 1.0, bins + 1)

    def count(x: np.ndarray) -> np.ndarray:
        return np.bincount(x, minlength=bins).astype(np.int64)

    def median(x: np.ndarray) -> float:
        return float(np.median(x)) if x.size else math.nan

    return Positions(task, edges, count(k[ok]), count(k[~ok]), median(pos[ok]), median(pos[~ok]))


# panel geometry (user units): six panels a row, as the report's other small multiples
PH = 190
X0, Y0, W, H = 34, 40, 150, 118
NCOLS = 6
TITLE_H = 24


def _tip(name: str, count: int, total: int, lo: float, hi: float) -> str:
    share = count / max(1, total)
    return (
        f"{name}: {count} of {total} answers ({share:.1%}) have their riskiest token at {lo:.1f}–{hi:.1f} of the answer"
    )


def _bars(p: Positions, top: float) -> list[str]:
    """Side-by-side bars per bin: the share of correct (green) and wrong (red) answers, with their counts on hover."""
    parts: list[str] = []
    bw = W / (len(p.edges) - 1)
    for k, (counts, colour, name) in enumerate(((p.correct, OK, "correct"), (p.wrong, BAD, "wrong"))):
        total = int(counts.sum())
        for j, c in enumerate(counts.tolist()):
            h = c / max(1, total) / top * H
            x = X0 + j * bw + 1 + k * (bw - 2) / 2
            tip = _tip(name, c, total, float(p.edges[j]), float(p.edges[j + 1]))
            parts.append(
                f'<rect x="{x:.1f}" y="{Y0 + H - h:.1f}" width="{(bw - 2) / 2:.1f}" height="{h:.1f}" fill="{colour}" '
                f'fill-opacity="0.75" class="pos-{name}"><title>{escape(tip)}</title></rect>'
            )
    return parts


def _panel(p: Positions) -> str:
    shares = [c / max(1, c.sum()) for c in (p.correct, p.wrong)]
    top = math.ceil(max(0.1, *(float(s.max(initial=0)) for s in shares)) * 10) / 10
    parts = [
        f'<text x="{PW / 2}" y="12" text-anchor="middle" class="pt">{escape(p.task)}</text>',
        f'<text x="{PW / 2}" y="25" text-anchor="middle" class="ps">'
        f"{int(p.correct.sum())} correct · {int(p.wrong.sum())} wrong answers</text>",
        f'<rect x="{X0}" y="{Y0}" width="{W}" height="{H}" class="frame"/>',
        *_bars(p, top),
    ]
    for frac, lab in ((0.0, "start"), (0.5, "middle"), (1.0, "end")):
        parts.append(f'<text x="{X0 + frac * W:.1f}" y="{Y0 + H + 11}" text-anchor="middle" class="tk">{lab}</text>')
    for frac, lab in ((0.0, "0"), (1.0, f"{top:.0%}")):
        y = Y0 + (1 - frac) * H + 3
        parts.append(f'<text x="{X0 - 3}" y="{y:.1f}" text-anchor="end" class="tk">{lab}</text>')
    med = " · ".join(f"{n} {m:.2f}" for n, m in (("correct", p.median_correct), ("wrong", p.median_wrong)) if m == m)
    parts.append(f'<text x="{PW / 2}" y="{PH - 6}" text-anchor="middle" class="ax">median {escape(med or "—")}</text>')
    return (
        f'<svg width="{PW}" height="{PH}" viewBox="0 0 {PW} {PH}" class="panel" role="img" '
        f'aria-label="position {escape(p.task, quote=True)}">{"".join(parts)}</svg>'
    )


def positions_svg(positions: list[Positions]) -> str:
    """One standalone SVG document: a panel per task of where the riskiest token falls (module docstring)."""
    ncols = max(1, min(NCOLS, len(positions)))
    nrows = max(1, math.ceil(len(positions) / ncols))
    placed = [
        _panel(p).replace("<svg ", f'<svg x="{(i % ncols) * PW}" y="{TITLE_H + (i // ncols) * PH}" ', 1)
        for i, p in enumerate(positions)
    ]
    title = "Where in the answer the riskiest span falls: correct (green) and wrong (red) answers"
    width = max(ncols * PW, text_width(title, 13) + 16)
    return svg_document(width, TITLE_H + nrows * PH, "where answers go wrong", title, placed)


CAPTION = (
    "Relative position (t* + ½) / T of each answer's riskiest token t* (the peak of its riskiest span), {bins} "
    "equal bins from the answer's start to its end, as the share of the task's correct and of its wrong answers "
    "(both splits, every answer with a token; hover a bar for its counts). Computed from this run's stored traces "
    "with tracecal.risk_spans' rule (threshold 0.5). Spans mark where decoding hesitated, which is not always where "
    "an answer is wrong: docs/localisation.md measures how often the riskiest span overlaps the error."
)


def localisation_section(
    run: RunData,
    tables: dict[str, dict[str, np.ndarray]],
    figures_dir: str | os.PathLike[str] | None = None,
    inputs: InputPaths = (),
) -> str:
    """``<section id="localisation">`` "Where answers go wrong": the figure of `positions_svg` over the tasks with
    answer tokens (``tables``: each task's `task_span_table`), also written to ``figures_dir`` as `FIGURE_FILE`.
    '' when no answer has a token."""
    positions = [task_positions(run, t, tab) for t, tab in tables.items() if tab["answer"].size]
    if not positions:
        return ""
    svg = positions_svg(positions)
    if figures_dir is not None:
        text = XML_PROLOG + svg
        atomic_write(
            Path(figures_dir) / FIGURE_FILE,
            lambda tmp: Path(tmp).write_text(text, encoding="utf-8"),
            inputs,
            "--figures",
        )
    note = (
        '<p class="note">Each example below shows its answer with its risky spans highlighted '
        "(darker = riskier; hover one for its risk in nats and the TRACE operator that flagged it). "
        "Here, over every answer of the run: does the trace mark the end of an answer, where its final number or "
        "entity is written, or its start?</p>"
    )
    caption = escape(CAPTION.format(bins=POSITION_BINS))
    figure = f'<figure id="fig-localisation">{svg}<figcaption>{caption}</figcaption></figure>'
    return f'<section id="localisation"><h2>Where answers go wrong</h2>{note}{figure}</section>'
