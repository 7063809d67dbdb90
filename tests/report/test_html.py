"""The page's HTML pieces: the sortable tables' heads (text columns sort as text), escaping, the verdict section."""

from __future__ import annotations

import re

from tracecal.report.html import (
    METRIC_COLUMNS,
    RESULT_COLUMNS,
    TASK_COLUMNS,
    e,
    page,
    results_tables,
    verdict_section,
)


def test_table_heads_mark_text_and_number_columns() -> None:
    html = results_tables({"tasks": {}, "metrics": {}}, [], [])
    assert '<table class="sortable" id="task-table"><thead><tr><th class="l" data-type="str">task</th>' in html
    assert '<th class="" data-type="num">examples</th>' in html
    assert '<th class="l" data-type="str">label rule</th></tr></thead><tbody>' in html
    assert '<th class="l" data-type="str">family</th><th class="" data-type="num">n</th>' in html
    assert html.count("data-type=") == len(TASK_COLUMNS) + len(RESULT_COLUMNS) + len(METRIC_COLUMNS)
    assert e("<b>&") == "&lt;b&gt;&amp;"


VERDICT = {
    "headline": "Use trace_plus <calibrated> on this model & these tasks",
    "lines": ["ECE 0.031 after Platt scaling", "Serve it: tracecal serve --calibrator runs/main/<x>.json"],
    "table": [
        {
            "estimator": "trace_plus",
            "auroc": 0.71,
            "brier": 0.18,
            "ece": 0.031,
            "delta": 0.0,
            "lo": 0.0,
            "hi": 0.0,
            "level": True,
        },
        {
            "estimator": "mean_prob",
            "auroc": 0.69,
            "brier": 0.19,
            "ece": 0.05,
            "delta": -0.02,
            "lo": -0.041,
            "hi": 0.003,
            "level": True,
        },
        {
            "estimator": "p_true",
            "auroc": 0.55,
            "brier": None,
            "ece": 0.2,
            "delta": -0.16,
            "lo": -0.2,
            "hi": -0.12,
            "level": False,
        },
    ],
}


def test_the_verdict_section_renders_a_hand_made_verdict_escaped() -> None:
    html = verdict_section(VERDICT)
    assert html.startswith('<section id="verdict"><h2>Verdict</h2>') and html.endswith("</section>")
    assert "Use trace_plus &lt;calibrated&gt; on this model &amp; these tasks" in html and "<calibrated>" not in html
    assert html.count("<li>") == 2 and "runs/main/&lt;x&gt;.json" in html
    rows = re.findall(r"<tr><td class=\"l\">(.*?)</td>(.*?)</tr>", html)
    assert [r[0] for r in rows] == ["trace_plus", "mean_prob", "p_true"]
    assert "<td>0.710</td><td>0.180</td><td>0.031</td>" in rows[0][1] and rows[0][1].endswith(">yes</td>")
    assert "−" not in html and '-0.020 <span class="sd">[-0.041, +0.003]</span>' in rows[1][1]
    assert "<td>—</td>" in rows[2][1] and rows[2][1].endswith(">no</td>")  # a missing number: a dash
    assert verdict_section(None) == "" and verdict_section({}) == ""
    assert (
        verdict_section({"headline": "h"})
        == '<section id="verdict"><h2>Verdict</h2><p class="headline">h</p></section>'
    )


def test_the_page_opens_with_the_verdict_and_links_it_first() -> None:
    doc = page("t", [], [verdict_section(VERDICT), '<section id="results">r</section>'], "{}")
    main = doc[doc.index("<main>") :]
    assert main.startswith('<main><section id="verdict">')
    assert doc.index('href="#verdict"') < doc.index('href="#results"')
    assert 'href="#verdict"' not in page("t", [], ['<section id="results">r</section>'], "{}")
