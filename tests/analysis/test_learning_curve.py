"""Learning curves on a synthetic run: stratified draws, the JSON / CSV / SVG written through the run store, the
command and its errors, and the report's statistics section (comparisons, selective answering, curves)."""

from __future__ import annotations

import csv
import io
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tracecal.analysis.learning_curve import learning_curve, run_learning_curve
from tracecal.cli.app import app
from tracecal.evaluation.protocol import ScoreConfig, score_tasks
from tracecal.evaluation.results import results_csv, results_markdown
from tracecal.evaluation.runstore import RunStore
from tracecal.evaluation.stored_tasks import load_stored_tasks
from tracecal.report import write_report
from tracecal.report.learning_curve import run_learning_curve as draw_learning_curve
from tracecal.testing import write_synthetic_run

EST = ["trace", "trace_plus_prior", "mean_prob"]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_synthetic_run(tmp_path_factory.mktemp("lc") / "run", tasks=("triviaqa", "svamp"), n_per_task=240)


def test_learning_curve_writes_json_csv_and_svg(run: Path) -> None:
    doc = draw_learning_curve(run, ["triviaqa"], EST, sizes=[20, 40, 120], n_splits=4, n_boot=100)
    lc = doc["tasks"]["triviaqa"]
    assert lc["sizes"] == [20, 40, 120] and lc["n"] == 240 and set(lc["estimators"]) == set(EST)
    for points in lc["estimators"].values():
        assert [p["size"] for p in points] == [20, 40, 120]
        for p in points:
            a = p["auroc"]
            assert a["n_splits"] == 4 and a["lo"] <= a["hi"] and 0 < p["brier"]["mean"] < 0.5
            assert p["n_correct_cal"] == pytest.approx(p["size"] * lc["n_correct"] / lc["n"], abs=1.0)
    assert lc["estimators"]["trace"][-1]["auroc"]["mean"] > 0.6  # the synthetic traces carry a signal
    store = RunStore(run)
    assert store.read_artefact("learning_curve")["tasks"]["triviaqa"] == lc
    rows = list(csv.DictReader(io.StringIO((run / "learning_curve.csv").read_text())))
    assert len(rows) == 3 * 3 * 2 and {r["metric"] for r in rows} == {"auroc", "brier"}
    svg = ET.fromstring((run / "learning_curve_triviaqa.svg").read_text())  # well-formed
    assert svg.tag.endswith("svg") and "trace_plus_prior" in ET.tostring(svg, encoding="unicode")
    run_learning_curve(run, ["svamp"], ["trace"], sizes=[30], n_splits=2, n_boot=0)
    both = store.read_artefact("learning_curve")["tasks"]
    assert set(both) == {"triviaqa", "svamp"} and both["svamp"]["estimators"]["trace"][0]["auroc"]["lo"] is None


def test_bad_sizes_and_tasks_are_refused(run: Path) -> None:
    data = load_stored_tasks(run, ["trace"], ["triviaqa"])[0]
    with pytest.raises(ValueError, match="leaves too few answers"):
        learning_curve(data, ["trace"], sizes=[239], n_splits=1, n_boot=0)
    with pytest.raises(ValueError, match="whole numbers ≥ 2"):
        learning_curve(data, ["trace"], sizes=[1], n_splits=1, n_boot=0)
    with pytest.raises(ValueError, match="not in"):
        load_stored_tasks(run, ["trace"], ["mlqa"])
    r = CliRunner().invoke(app, ["learning-curve", str(run), "--sizes", "10,x"])
    assert r.exit_code == 2 and "whole numbers" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(app, ["learning-curve", str(run), "--sizes", "100000", "--tasks", "svamp"])
    assert r.exit_code == 2 and "leaves too few answers" in r.output


