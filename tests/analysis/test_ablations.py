"""The TRACE ablations: each transformation on synthetic traces, the protocol scoring, the run artefacts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracecal.analysis.ablations import (
    FEATURE_SETS,
    ablation_variants,
    operator_values,
    run_ablations,
    score_variant,
    shuffle_positions,
    sweep_configs,
)
from tracecal.signals.features import feature_names
from tracecal.signals.operators import TraceConfig, trace_risk
from tracecal.testing import write_synthetic_run
from tracecal.traces.trace import TraceBatch


def batch(lengths: list[int], seed: int = 0) -> TraceBatch:
    rng = np.random.default_rng(seed)
    n = int(sum(lengths))
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return TraceBatch(rng.exponential(1.0, n), rng.exponential(2.0, n), offsets)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 12), min_size=1, max_size=20), st.integers(0, 2**31 - 1))
def test_shuffle_keeps_every_per_trace_multiset_of_pairs(lengths: list[int], seed: int) -> None:
    b = batch(lengths)
    s = shuffle_positions(b, seed)
    assert np.array_equal(s.offsets, b.offsets)
    for i in range(len(lengths)):
        lo, hi = b.offsets[i], b.offsets[i + 1]
        before = sorted(zip(b.surprisal[lo:hi], b.entropy[lo:hi], strict=True))
        after = sorted(zip(s.surprisal[lo:hi], s.entropy[lo:hi], strict=True))
        assert before == after  # same (s_t, H_t) pairs, moved together


def test_shuffle_changes_positions_and_is_seeded() -> None:
    b = batch([30] * 5)
    assert not np.array_equal(shuffle_positions(b, 1).entropy, b.entropy)
    assert np.array_equal(shuffle_positions(b, 1).entropy, shuffle_positions(b, 1).entropy)


def test_operators_recombine_to_the_trace_risk() -> None:
    b = batch([1, 3, 7, 12, 0])
    cfg = TraceConfig()
    ops = operator_values(b, cfg)
    r = ops @ np.array([cfg.alpha, cfg.beta, cfg.gamma])
    np.testing.assert_allclose(r[:4], trace_risk(b, cfg)[:4], rtol=1e-12)
    assert np.isnan(ops[4]).all()  # a zero-token answer


def test_sweep_stays_on_the_papers_ranges() -> None:
    configs = dict(sweep_configs())
    for c in configs.values():
        assert abs(c.alpha + c.beta + c.gamma - 1.0) < 1e-9
        assert 0.2 <= c.alpha <= 0.6 and 0.2 <= c.beta <= 0.6 and 0.1 - 1e-9 <= c.gamma <= 0.4 + 1e-9
    assert {c.lam for c in configs.values()} >= {1, 2, 4, 8}
    assert {c.window for c in configs.values()} >= {2, 4, 6, 8}
    assert {c.rho for c in configs.values()} >= {0.0, 0.25, 0.5, 0.75, 1.0}
    assert "α=0.4 β=0.4 γ=0.2" in configs  # the defaults are one of the points


def test_feature_sets_are_named_trace_plus_columns() -> None:
    allowed = set(feature_names(seq_likelihood=True))
    for cols in FEATURE_SETS.values():
        assert set(cols) <= allowed and len(cols) == len(set(cols))
    assert "log_length" not in FEATURE_SETS["without length"]
    assert "entropy_slope" not in FEATURE_SETS["without slope"]
    assert len(FEATURE_SETS["+ sequence likelihood"]) == 11


def test_score_variant_on_a_separating_score() -> None:
    y = np.array([0, 1] * 50)
    x = y + np.random.default_rng(0).normal(0, 0.01, 100)
    m = score_variant("score", x, y, n_seeds=3)
    assert m["auroc"] == 1.0 and m["brier"] < 0.05
    raw = score_variant("raw", np.full(100, 0.5), y, n_seeds=3)  # a constant probability of 0.5
    assert raw["brier"] == pytest.approx(0.25) and raw["auroc"] == pytest.approx(0.5)


def test_transfer_to_the_same_data_equals_in_task() -> None:
    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, 200)
    X = np.column_stack([y + rng.normal(0, 1, 200), rng.normal(0, 1, 200)])
    a = score_variant("features", X, y, n_seeds=4)
    b = score_variant("features", X, y, n_seeds=4, target=(X, y))
    assert a["auroc"] == pytest.approx(b["auroc"], abs=1e-12) and a["brier"] == pytest.approx(b["brier"], abs=1e-12)


def test_run_ablations_writes_its_tables(tmp_path: Path) -> None:
    write_synthetic_run(tmp_path / "r", tasks=("triviaqa", "svamp"), n_per_task=120)
    conf = json.loads((tmp_path / "r" / "config.json").read_text())
    conf["config"]["model"] = None  # as evaluate stores the default model: only the identity names it
    (tmp_path / "r" / "config.json").write_text(json.dumps(conf))
    doc = run_ablations(tmp_path / "r", n_seeds=3)
    assert (tmp_path / "r" / "ablations.json").is_file()
    md = (tmp_path / "r" / "ablations.md").read_text()
    assert md.startswith("# TRACE ablations — synthetic (float32)")  # the run's model, from its identity
    for title in ("From TRACE to TRACE+", "Each operator alone", "feature removals", "shuffled", "Sweep band"):
        assert title in md
    names = {v.name for v in ablation_variants()}
    assert names <= set(doc["variants"])
    assert set(doc["transfer"]) == {"triviaqa", "svamp"} and set(doc["transfer"]["svamp"]) == {"triviaqa", "svamp"}
    ladder = doc["variants"]["TRACE, Platt"]["mean"]
    assert ladder["auroc"] == pytest.approx(doc["variants"]["TRACE raw"]["mean"]["auroc"])  # Platt keeps the order


def test_a_partial_ablate_merges_or_refuses_and_never_replaces_with_less(tmp_path: Path) -> None:
    """`ablate R --groups fusion` on a run without MARS wrote a table of dashes (exit 0) and replaced a complete
    ablations.json / .md: now it is refused with the reason and both files stay byte-identical; a partial run
    with other settings is refused the same way; one that runs is merged into the earlier output."""
    from typer.testing import CliRunner

    from tracecal.cli.app import app

    run = write_synthetic_run(tmp_path / "r", tasks=("triviaqa", "svamp"), n_per_task=60)
    runner = CliRunner()
    r = runner.invoke(app, ["ablate", str(run), "--seeds", "2"])
    assert r.exit_code == 0, r.output
    files = [run / "ablations.json", run / "ablations.md"]
    before = [f.read_bytes() for f in files]
    full = json.loads(before[0])
    for args, msg in (
        (["--groups", "fusion", "--seeds", "2"], "no ablation of the groups fusion could run on"),
        (["--groups", "ladder", "--seeds", "3"], "holds results made with n_seeds=2, not 3: a partial run would mix"),
    ):
        r = runner.invoke(app, ["ablate", str(run), *args])
        assert r.exit_code == 2 and msg in r.output and "nothing was written" in r.output, r.output
        assert [f.read_bytes() for f in files] == before
    r = runner.invoke(app, ["ablate", str(run), "--groups", "operators", "--seeds", "2"])
    assert r.exit_code == 0, r.output
    merged = json.loads(files[0].read_text())
    assert set(merged["variants"]) == set(full["variants"]) and merged["transfer"] == full["transfer"]
    assert merged["variants"]["TRACE+"] == full["variants"]["TRACE+"]  # not recomputed: kept as it was
