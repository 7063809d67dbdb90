"""The figure the report opens with (`tracecal.report.overview`): every estimator and task in it, sorted by the
average AUROC, bars on the AUROC axis from the paired intervals, colours from the verdicts; first in the report."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from tracecal.report import write_report
from tracecal.report.overview import COLOURS, OVERVIEW_FILE, overview_order, overview_svg
from tracecal.report.svg import XML_PROLOG
from tracecal.testing import write_synthetic_run

NS = "{http://www.w3.org/2000/svg}"
EST = ["trace", "trace_plus", "mean_prob", "p_true"]
TASKS = ["triviaqa", "svamp"]
AUROC = {  # task -> estimator -> mean AUROC
    "triviaqa": {"trace": 0.70, "trace_plus": 0.74, "mean_prob": 0.66, "p_true": 0.55},
    "svamp": {"trace": 0.62, "trace_plus": 0.60, "mean_prob": 0.64, "p_true": 0.52},
}


def _results(with_comparisons: bool = True) -> dict[str, Any]:
    metrics: dict[str, Any] = {
        t: {e: {"auroc": {"mean": v, "sd": 0.02, "n_seeds": 5}} for e, v in per.items()} for t, per in AUROC.items()
    }
    metrics["average"] = {e: {"auroc": {"mean": sum(AUROC[t][e] for t in TASKS) / 2, "sd": float("nan")}} for e in EST}
    res: dict[str, Any] = {"metrics": metrics}
    if with_comparisons:
        comp = {}
        for t in TASKS:
            base = "mean_prob"  # the best non-TRACE estimator on both tasks
            ests = {}
            for e in EST:
                if e != base:
                    d = AUROC[t][e] - AUROC[t][base]
                    verdict = "better" if d - 0.03 > 0 else "worse" if d + 0.03 < 0 else "n.s."
                    ests[e] = {"auroc": {"diff": d, "lo": d - 0.03, "hi": d + 0.03, "verdict": verdict}}
            comp[t] = {"baseline": base, "level": 0.95, "n_boot": 200, "estimators": ests}
        res["statistics"] = {"comparisons": comp}
    return res


def _texts(svg: str) -> list[str]:
    return ["".join(el.itertext()) for el in ET.fromstring(svg).iter(f"{NS}text")]


def test_every_estimator_and_task_is_in_the_figure_best_first() -> None:
    svg = overview_svg(_results(), TASKS, EST)
    texts = _texts(svg)
    for name in [*EST, *TASKS, "average"]:
        assert name in texts
    rows = [t for t in texts if t in EST]
    assert rows == overview_order(_results(), EST, TASKS) == ["trace_plus", "trace", "mean_prob", "p_true"]
    assert "best: trace_plus 0.740" in texts and "best: mean_prob 0.640" in texts
    assert "<script" not in svg and "href" not in svg


def _dots(svg: str) -> dict[str, tuple[float, str]]:
    """Tooltip head ('est on task') → (x, fill) of every dot and diamond."""
    out = {}
    for el in ET.fromstring(svg).iter():
        title = el.find(f"{NS}title")
        if el.tag in (f"{NS}circle", f"{NS}path") and title is not None:
            head = (title.text or "").split(":")[0]
            x = float(el.get("cx") or re.match(r"M([0-9.]+)", el.get("d") or "").group(1))  # type: ignore[union-attr]
            out[head] = (x, el.get("fill") or "")
    return out


def test_colours_follow_the_verdicts_and_bars_the_paired_intervals() -> None:
    svg = overview_svg(_results(), TASKS, EST)
    dots = _dots(svg)
    assert dots["trace_plus on triviaqa"][1] == COLOURS["better"]
    assert dots["p_true on triviaqa"][1] == COLOURS["worse"]
    assert dots["trace on svamp"][1] == COLOURS["n.s."]
    assert dots["mean_prob on svamp"][1] == COLOURS["baseline"]
    assert dots["trace on average"][1] == COLOURS["none"]  # no comparisons for the average here
    # on one axis, a larger AUROC lies further right
    assert dots["trace_plus on triviaqa"][0] > dots["trace on triviaqa"][0] > dots["mean_prob on triviaqa"][0]
    # a bar is baseline + [lo, hi]: centred on the dot (diff ± 0.03) and 0.06 AUROC wide in every panel
    bars = [
        (float(ln.get("x1") or 0), float(ln.get("x2") or 0))
        for ln in ET.fromstring(svg).iter(f"{NS}line")
        if ln.get("stroke-width") == "2"
    ]
    assert len(bars) == 2 * 3  # the three estimators compared with the baseline, on both tasks
    widths = [b - a for a, b in bars]
    assert min(widths) > 10 and max(widths) - min(widths) < 0.2
    centres = sorted((a + b) / 2 for a, b in bars)
    task_dots = sorted(x for k, (x, f) in dots.items() if "average" not in k and f != COLOURS["baseline"])
    assert centres == pytest.approx(task_dots, abs=0.15)
    plain = overview_svg(_results(with_comparisons=False), TASKS, EST)
    assert {f for _, f in _dots(plain).values()} == {COLOURS["none"]}


def test_nothing_to_draw_gives_no_figure() -> None:
    assert overview_svg({"metrics": {}}, TASKS, EST) == ""
    nan = {"metrics": {t: {e: {"auroc": {"mean": float("nan")}} for e in EST} for t in TASKS}}
    assert overview_svg(nan, TASKS, EST) == ""


def test_the_report_opens_with_the_figure(tmp_path: Path) -> None:
    half = {"triviaqa": 0.5, "svamp": 0.5}  # ≈ 100 correct and 100 wrong answers each: both tasks ranked
    run = write_synthetic_run(tmp_path / "run", ("triviaqa", "svamp"), n_per_task=200, n_seeds=2, seed=5, accuracy=half)
    figs = tmp_path / "figs"
    page = write_report(run, out=tmp_path / "r.html", figures_dir=figs, estimators="trace,mean_prob,p_true").read_text()
    main = page[page.index("<main>") :]
    assert main.startswith('<main><section id="verdict"><h2>Verdict</h2>')  # the verdict, then the figure
    after = main[main.index("</section>") + len("</section>") :]
    assert after.startswith('<section id="overview"><h2>Overview</h2><figure id="fig-overview"><svg ')
    assert page.index('href="#verdict"') < page.index('href="#overview"') < page.index('href="#results"')
    svg = (figs / OVERVIEW_FILE).read_text(encoding="utf-8")
    assert svg.startswith(XML_PROLOG) and svg[len(XML_PROLOG) :] in page
    texts = _texts(svg[len(XML_PROLOG) :])
    assert {"trace", "mean_prob", "p_true", "triviaqa", "svamp", "average"} <= set(texts)
    assert "trace_plus" not in texts


@pytest.mark.parametrize("n_est", [1, 30])
def test_the_figure_grows_with_the_estimators(n_est: int) -> None:
    names = [f"est_{i}" for i in range(n_est)]
    res = {"metrics": {"t": {e: {"auroc": {"mean": 0.5 + i / 100, "sd": 0.01}} for i, e in enumerate(names)}}}
    svg = overview_svg(res, ["t"], names)
    root = ET.fromstring(svg)
    assert float(root.get("height") or 0) > 16 * n_est and [t for t in _texts(svg) if t in names] == names[::-1]
