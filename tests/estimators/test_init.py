"""The estimators package: importing it registers every built-in estimator, in the registry's fixed order."""

from __future__ import annotations

import tracecal.estimators as est


def test_the_registry_order_is_trace_family_then_baselines_then_extra_then_sampling_then_hidden() -> None:
    names = list(est.REGISTRY)
    assert names[:6] == [
        "trace",
        "trace_plus",
        "trace_plus_seqlik",
        "trace_plus_prior",
        "trace_plus_prior_mono",
        "trace_plus_cv",
    ]
    assert names[6:25] == est.PAPER_BASELINES and names[25:27] == ["p_true", "verbalized"]
    assert names[27:39] == est.resolve_estimators("sampling") and len(names[27:39]) == 12  # opt-in
    assert names[39:] == ["hidden_probe", "hidden_probe_trace_plus"] == est.resolve_estimators("hidden")  # opt-in, last
    assert set(est.__all__) <= set(dir(est)) and est.resolve_estimators("trace-only")[0] == "trace"
