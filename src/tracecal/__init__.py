"""tracecal: single-pass decoding-trace confidence for LLM answers, calibrated.

Public API::

    model = tracecal.load_model()            # offline default; or a HF id, local dir, .gguf path
    traces = model.generate(prompts, max_new_tokens=32)
    tracecal.trace_confidence(traces)        # c_TRACE (METHOD §2)
    cal = tracecal.TracePlus().fit(traces, labels); cal.predict_proba(traces)
    cal.save("cal.json"); tracecal.TracePlus.load("cal.json")   # or tracecal.load_calibrator(path), any class
    tracecal.save_traces(traces, "run.parquet"); tracecal.load_traces("run.parquet")
"""

from tracecal.signals.operators import TraceConfig, trace_confidence, trace_risk
from tracecal.traces.trace import (
    Trace,
    TraceBatch,
    TraceFileError,
    export_jsonl,
    import_jsonl,
    load_traces,
    save_traces,
)
from tracecal.version import __version__


def load_model(name_or_path=None, backend: str = "auto", **kwargs):  # type: ignore[no-untyped-def]
    """Load a tracing model: a HF id, local dir or .gguf (HF backend), or a server URL (HTTP backend); lazy import."""
    from tracecal.backends.hf import load_model as _load

    return _load(name_or_path, backend=backend, **kwargs)


def __getattr__(name: str):  # type: ignore[no-untyped-def]
    if name in ("TracePlus", "CalibratorFileError", "load_calibrator"):
        from tracecal.calibrators import traceplus

        return getattr(traceplus, name)
    raise AttributeError(f"module 'tracecal' has no attribute {name!r}")


__all__ = [
    "Trace",
    "TraceBatch",
    "TraceConfig",
    "TraceFileError",
    "TracePlus",
    "CalibratorFileError",
    "export_jsonl",
    "import_jsonl",
    "load_calibrator",
    "load_model",
    "load_traces",
    "save_traces",
    "trace_confidence",
    "trace_risk",
    "__version__",
]
