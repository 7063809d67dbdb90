"""The package's public API (`tracecal/__init__.py`): every name in ``__all__`` resolves, lazily where it must."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

import tracecal


def test_every_public_name_resolves() -> None:
    for name in tracecal.__all__:
        assert getattr(tracecal, name) is not None, name


def test_importing_tracecal_loads_neither_torch_nor_the_calibrators() -> None:
    code = "import sys, tracecal; print('torch' in sys.modules, 'tracecal.calibrators' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]


def test_the_api_from_traces_to_a_calibrated_probability(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(0)
    traces = [
        tracecal.Trace(
            id=str(i),
            prompt="q",
            text="a",
            prompt_ids=np.array([1], dtype=np.int64),
            token_ids=np.arange(n, dtype=np.int64),
            surprisal=rng.exponential(1.0, n),
            entropy=rng.exponential(1.0, n),
        )
        for i, n in enumerate(rng.integers(1, 9, 60))
    ]
    c = tracecal.trace_confidence(traces)
    assert c.shape == (60,) and np.all((c > 0) & (c <= 1))
    y = (c > np.median(c)).astype(int)
    cal = tracecal.TracePlus().fit(traces, y)
    cal.save(tmp_path / "cal.json")
    again = tracecal.load_calibrator(tmp_path / "cal.json")
    np.testing.assert_array_equal(again.predict_proba(traces), cal.predict_proba(traces))
    tracecal.save_traces(traces, tmp_path / "t.parquet")
    assert [t.id for t in tracecal.load_traces(tmp_path / "t.parquet")] == [t.id for t in traces]
