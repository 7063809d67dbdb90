"""`tracecal.serve.metrics`: the gateway's Prometheus counters and histograms, one answer at a time."""

from __future__ import annotations

from tracecal.serve.metrics import GatewayMetrics


def test_an_answer_updates_the_counters() -> None:
    m = GatewayMetrics()
    conf = {"tokens": 3, "c_trace": 0.4, "probability": None, "abstain": True}
    m.answer(conf, prompt_tokens=5, finish="risk")
    m.answer(conf | {"c_trace": None, "abstain": False}, prompt_tokens=2, finish="stop")
    text = m.render().decode()
    for line in (
        'tracecal_tokens_total{kind="prompt"} 7.0',
        'tracecal_tokens_total{kind="completion"} 6.0',
        "tracecal_confidence_count 1.0",
        "tracecal_abstentions_total 1.0",
        'tracecal_early_stops_total{reason="risk"} 1.0',
        "tracecal_probability_count 0.0",
    ):
        assert line in text, line
