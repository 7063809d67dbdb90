"""The report's risky spans: each example's spans are `tracecal.risk_spans`' on the stored trace (multi-byte text
included), the "where answers go wrong" figure counts what a per-answer loop counts, the section and its export.
The page itself in Chromium (a highlighted span, its hover title): tests/report/test_init.py."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from tracecal.evaluation.runstore import RunStore
from tracecal.report import example_payload, load_run, write_report
from tracecal.report.data import TaskTokens
from tracecal.report.localisation import (
    FIGURE_FILE,
    OPERATOR_NAMES,
    POSITION_BINS,
    example_spans,
    localisation_section,
    task_positions,
    task_span_table,
)
from tracecal.signals.spans import OPERATORS, risk_profile, risk_spans
from tracecal.testing import write_synthetic_run

TOKENS = ["Pek", "ing", " 北", "京", " ", "👍🏽", " is", " 3", "€"]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A synthetic run; one answer of CJK, an emoji with a skin-tone modifier and a currency sign."""
    return write_synthetic_run(
        tmp_path_factory.mktemp("loc") / "run",
        tasks=("triviaqa", "svamp"),
        n_per_task=60,
        n_seeds=2,
        seed=3,
        overrides={("triviaqa", 1): {"tokens": TOKENS}},
    )


def test_example_spans_are_risk_spans_of_the_stored_traces(run: Path) -> None:
    data = load_run(run, ["trace"])
    payload = example_payload(data, ["trace"])
    store = RunStore(run)
    traces = {t.id: t for task in data.tasks for t in store.read_traces(task)}
    assert payload["ops"] == OPERATOR_NAMES and [o for o, _ in OPERATOR_NAMES] == list(OPERATORS)
    seen_multibyte = False
    for row in payload["ex"]:
        t = traces[row[1]]
        want = [
            [s.char_start, s.char_end, round(s.risk * 100), OPERATORS.index(s.operator), s.token_start, s.token_end]
            for s in risk_spans([t], k=3)[0]
        ]
        assert row[15] == want
        assert row[16] is None  # the stored answer is the trace's text: the spans index it
        for a, z, *_ in row[15]:
            assert row[5][a:z] == t.text[a:z] and row[5][a:z]
        seen_multibyte |= any(ord(c) > 0xFFFF for c in t.text)
    assert seen_multibyte  # the emoji answer was among them (code-point offsets, as the page slices them)
    limited = example_payload(data, ["trace"], max_examples=4)
    assert [r[15] for r in limited["ex"][:4]] == [r[15] for r in payload["ex"][:4]]


def test_a_run_stored_without_character_offsets(run: Path) -> None:
    """Offsets all zero (a run written before they were stored): the token strings' cumulative lengths, as
    `tracecal.risk_spans` does for such a trace."""
    data = load_run(run, ["trace"])
    tt = data.tokens["triviaqa"]
    bare = TaskTokens(tt.strings, tt.surprisal, tt.entropy, tt.offsets, tt.present, tt.texts, np.zeros_like(tt.chars))
    spans = example_spans(bare, task_span_table(bare), 5)
    traces = {t.id: t for t in RunStore(run).read_traces("triviaqa")}
    for j in range(5):
        t = traces[str(data.rows["id"][data.task_rows["triviaqa"][j]])]
        t.offsets = np.zeros_like(t.offsets)
        assert [x[:2] for x in spans[j]] == [[s.char_start, s.char_end] for s in risk_spans([t], k=3)[0]]
    assert spans == example_spans(tt, task_span_table(tt), 5)  # the synthetic tokens tile their text


def test_positions_count_what_a_per_answer_loop_counts(run: Path) -> None:
    data = load_run(run, ["trace"])
    store = RunStore(run)
    for task in data.tasks:
        pos = task_positions(data, task, task_span_table(data.tokens[task]))
        want = {0: np.zeros(POSITION_BINS, np.int64), 1: np.zeros(POSITION_BINS, np.int64)}
        by_id = {t.id: t for t in store.read_traces(task)}
        for i in data.task_rows[task]:
            t = by_id[str(data.rows["id"][i])]
            r = risk_profile([t]).risk
            top = int(np.argmax(r))  # the riskiest token of the answer: the riskiest span's peak
            k = next(k for k in range(POSITION_BINS) if (top + 0.5) / len(r) < (k + 1) / POSITION_BINS - 1e-12)
            want[int(data.correct[i])][k] += 1
        np.testing.assert_array_equal(pos.correct, want[1])
        np.testing.assert_array_equal(pos.wrong, want[0])
        assert pos.correct.sum() + pos.wrong.sum() == data.task_rows[task].size


def test_the_section_and_its_exported_figure(run: Path, tmp_path: Path) -> None:
    data = load_run(run, ["trace"])
    tables = {t: task_span_table(data.tokens[t]) for t in data.tasks}
    html = localisation_section(data, tables, tmp_path)
    assert html.startswith('<section id="localisation"><h2>Where answers go wrong</h2>')
    assert html.count('class="panel"') == len(data.tasks)
    for task in data.tasks:
        n_ok = int(data.correct[data.task_rows[task]].sum())
        assert f"{n_ok} correct · {data.task_rows[task].size - n_ok} wrong answers" in html
    assert html.count("<title>correct:") == html.count("<title>wrong:") == POSITION_BINS * len(data.tasks)
    svg = (tmp_path / FIGURE_FILE).read_text(encoding="utf-8")
    assert svg.startswith("<?xml") and svg[svg.index("<svg") :] in html
    none = TaskTokens([], np.zeros(0), np.zeros(0), np.zeros(1, np.int64), np.zeros(0, bool))
    assert localisation_section(data, {t: task_span_table(none) for t in data.tasks}) == ""


def test_the_report_links_the_section(run: Path, tmp_path: Path) -> None:
    page = write_report(run, out=tmp_path / "r.html", figures_dir=tmp_path / "figs").read_text(encoding="utf-8")
    assert '<a href="#localisation">Where answers go wrong</a>' in page
    assert page.index('id="localisation"') < page.index('id="examples"')
    assert (tmp_path / "figs" / FIGURE_FILE).exists()
    assert re.search(r'<mark class="risk">span</mark> risky span', page)  # the examples' legend
