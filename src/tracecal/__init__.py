"""tracecal: single-pass decoding-trace confidence for LLM answers, calibrated.

Public API::

    model = tracecal.load_model()            # offline default; or a HF id, local dir, .gguf path
    traces = model.generate(prompts, max_new_tokens=32)
    tracecal.trace_confidence(traces)        # c_TRACE (docs/method.md §2)
    tracecal.risk_spans(traces, k=3)         # where in each answer the risk sits (docs/localisation.md)
    cal = tracecal.TracePlus().fit(traces, labels); cal.predict_proba(traces)
    cal.save("cal.json"); tracecal.TracePlus.load("cal.json")   # or tracecal.load_calibrator(path), any class
    tracecal.save_traces(traces, "run.parquet"); tracecal.load_traces("run.parquet")
"""

from typing import Any

from tracecal.backends import load_model
from tracecal.errors import TracecalError, ValidationError
from tracecal.signals.operators import TraceConfig, trace_confidence, trace_risk
from tracecal.signals.spans import RiskSpan, risk_profile, risk_spans
from tracecal.traces.io import TraceFileError, export_jsonl, import_jsonl, load_traces, save_traces
from tracecal.traces.trace import Trace, TraceBatch
from tracecal.version import __version__


def __getattr__(name: str) -> Any:
    if name in ("TracePlus", "CalibratorFileError", "load_calibrator"):
        from tracecal import calibrators

        return getattr(calibrators, name)
    raise AttributeError(f"module 'tracecal' has no attribute {name!r}")


__all__ = [
    "Trace",
    "TraceBatch",
    "TraceConfig",
    "RiskSpan",
    "TraceFileError",
    "TracecalError",
    "ValidationError",
    "TracePlus",
    "CalibratorFileError",
    "export_jsonl",
    "import_jsonl",
    "load_calibrator",
    "load_model",
    "load_traces",
    "risk_profile",
    "risk_spans",
    "save_traces",
    "trace_confidence",
    "trace_risk",
    "__version__",
]