def test_focus_methods_get_paired_differences(run: Path) -> None:
    """Each focus method's difference from every other method at each size is the difference of their reported
    means, with a paired interval around it; a method against itself is absent; a method far ahead is ▲."""
    data = load_stored_tasks(run, EST, ["triviaqa"])[0]
    lc = learning_curve(data, EST, sizes=[40, 120], n_splits=4, n_boot=200, focus=["trace"])
    for k, p in enumerate(lc["estimators"]["trace"]):
        assert set(p["vs"]) == {"trace_plus_prior", "mean_prob"}
        for other, cmp in p["vs"].items():
            for m in ("auroc", "brier"):
                want = p[m]["mean"] - lc["estimators"][other][k][m]["mean"]
                assert cmp[m]["diff"] == pytest.approx(want) and cmp[m]["lo"] <= cmp[m]["hi"]
                assert cmp[m]["verdict"] in {"better", "worse", "n.s."}
    assert "vs" not in lc["estimators"]["mean_prob"][0]
    # on these synthetic traces mean p ranks far better than TRACE (by 0.085 AUROC at 120): significantly, paired
    far = lc["estimators"]["trace"][-1]["vs"]["mean_prob"]["auroc"]
    assert far["diff"] < -0.05 and far["hi"] < 0 and far["verdict"] == "worse", far
    with pytest.raises(ValueError, match="not among the estimators"):
        learning_curve(data, ["trace"], sizes=[40], n_splits=1, n_boot=0, focus=["trace_plus"])
    r = CliRunner().invoke(
        app,
        [
            "learning-curve",
            str(run),
            "--tasks",
            "triviaqa",
            "--sizes",
            "40",
            "--splits",
            "2",
            "--n-boot",
            "50",
            "--estimators",
            "trace,mean_prob",
            "--focus",
            "trace",
        ],
    )
    assert r.exit_code == 0 and "trace − other" in " ".join(r.output.split()), r.output


def test_the_command_prints_the_curves(run: Path) -> None:
    r = CliRunner().invoke(
        app,
        [
            "learning-curve",
            str(run),
            "--tasks",
            "svamp",
            "--sizes",
            "20,60",
            "--splits",
            "2",
            "--n-boot",
            "50",
            "--estimators",
            "trace,mean_prob",
        ],
    )
    assert r.exit_code == 0, r.output
    assert "svamp" in r.output and "mean_prob" in r.output


def test_the_report_shows_comparisons_selective_answering_and_curves(run: Path) -> None:
    store = RunStore(run)
    names = ["trace", "mean_prob", "neg_mean_entropy", "min_prob"]
    res = score_tasks(load_stored_tasks(store, names), ScoreConfig(names, n_seeds=3, n_boot=200, sel_alpha=0.4))
    store.write_results(res.to_json(), results_csv(res), results_markdown(res))
    run_learning_curve(run, ["triviaqa"], ["trace"], sizes=[40], n_splits=2, n_boot=50)
    html = write_report(run).read_text()
    stats = html[html.index('<section id="statistics">') :]
    stats = stats[: stats.index("</section>")]
    assert "Paired comparisons" in stats and "against " in stats and "Selective answering" in stats
    assert 'id="fig-learning-curve-triviaqa"' in stats and 'href="#statistics"' in html
    assert "risk ≤ 0.4" in results_markdown(res)


@pytest.mark.parametrize("sizes", ["", " , ", "1", "abc", "-4"])
def test_bad_sizes_never_overwrite_the_stored_curve(tmp_path: Path, sizes: str) -> None:
    run = write_synthetic_run(tmp_path / "run", tasks=("triviaqa",), n_per_task=60, n_seeds=2)
    common = ["--splits", "2", "--n-boot", "0", "--estimators", "trace"]
    ok = CliRunner().invoke(app, ["learning-curve", str(run), "--sizes", "10,20", *common])
    assert ok.exit_code == 0, ok.output
    before = {p.name: p.read_bytes() for p in run.glob("learning_curve*")}
    r = CliRunner().invoke(app, ["learning-curve", str(run), f"--sizes={sizes}", *common])
    assert r.exit_code == 2 and "sizes" in r.output and "Traceback" not in r.output, r.output
    assert {p.name: p.read_bytes() for p in run.glob("learning_curve*")} == before
