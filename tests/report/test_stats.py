"""The report's statistics section (`tracecal.report.stats`): the selective-answering table shows each estimator's
smallest certified α and its coverage (not a grid of zeros), the held-out check at the run's α beside it."""

from __future__ import annotations

import math
import re
from typing import Any

from tracecal.report.stats import statistics_section
from tracecal.stats.selective import SelectiveThreshold

TASKS = ["triviaqa", "svamp"]
EST = ["trace", "p_true", "<b>evil</b>"]


def _results(with_selective: bool = True) -> dict[str, Any]:
    cell = {"sel_coverage": {"mean": 0.0, "sd": 0.0}, "sel_violation": {"mean": 0.0, "sd": 0.0}}
    res: dict[str, Any] = {"metrics": {t: {e: dict(cell) for e in EST} for t in TASKS}}
    if with_selective:
        res["statistics"] = {"selective": {"alpha": 0.1, "delta": 0.05, "holdout": 0.5}}
    return res


def _t(alpha: float, threshold: float, n: int, n_answered: int, n_errors: int) -> SelectiveThreshold:
    return SelectiveThreshold(threshold, n_answered, n_errors, 0.01, alpha, 0.05, "ltt", n)


def _certified() -> dict[str, dict[str, SelectiveThreshold]]:
    return {
        "triviaqa": {
            "trace": _t(0.31, 1.5, 130, 26, 7),
            "p_true": _t(0.45, 0.2, 130, 40, 17),
            "<b>evil</b>": _t(math.nan, math.inf, 130, 0, 0),
        },
        "svamp": {"trace": _t(0.62, 0.9, 128, 3, 1), "p_true": _t(0.28, 0.4, 128, 64, 17)},
    }


def _row(html: str, table_id: str, est: str) -> list[str]:
    table = html[html.index(f'id="{table_id}"') :]
    table = table[: table.index("</table>")]
    row = re.search(rf'<tr><td class="l">{re.escape(est)}</td>(.*?)</tr>', table)
    assert row, f"no row {est} in {table_id}"
    return re.findall(r"<td[^>]*>(.*?)</td>", row.group(1))


def test_the_table_shows_the_smallest_certified_alpha_and_its_coverage() -> None:
    html = statistics_section(_results(), TASKS, EST, certified=_certified())
    assert '<section id="statistics">' in html and "probability ≥ 0.95" in html
    cells = ['0.31 <span class="sd">(20%)</span>', '0.62 <span class="sd">(2%)</span>']
    assert _row(html, "selective-table", "trace") == cells
    assert _row(html, "selective-table", "&lt;b&gt;evil&lt;/b&gt;") == ["none", "—"]  # escaped; no scores on svamp
    assert "<b>evil</b>" not in html
    # bold: the smallest α* of each task (trace on triviaqa, p_true on svamp)
    assert re.search(r'<td data-v="0.31" title="[^"]*26 of 130 answered, 7 wrong[^"]*" class="best">', html)
    assert re.search(r'<td data-v="0.28" title="[^"]*" class="best">', html)
    assert not re.search(r'<td data-v="0.45"[^>]*class="best"', html)
    assert "(n=130)" in html and "(n=128)" in html
    # the held-out check at the run's α follows, folded
    assert html.index('id="selective-table"') < html.index('id="selective-held-out"')
    assert "<details><summary>Held-out check at α = 0.1</summary>" in html
    assert _row(html, "selective-held-out", "trace") == ['0.000 <span class="sd">(0.00)</span>'] * 2


def test_without_predictions_only_the_held_out_check_and_without_either_no_section() -> None:
    only_check = statistics_section(_results(), TASKS, EST, certified={})
    assert 'id="selective-held-out"' in only_check and 'id="selective-table"' not in only_check
    assert statistics_section(_results(with_selective=False), TASKS, EST) == ""
    just_alpha = statistics_section(_results(with_selective=False), TASKS, EST, certified=_certified())
    assert 'id="selective-table"' in just_alpha and "probability ≥ 0.9" in just_alpha  # δ = 0.1 by default
    assert 'id="selective-held-out"' not in just_alpha
