"""The page's HTML pieces: the sortable tables' heads (text columns sort as text), escaping."""

from __future__ import annotations

from tracecal.report.html import METRIC_COLUMNS, RESULT_COLUMNS, TASK_COLUMNS, e, results_tables


def test_table_heads_mark_text_and_number_columns() -> None:
    html = results_tables({"tasks": {}, "metrics": {}}, [], [])
    assert '<table class="sortable" id="task-table"><thead><tr><th class="l" data-type="str">task</th>' in html
    assert '<th class="" data-type="num">examples</th>' in html
    assert '<th class="l" data-type="str">label rule</th></tr></thead><tbody>' in html
    assert '<th class="l" data-type="str">family</th><th class="" data-type="num">n</th>' in html
    assert html.count("data-type=") == len(TASK_COLUMNS) + len(RESULT_COLUMNS) + len(METRIC_COLUMNS)
    assert e("<b>&") == "&lt;b&gt;&amp;"
