"""Results: the long frame, and the writers (JSON, CSV, Markdown) read back."""

from __future__ import annotations

import csv
import io
import json
import math

from tracecal.evaluation.results import METRICS, Results, results_csv, results_markdown

METRIC = {"mean": 0.75, "sd": 0.05, "n_seeds": 3}
TASK = {"accuracy": 0.5, "n_correct_cal": 2, "n_correct_eval": 3, "zero_token_answers": 0, "label_rule": "rule"}


def _results() -> Results:
    names = ("trace", "mean_prob")
    per = {
        e: {m: dict(METRIC, mean=0.5 + 0.1 * i + 0.01 * j) for j, m in enumerate(METRICS)} for i, e in enumerate(names)
    }
    metrics = {t: {e: {m: dict(v) for m, v in ms.items()} for e, ms in per.items()} for t in ("triviaqa", "svamp")}
    metrics["svamp"]["mean_prob"]["auroc"] = {"mean": math.nan, "sd": math.nan, "n_seeds": 0}
    fam = {"trace": "TRACE", "mean_prob": "likelihood"}
    est = {e: {"family": fam[e], "stats": [], "passes": ["traces"], "description": e} for e in names}
    return Results(
        {"n_seeds": 3},
        {t: dict(TASK, n=n) for t, n in (("triviaqa", 10), ("svamp", 12))},
        metrics,
        est,
        [],
        {"score": 1.5},
    )


def test_to_frame_and_rows_are_long() -> None:
    res = _results()
    frame = res.to_frame()
    assert list(frame.columns) == ["task", "estimator", "metric", "mean", "sd", "n_seeds"]
    assert len(frame) == 2 * 2 * len(METRICS) == len(res.to_rows())
    row = frame[(frame.task == "triviaqa") & (frame.estimator == "mean_prob") & (frame.metric == "brier")].iloc[0]
    assert row["mean"] == 0.6 + 0.01 * METRICS.index("brier") and row["n_seeds"] == 3
    assert res.table("auroc")["trace"]["svamp"] == (0.5, 0.05)


def test_json_round_trip_and_csv_rows() -> None:
    res = _results()
    back = Results.from_json(json.loads(json.dumps(res.to_json())))
    assert back.metrics["triviaqa"] == res.metrics["triviaqa"] and back.timings == {"score": 1.5}
    assert math.isnan(back.metrics["svamp"]["mean_prob"]["auroc"]["mean"])
    rows = list(csv.DictReader(io.StringIO(results_csv(res))))
    assert len(rows) == len(res.to_rows()) and results_csv(back.to_json()) == results_csv(res)
    first = rows[0]
    assert (first["task"], first["estimator"], first["metric"]) == ("triviaqa", "trace", METRICS[0])
    assert float(first["mean"]) == 0.5


def test_markdown_has_one_row_per_task_and_estimator() -> None:
    md = results_markdown(_results())
    lines = [ln for ln in md.splitlines() if ln.startswith("| ") and not ln.startswith("| task")]
    assert md.startswith("| task |") and sum("trace" in ln for ln in lines) >= 2
    assert results_markdown(_results().to_json()) == md
