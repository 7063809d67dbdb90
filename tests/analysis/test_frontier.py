"""The cost–quality frontier on a synthetic run: costs accounted as documented, the frontier set, paired
intervals against TRACE+, a run read as far as its samples got."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tracecal.analysis.frontier import (
    COST_AXES,
    estimator_cost,
    frontier_markdown,
    frontier_set,
    run_frontier,
    stored_labels,
)
from tracecal.evaluation.runstore import NotARunError, RunStore
from tracecal.testing import add_synthetic_passes, add_synthetic_samples, write_synthetic_run

N, SHARD = 160, 64
TIMES = {"generate": 32.0, "extra": 16.0, "beam": 80.0, "semantic": 8.0}  # wall seconds
SEMANTIC_CPU = 6.0  # the semantic pass also has its process CPU time recorded: the frontier reads that one
SAMPLE_COST = {"sample_decode_tokens": 120.0, "sample_forward_passes": 14.0, "sample_cpu_seconds": 2.0}
ESTIMATORS = "trace-only,extra,beam,semantic,sampling"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> RunStore:
    path = write_synthetic_run(
        tmp_path_factory.mktemp("front") / "run", tasks=("triviaqa",), n_per_task=N, shard_size=SHARD, n_seeds=5
    )
    store = RunStore(path)
    add_synthetic_passes(store, ["triviaqa"], shard_size=SHARD)
    add_synthetic_samples(store, "triviaqa", k=10, shard_size=SHARD, cost=SAMPLE_COST)
    for stage, seconds in TIMES.items():  # the synthetic run's own generate time is replaced below
        cpu = SEMANTIC_CPU if stage == "semantic" else None
        store.add_time(f"{stage}/triviaqa", seconds - store.timings().get(f"{stage}/triviaqa", 0.0), cpu)
    return store


@pytest.fixture(scope="module")
def doc(run: RunStore) -> dict:
    return run_frontier(run, estimators=[ESTIMATORS], n_boot=200)


def _points(doc: dict) -> dict:
    return {p["estimator"]: p for p in doc["tasks"]["triviaqa"]["points"]}


def test_costs_are_accounted_as_documented(run: RunStore, doc: dict) -> None:
    p = _points(doc)
    traces = run.read_traces("triviaqa")
    tokens = np.mean([len(t.token_ids) for t in traces])  # every synthetic answer stopped (eos): + 1 call
    greedy = TIMES["generate"] / N
    assert p["trace"]["cpu_seconds"] == pytest.approx(greedy)
    assert p["trace"]["decode_tokens"] == pytest.approx(tokens)
    assert p["trace"]["forward_passes"] == pytest.approx(tokens + 1)
    for name in ("trace_plus", "trace_plus_cv"):
        assert {a: p[name][a] for a in COST_AXES} == {a: p["trace"][a] for a in COST_AXES}
    assert p["p_true"]["cpu_seconds"] == pytest.approx(greedy + TIMES["extra"] / N / 2)
    assert p["p_true"]["forward_passes"] == pytest.approx(tokens + 2)
    assert p["verbalized"]["forward_passes"] == pytest.approx(tokens + 3)
    assert p["beam_ratio"]["cpu_seconds"] == pytest.approx(greedy + TIMES["beam"] / N)
    assert p["beam_ratio"]["decode_tokens"] == pytest.approx(tokens + 5 * 32)
    assert p["tokensar"]["cpu_seconds"] == pytest.approx(greedy + SEMANTIC_CPU / N / 2)  # CPU, not wall
    assert p["tokensar"]["forward_passes"] == pytest.approx(tokens + 1)
    for k in (2, 5, 10):
        q = p[f"self_consistency_k{k}"]
        assert q["cpu_seconds"] == pytest.approx(greedy + 2.0 * k / 10)
        assert q["decode_tokens"] == pytest.approx(tokens + 120.0 * k / 10)
        assert q["forward_passes"] == pytest.approx(tokens + 1 + 14.0 * k / 10)
    clocks = doc["tasks"]["triviaqa"]["clocks"]
    assert clocks["traces"] == clocks["extra"] == clocks["beam"] == "wall" and clocks["semantic"] == "cpu"
    assert clocks["samples"] == "measured"


def test_one_point_per_estimator_and_the_best_statistic(doc: dict) -> None:
    d = doc["tasks"]["triviaqa"]
    names = [p["estimator"] for p in d["points"]]
    assert len(names) == len(set(names))
    best = d["best_statistic"]
    assert best in names and best not in ("trace", "trace_plus", "trace_plus_cv")
    single = {"trace", "trace_plus", "trace_plus_cv", best}
    assert {n for n, p in _points(doc).items() if p["group"] == "single pass"} == single
    assert {"p_true", "verbalized", "beam_ratio", "tokensar", "mars", "semantic_entropy_k5"} <= set(names)
    assert d["n"] == d["n_run"] == N and d["k_max"] == 10


def test_paired_intervals_against_trace_plus(doc: dict) -> None:
    for name, p in _points(doc).items():
        if name == "trace_plus":
            assert "vs_trace_plus" not in p
            continue
        for m in ("auroc", "brier"):
            c = p["vs_trace_plus"][m]
            ref = _points(doc)["trace_plus"][m]["mean"]
            assert c["diff"] == pytest.approx(p[m]["mean"] - ref)
            assert c["lo"] <= c["hi"] and c["verdict"] in ("better", "worse", "n.s.")


def test_the_frontier_is_the_undominated_set(doc: dict) -> None:
    d = doc["tasks"]["triviaqa"]
    pts = {p["estimator"]: p for p in d["points"]}
    for axis in COST_AXES:
        on = set(d["frontier"][axis])
        for n, p in pts.items():
            dominated = any(
                q[axis] <= p[axis]
                and q["auroc"]["mean"] >= p["auroc"]["mean"]
                and (q[axis] < p[axis] or q["auroc"]["mean"] > p["auroc"]["mean"])
                for m, q in pts.items()
                if m != n
            )
            assert (n in on) == (not dominated), (axis, n)


def test_frontier_set_by_hand() -> None:
    pts = {"a": (1.0, 0.6), "b": (1.0, 0.7), "c": (2.0, 0.65), "d": (3.0, 0.8), "e": (3.0, 0.8), "f": (0.5, math.nan)}
    assert frontier_set(pts) == ["b", "d", "e"]
    assert frontier_set({"x": (2.0, 0.5), "y": (1.0, 0.9)}) == ["y"]


def test_estimator_cost_shares() -> None:
    costs = {
        "traces": {"decode_tokens": 10.0, "forward_passes": 11.0, "cpu_seconds": 1.0},
        "samples": {"decode_tokens": 100.0, "forward_passes": 20.0, "cpu_seconds": 8.0},
    }
    c = estimator_cost("semantic_entropy_k2", costs, 10)
    assert c == pytest.approx({"decode_tokens": 30.0, "forward_passes": 15.0, "cpu_seconds": 2.6})


def test_a_run_stopped_part_way_is_read_as_far_as_its_samples_got(tmp_path) -> None:
    path = write_synthetic_run(tmp_path / "run", tasks=("triviaqa",), n_per_task=N, shard_size=SHARD, n_seeds=3)
    store = RunStore(path)
    add_synthetic_samples(store, "triviaqa", k=5, shard_size=SHARD)
    (path / "samples" / "triviaqa" / "00002.parquet").unlink()
    d = run_frontier(store, estimators=["trace,trace_plus,neg_mean_entropy,sampling"], n_boot=50)["tasks"]["triviaqa"]
    assert (d["n"], d["n_run"], d["k_max"]) == (2 * SHARD, N, 5)
    assert "self_consistency_k10" not in _points({"tasks": {"triviaqa": d}})  # needs 10 samples: K = 5 only
    assert (path / "frontier.json").exists() and "self_consistency_k5" in (path / "frontier.md").read_text()


def test_markdown_has_a_row_per_point(doc: dict) -> None:
    md = frontier_markdown(doc)
    d = doc["tasks"]["triviaqa"]
    rows = [ln for ln in md.splitlines() if ln.startswith("| ") and not ln.startswith("| estimator")]
    assert len(rows) == len(d["points"])
    assert "(reference)" in md
    note = "CPU-s of the beam, extra, traces pass(es): wall seconds"  # the passes whose CPU time was not recorded
    assert note in md and "semantic" not in md.split(note)[0].rsplit("\n", 1)[-1]


def test_an_unscored_run_is_refused(tmp_path) -> None:
    store = RunStore(tmp_path / "r")
    store.open({"tasks": ["triviaqa"]}, {})
    with pytest.raises(NotARunError, match="score-only"):
        stored_labels(store)


def test_a_document_read_back_from_json_with_nulls_is_drawn(doc: dict) -> None:
    import copy
    import json

    back = json.loads(json.dumps(copy.deepcopy(doc)))
    p = back["tasks"]["triviaqa"]["points"][0]
    p["cpu_seconds"] = None
    p["vs_trace_plus"]["auroc"] |= {"lo": None, "hi": None, "verdict": "n/a"}
    md = frontier_markdown(back)
    assert "(no interval)" in md and f"| {p['estimator']} |" in md
