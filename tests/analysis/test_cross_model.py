"""The cross-model table from results files: settings, wins counted as the paper counts, combined intervals."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tracecal.analysis.cross_model import cross_model_markdown, cross_model_table, read_results


def results(task_vals: dict[str, tuple[float, float, float, float]]) -> dict:
    """task -> (baseline brier, baseline auroc, trace_plus brier, trace_plus auroc); intervals ±0.01 around diffs."""
    metrics, comps = {}, {}
    for t, (bb, ba, tb, ta) in task_vals.items():
        metrics[t] = {
            "min_prob": {"brier": {"mean": bb}, "auroc": {"mean": ba}},
            "trace_plus": {"brier": {"mean": tb}, "auroc": {"mean": ta}},
            "trace": {"brier": {"mean": bb}, "auroc": {"mean": ba}},
        }
        est = {
            "trace_plus": {
                "brier": {"diff": tb - bb, "lo": tb - bb - 0.01, "hi": tb - bb + 0.01},
                "auroc": {"diff": ta - ba, "lo": ta - ba - 0.01, "hi": ta - ba + 0.01},
            },
            "trace": {m: {"diff": 0.0, "lo": -0.01, "hi": 0.01} for m in ("brier", "auroc")},
        }
        comps[t] = {"baseline": "min_prob", "level": 0.95, "estimators": est}
    metrics["average"] = {}
    return {"metrics": metrics, "statistics": {"comparisons": comps}}


def test_wins_are_counted_per_setting_and_significance_from_the_interval() -> None:
    a = results({"svamp": (0.2, 0.7, 0.15, 0.75), "triviaqa": (0.2, 0.7, 0.199, 0.705), "mlqa": (0.1, 0.8, 0.2, 0.6)})
    doc = cross_model_table({"A": a}, {"two": ("svamp", "triviaqa"), "all": ("svamp", "triviaqa", "mlqa")})
    won = doc["models"]["A"]["two"]["trace_plus"]["won"]
    assert (won["brier"], won["auroc"]) == (2, 2)
    assert (won["brier_sig"], won["auroc_sig"]) == (1, 1)  # only svamp's differences exclude 0
    assert doc["models"]["A"]["all"]["trace_plus"]["won"]["auroc"] == 2
    assert doc["models"]["A"]["all"]["trace"]["won"]["auroc"] == 0  # a tie is not a win


def test_averages_and_the_combined_interval() -> None:
    a = results({"svamp": (0.2, 0.7, 0.1, 0.8), "triviaqa": (0.2, 0.6, 0.2, 0.7)})
    doc = cross_model_table({"A": a}, {"two": ("svamp", "triviaqa")})
    s = doc["models"]["A"]["two"]
    assert s["best baseline"]["auroc"] == pytest.approx(0.65) and s["trace_plus"]["auroc"] == pytest.approx(0.75)
    d, lo, hi = s["trace_plus"]["auroc_diff"]
    assert d == pytest.approx(0.1)
    assert hi - d == pytest.approx(math.sqrt(2 * 0.01**2) / 2, rel=1e-9)  # se_i = 0.01 / z; sqrt(Σ se²)/k × z


def test_pooled_over_models_and_the_markdown(tmp_path: Path) -> None:
    a = results({"svamp": (0.2, 0.7, 0.1, 0.8)})
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "results.json").write_text(json.dumps(results({"svamp": (0.2, 0.7, 0.3, 0.6)})))
    doc = cross_model_table({"A": a, "B": read_results(tmp_path / "b")}, {"s": ("svamp",)})
    assert doc["pooled"]["s"]["trace_plus"]["won"]["auroc"] == 1 and doc["pooled"]["s"]["n_settings"] == 2
    md = cross_model_markdown(doc)
    assert "**pooled**" in md and "| A | best baseline |" in md and "1 (1) / 1 (1) of 2" in md


def test_a_task_without_comparisons_is_not_a_setting() -> None:
    a = results({"svamp": (0.2, 0.7, 0.1, 0.8)})
    a["metrics"]["mlqa"] = a["metrics"]["svamp"]  # scored, but no paired comparison stored (e.g. one class)
    doc = cross_model_table({"A": a}, {"both": ("svamp", "mlqa")})
    assert doc["models"]["A"]["both"]["n_settings"] == 1


def test_min_correct_keeps_only_the_informative_settings() -> None:
    a = results({"svamp": (0.2, 0.7, 0.1, 0.8), "triviaqa": (0.2, 0.7, 0.3, 0.6)})
    a["tasks"] = {"svamp": {"n_correct": 12}, "triviaqa": {"n_correct": 300}}
    sets = {"both": ("svamp", "triviaqa")}
    assert cross_model_table({"A": a}, sets)["models"]["A"]["both"]["n_settings"] == 2
    doc = cross_model_table({"A": a}, sets, min_correct=50)
    s = doc["models"]["A"]["both"]
    assert s["n_settings"] == 1 and s["trace_plus"]["auroc"] == pytest.approx(0.6)  # triviaqa only
    assert doc["min_correct"] == 50 and list(doc["settings"]["A"]) == ["triviaqa"]
    none = cross_model_table({"A": a}, sets, min_correct=1000)["models"]["A"]["both"]
    assert none["n_settings"] == 0 and math.isnan(none["trace_plus"]["auroc"])
    assert "| A | best baseline | — |" in cross_model_markdown(cross_model_table({"A": a}, sets, min_correct=1000))
