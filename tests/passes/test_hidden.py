"""`tracecal.passes.hidden`: summaries recorded during generation in a run, the same teacher-forced over stored
answers, float32 shards, and backends without hidden states skipping the pass with their reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from tracecal.evaluation.config import EvalConfig
from tracecal.evaluation.run import evaluate
from tracecal.evaluation.scheduler import unsupported_passes
from tracecal.passes import PASSES
from tracecal.passes import hidden as hidden_pass
from tracecal.passes.hidden import MEMO, HiddenPass

SETTINGS: dict[str, Any] = {"limit": 8, "n_seeds": 2, "shard_size": 4, "max_new_tokens": 6, "batch_size": 4}


def test_registration() -> None:
    assert PASSES["hidden"] is HiddenPass and HiddenPass.depends == ("traces",)
    assert HiddenPass.requires == {"hidden_states", "teacher_forced"}


def test_recorded_in_generation_equals_teacher_forced_over_the_stored_answers(tmp_path: Path, tiny_model: Any) -> None:
    run = tmp_path / "run"
    cfg = lambda: EvalConfig(tasks=["triviaqa"], estimators=["trace", "hidden_probe"], **SETTINGS)  # noqa: E731
    calls: list[int] = []
    forced = tiny_model.trace_answers

    def counted(*a: Any, **k: Any) -> Any:
        calls.append(len(a[0]))
        return forced(*a, **k)

    tiny_model.trace_answers = counted
    try:
        evaluate(run, cfg(), model=tiny_model)
        assert calls == [] and not MEMO  # every summary came from the generation and was handed over
        shard = run / "hidden" / "triviaqa" / "00001.parquet"
        first = pq.read_table(shard)
        assert first.schema.field("hidden_mean").type.value_type == "float"  # float32 lists
        width = 2 * 64  # "auto" on 2 layers: layers 1 and 2, d = 64
        assert all(len(v) == width for v in first.column("hidden_mean").to_pylist())
        assert first.column("hidden_layers").to_pylist()[0] == [1, 2]
        shard.unlink()
        evaluate(run, cfg(), model=tiny_model)  # a resumed run: teacher-forced over the stored answers
        assert calls == [4]
    finally:
        del tiny_model.trace_answers
    again = pq.read_table(shard)
    for stat in ("hidden_mean", "hidden_first"):
        a, b = (np.array(t.column(stat).to_pylist()) for t in (first, again))
        np.testing.assert_allclose(a, b, atol=1e-4, rtol=0)


def test_backends_without_hidden_states_skip_it_with_their_reason() -> None:
    for backend in ("llamacpp",):
        cfg = EvalConfig(tasks=["triviaqa"], estimators=["trace", "hidden_probe"], backend=backend)
        why = unsupported_passes(cfg)
        assert "hidden states" in why["hidden"]


def test_module_docstring_states_the_size() -> None:
    assert "9,216" in (hidden_pass.__doc__ or "")
