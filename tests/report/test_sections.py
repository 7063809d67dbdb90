"""The report's figure sections (`tracecal.report.sections`): a task of few positives collapsed with its reason
everywhere and in no average or "best" mark; reliability panels of the estimators that matter first."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from tracecal.report import write_report
from tracecal.report.sections import KEY_MAX, NOT_RANKED_FILE, key_estimators
from tracecal.report.svg import XML_PROLOG
from tracecal.testing import SYNTHETIC_ESTIMATORS, write_synthetic_run

NS = "{http://www.w3.org/2000/svg}"
ACCURACY = {"triviaqa": 0.5, "svamp": 0.4, "mlqa": 0.02}  # mlqa: ≈ 6 correct answers of 300


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    tmp = tmp_path_factory.mktemp("sections")
    run = write_synthetic_run(tmp / "run", tuple(ACCURACY), n_per_task=300, n_seeds=3, seed=2, accuracy=ACCURACY)
    out = write_report(run, out=tmp / "r.html", figures_dir=tmp / "figs")
    return out.read_text(encoding="utf-8"), tmp / "figs"


def _section(page: str, sec: str) -> str:
    start = page.index(f'<section id="{sec}">')
    return page[start : page.index("</section>", start)]


def _details(html: str) -> list[str]:
    return re.findall(r'<details class="not-ranked"[^>]*><summary>(.*?)</summary>', html)


def test_a_task_of_few_positives_is_collapsed_with_its_reason_in_every_section(page: tuple[str, Path]) -> None:
    html, _ = page
    for sec in ("overview", "reliability", "risk-coverage", "histograms", "statistics"):
        summaries = _details(_section(html, sec))
        assert summaries and all("mlqa" in s and "too few to rank or calibrate" in s for s in summaries), sec
        assert not any("triviaqa" in s or "svamp" in s for s in summaries), sec
    for kind in ("reliability", "risk-coverage", "histogram"):  # its figures only inside the collapsed block
        fig = html.index(f'<figure id="fig-{kind}-mlqa">')
        assert html.rfind('<details class="not-ranked"', 0, fig) > html.rfind("</details>", 0, fig)
    assert "No task of this run" not in html


def test_it_is_in_no_average_and_no_best_mark(page: tuple[str, Path]) -> None:
    html, figs = page
    overview = (figs / "overview.svg").read_text(encoding="utf-8")[len(XML_PROLOG) :]
    texts = ["".join(el.itertext()) for el in ET.fromstring(overview).iter(f"{NS}text")]
    assert {"triviaqa", "svamp", "average"} <= set(texts) and "mlqa" not in texts
    apart = (figs / NOT_RANKED_FILE).read_text(encoding="utf-8")[len(XML_PROLOG) :]
    texts = ["".join(el.itertext()) for el in ET.fromstring(apart).iter(f"{NS}text")]
    assert "mlqa" in texts and "average" not in texts and not any(t.startswith("best:") for t in texts)
    assert 'stroke="#111"' not in apart  # nothing ringed
    assert apart in html and overview in html
    table = _section(html, "results")
    rows = re.findall(r'<tr data-task="(\w+)"( class="[\w-]+")?>(.*?)</tr>', table)
    assert {t for t, cls, _ in rows if cls == ' class="not-ranked"'} == {"mlqa"}
    assert not any('class="best"' in cells for t, _, cells in rows if t == "mlqa")
    assert any('class="best"' in cells for t, _, cells in rows if t == "triviaqa")
    assert "<b>mlqa</b>: " in table and "no: " in table
    sel = _section(html, "statistics")
    not_ranked = sel[sel.index('id="selective-not-ranked"') :]
    assert 'class="best"' not in not_ranked[: not_ranked.index("</table>")]


def test_the_average_row_counts_the_ranked_tasks_only(page: tuple[str, Path]) -> None:
    table = _section(page[0], "results")
    avg = re.search(r'<tr data-task="average" class="avg">(.*?)</tr>', table)
    assert avg is not None
    n_cell = re.findall(r'<td data-v="([^"]*)">', avg.group(1))[0]
    assert float(n_cell) == 600  # triviaqa + svamp, not mlqa


def test_reliability_panels_of_the_estimators_that_matter_first(page: tuple[str, Path]) -> None:
    html, _ = page
    rel = _section(html, "reliability")
    key = re.search(r'<figure id="fig-reliability-triviaqa-key">(.*?)</figure>', rel, re.S)
    assert key is not None
    shown = re.findall(r'aria-label="reliability ([^"]+)"', key.group(1))
    assert shown[:2] == ["trace", "trace_plus"] and len(shown) <= KEY_MAX and {"p_true", "verbalized"} <= set(shown)
    full = rel.index('<figure id="fig-reliability-triviaqa">')
    assert rel.rfind('<details class="more">', 0, full) > rel.rfind("</details>", 0, full)
    assert f"All {len(SYNTHETIC_ESTIMATORS)} estimators" in rel


def _results(aurocs: dict[str, dict[str, float]]) -> dict[str, Any]:
    return {"metrics": {t: {x: {"auroc": {"mean": v}} for x, v in per.items()} for t, per in aurocs.items()}}


def test_key_estimators() -> None:
    res = _results({"a": {"trace": 0.6, "m": 0.7, "n": 0.65}, "b": {"trace": 0.8, "m": 0.5, "n": 0.9}})
    shown = ["n", "m", "trace", "trace_plus", "p_true", "verbalized", "z"]
    assert key_estimators(res, ["a", "b"], shown) == ["trace", "trace_plus", "m", "n", "p_true", "verbalized"]
    assert key_estimators(res, ["a"], shown, k=3) == ["trace", "trace_plus", "m"]
    assert key_estimators(res, [], ["m", "n"]) == []  # nothing ranked, no TRACE: no panel first
