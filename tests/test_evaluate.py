"""The evaluation harness: splits, NaN mapping, resumable runs on the real model, re-scoring without generation."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

import tracecal
from tracecal import evaluate as ev
from tracecal.evaluate import ConfigMismatchError, EvalConfig, stratified_split
from tracecal.metrics import SingleClassWarning


def test_stratified_split_keeps_class_shares() -> None:
    y = np.array([1] * 20 + [0] * 80)
    cal, evl = stratified_split(y, 0.35, seed=3)
    assert len(set(cal) & set(evl)) == 0 and len(cal) + len(evl) == 100
    assert y[cal].sum() == 7 and y[evl].sum() == 13
    cal2, _ = stratified_split(y, 0.35, seed=4)
    assert not np.array_equal(cal, cal2)
    # a class with one member: falls back to a random split, no crash
    cal3, ev3 = stratified_split(np.array([1] + [0] * 9), 0.35, seed=0)
    assert len(cal3) + len(ev3) == 10


def test_sanitize_maps_non_finite_to_least_confident() -> None:
    x, n = ev._sanitize(np.array([0.2, np.nan, 0.9, -np.inf, np.inf]))
    assert n == 3 and np.all(np.isfinite(x))
    assert x[1] < 0.2 and x[3] < 0.2 and x[4] == 0.9


class Counting:
    """Wraps the session model and counts generated prompts."""

    def __init__(self, lm) -> None:  # type: ignore[no-untyped-def]
        self.lm, self.generated = lm, 0

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self.lm, name)

    def generate(self, prompts, **kw):  # type: ignore[no-untyped-def]
        self.generated += len(prompts)
        return self.lm.generate(prompts, **kw)


CFG = dict(tasks=["triviaqa"], limit=12, shard_size=4, n_seeds=4, estimators=["trace-only", "p_true", "verbalized"])


def test_run_is_resumable_and_rescoring_never_regenerates(tmp_path: Path, model, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    counting = Counting(model)
    monkeypatch.setattr(tracecal, "load_model", lambda *a, **k: counting)
    real_save = ev.save_traces
    calls = {"n": 0}

    def crashing_save(traces, path):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt("killed halfway")
        return real_save(traces, path)

    run = tmp_path / "run"
    monkeypatch.setattr(ev, "save_traces", crashing_save)
    with pytest.raises(KeyboardInterrupt):
        ev.evaluate(run, EvalConfig(**CFG))
    assert len(list((run / "traces" / "triviaqa").glob("*.parquet"))) == 1
    assert not list((run / "traces" / "triviaqa").glob(".*tmp")), "no half-written shard is left"
    assert counting.generated == 8  # shard 0 saved, shard 1 generated then lost

    monkeypatch.setattr(ev, "save_traces", real_save)
    res = ev.evaluate(run, EvalConfig(**CFG))
    assert counting.generated == 16, "the resumed run generated only the two missing shards"
    assert res is not None and res.tasks["triviaqa"]["n"] == 12

    # re-scoring with other settings loads no model and generates nothing
    monkeypatch.setattr(tracecal, "load_model", lambda *a, **k: pytest.fail("re-scoring must not load a model"))
    res2 = ev.evaluate(run, EvalConfig(**(CFG | {"n_seeds": 2, "calibrator": "isotonic"})))
    assert res2 is not None and res2.config["calibrator"] == "isotonic"

    md = ev.results_markdown(res2)
    assert "| trace |" in md and "**AUROC**" in md and "| triviaqa | 12 |" in md

    out = json.loads((run / "results.json").read_text())
    m = out["metrics"]["triviaqa"]["trace"]
    assert set(m) >= {"auroc", "brier", "ece", "aece", "auprc", "aurc", "risk@10", "risk@50", "risk@90", "base_rate"}
    assert m["n_correct_cal"]["mean"] == out["tasks"]["triviaqa"]["n_correct_cal"]
    assert (run / "results.csv").read_text().startswith("task,estimator,metric,mean,sd,n_seeds")
    for name in ("rows.parquet", "scores.parquet", "predictions.parquet", "timings.json", "config.json"):
        assert (run / name).exists(), name

    # changing what generation depends on is refused, not mixed
    with pytest.raises(ConfigMismatchError, match="limit"):
        ev.evaluate(run, EvalConfig(**(CFG | {"limit": 20})))


def test_single_class_split_gives_nan_auroc_with_warning() -> None:
    from tracecal.estimators import Inputs
    from tracecal.trace import TraceBatch

    rng = np.random.default_rng(0)
    b = TraceBatch.from_lists([rng.random(3) for _ in range(20)], [rng.random(3) for _ in range(20)])
    data = ev.TaskData("t", [], [], np.zeros(20, int), Inputs(b), "rule")
    cal, evl = stratified_split(data.y, 0.35, 0)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        m, _, prob = ev._one_split("trace", data, None, cal, evl, EvalConfig(tasks=["t"]))
    assert np.isnan(m["auroc"]) and m["brier"] == pytest.approx(0.0)
    assert any(issubclass(x.category, SingleClassWarning) for x in w)


def test_bad_config_errors() -> None:
    with pytest.raises(ValueError, match="unknown task|Unknown task|not a known task"):
        ev.evaluate("/tmp/never", EvalConfig(tasks=["trivia_qa_x"]))
    with pytest.raises(ValueError, match="estimator"):
        ev.evaluate("/tmp/never", EvalConfig(tasks=["triviaqa"], estimators=["nope"]))
    with pytest.raises(ValueError, match="calibrator|platt"):
        ev.evaluate("/tmp/never", EvalConfig(tasks=["triviaqa"], calibrator="magic"))


def _claim_of(pid: int, host: str | None = None) -> str:
    import socket
    import time

    return json.dumps({"host": host or socket.gethostname(), "pid": pid, "time": time.time()})


def test_claims_skip_live_workers_and_take_over_dead_ones(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    run = ev.RunDir(tmp_path)
    assert run.claim("traces", "t", 0), "a free shard is claimed"
    assert run.claim("traces", "t", 0), "our own leftover claim is ours to retake"
    run.release("traces", "t", 0)
    assert not run.claim_path("traces", "t", 0).exists()

    live = run.claim_path("traces", "t", 1)
    live.parent.mkdir(parents=True, exist_ok=True)
    live.write_text(_claim_of(os.getppid()))  # the parent process is alive
    assert not run.claim("traces", "t", 1), "a live worker's shard is left to it"

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    run.claim_path("traces", "t", 2).write_text(_claim_of(int(dead.stdout)))
    assert run.claim("traces", "t", 2), "a killed worker's claim is taken over"
    run.claim_path("traces", "t", 3).write_text("")  # a claim cut short while being written
    assert run.claim("traces", "t", 3)
    run.claim_path("traces", "t", 4).write_text(_claim_of(1, host="another-host"))
    assert not run.claim("traces", "t", 4), "another host's fresh claim is respected"


def test_worker_waits_for_a_shard_another_worker_holds(tmp_path: Path, model, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import os
    import threading
    import time

    counting = Counting(model)
    monkeypatch.setattr(tracecal, "load_model", lambda *a, **k: counting)
    run = ev.RunDir(tmp_path / "run")
    held = run.claim_path("traces", "triviaqa", 1)
    held.parent.mkdir(parents=True, exist_ok=True)
    held.write_text(_claim_of(os.getppid()))  # shard 1 belongs to a (live) other worker
    cfg = EvalConfig(tasks=["triviaqa"], limit=12, shard_size=4, n_seeds=2, estimators=["trace", "mean_prob"])
    box: dict[str, object] = {}
    th = threading.Thread(target=lambda: box.update(res=ev.evaluate(run.path, cfg, poll_s=0.1)))
    th.start()
    deadline = time.time() + 120
    while not (run.has("traces", "triviaqa", 0) and run.has("traces", "triviaqa", 2)) and time.time() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)
    assert th.is_alive(), "the worker waits instead of scoring an incomplete run"
    assert not run.has("traces", "triviaqa", 1) and counting.generated == 8
    held.unlink()  # the other worker died without writing its shard: this one takes it over
    th.join(timeout=120)
    assert not th.is_alive()
    res = box["res"]
    assert isinstance(res, ev.Results) and res.tasks["triviaqa"]["n"] == 12 and counting.generated == 12
    assert not list((run.path / "traces" / "triviaqa").glob("*.claim"))


def test_score_only_reports_estimators_whose_pass_is_missing_as_not_run(tmp_path: Path, model, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(tracecal, "load_model", lambda *a, **k: model)
    run = tmp_path / "run"
    two = dict(tasks=["triviaqa", "svamp"], limit=6, shard_size=3, n_seeds=2)
    ev.evaluate(run, EvalConfig(**two, estimators=["trace"]))
    # P(True) for one of the two triviaqa shards only (as if killed halfway), and none for svamp
    ev.evaluate(run, EvalConfig(**(two | {"tasks": ["triviaqa"]}), estimators=["p_true"]), stages_only=True)
    (run / "extra" / "triviaqa" / "00001.parquet").unlink()
    monkeypatch.setattr(tracecal, "load_model", lambda *a, **k: pytest.fail("score-only must not load a model"))
    cfg = EvalConfig(**two, estimators=["trace", "p_true"])
    with pytest.raises(RuntimeError, match="extra pass is incomplete"):
        ev.score_run(run, cfg)
    with pytest.warns(UserWarning, match="not scored there: p_true"):
        res = ev.evaluate(run, cfg, score_only=True)
    assert res is not None
    for task in ("triviaqa", "svamp"):
        assert res.tasks[task]["not_run"] == ["p_true"]
        assert np.isnan(res.metrics[task]["p_true"]["brier"]["mean"])
        assert res.metrics[task]["trace"]["brier"]["n_seeds"] == 2
    assert np.isnan(res.metrics["average"]["p_true"]["brier"]["mean"]), "no average over a subset of tasks"
    assert np.isfinite(res.metrics["average"]["trace"]["brier"]["mean"])
    assert "| p_true | n/a | n/a |" in ev.results_markdown(res)
    with pytest.raises(FileNotFoundError, match="not a run directory"):
        ev.evaluate(tmp_path / "nothing", cfg, score_only=True)
