"""``GET /metrics``: Prometheus text format (`prometheus_client`), one registry per app.

Series (all prefixed ``tracecal_``):

* ``requests_total{endpoint, status}`` — answered requests by route and HTTP status;
* ``request_seconds{endpoint}`` — latency histogram (arrival to last byte, streaming included);
* ``tokens_total{kind}`` — ``prompt`` and ``completion`` tokens;
* ``confidence`` — histogram of c_TRACE per answer; ``probability`` — of the calibrated probability;
* ``abstentions_total`` — answers flagged ``abstain``; ``early_stops_total{reason}`` — ``risk`` / ``cancelled``;
* ``drift_alarms_total`` — Page-Hinkley alarms; ``queue_depth`` — requests waiting; ``batch_size`` — histogram.
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = ["CONTENT_TYPE_LATEST", "GatewayMetrics", "MetricsMiddleware"]

UNIT_BUCKETS = tuple(round(0.05 * i, 2) for i in range(1, 21))
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
ROUTES = ("/v1/chat/completions", "/v1/completions", "/v1/models", "/score", "/health", "/metrics")


class GatewayMetrics:
    """The gateway's Prometheus series (see the module docstring) in their own registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("tracecal_requests", "requests answered", ["endpoint", "status"], registry=r)
        self.latency = Histogram(
            "tracecal_request_seconds", "request latency", ["endpoint"], registry=r, buckets=LATENCY_BUCKETS
        )
        self.tokens = Counter("tracecal_tokens", "tokens processed", ["kind"], registry=r)
        self.confidence = Histogram("tracecal_confidence", "c_TRACE per answer", registry=r, buckets=UNIT_BUCKETS)
        self.probability = Histogram(
            "tracecal_probability", "calibrated P(correct) per answer", registry=r, buckets=UNIT_BUCKETS
        )
        self.abstentions = Counter("tracecal_abstentions", "answers flagged abstain", registry=r)
        self.early_stops = Counter("tracecal_early_stops", "answers ended early", ["reason"], registry=r)
        self.drift_alarms = Counter("tracecal_drift_alarms", "Page-Hinkley drift alarms", registry=r)
        self.queue_depth = Gauge("tracecal_queue_depth", "requests waiting for a batch", registry=r)
        self.batch_size = Histogram(
            "tracecal_batch_size", "prompts per generation batch", registry=r, buckets=(1, 2, 4, 8, 16, 32, 64)
        )
        for kind in ("prompt", "completion"):  # the known label values exist (at 0) from the start: a scraper
            self.tokens.labels(kind)  # (and rate()) sees a series before its first increment
        for reason in ("risk", "cancelled"):
            self.early_stops.labels(reason)

    def answer(self, conf: dict[str, Any], prompt_tokens: int, finish: str) -> None:
        """Count one finished answer (its confidence object, prompt length and finish reason)."""
        self.tokens.labels("prompt").inc(prompt_tokens)
        self.tokens.labels("completion").inc(conf["tokens"])
        if conf["c_trace"] is not None:
            self.confidence.observe(conf["c_trace"])
        if conf["probability"] is not None:
            self.probability.observe(conf["probability"])
        if conf["abstain"]:
            self.abstentions.inc()
        if finish == "risk":  # cancellations are counted by the batcher (their client is gone)
            self.early_stops.labels(finish).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


class MetricsMiddleware:
    """Pure ASGI middleware: counts every HTTP answer by route and status and times it (to the last byte); sets
    ``request.state.arrived`` (monotonic seconds) and ``request.state.created`` (Unix time) on arrival."""

    def __init__(self, app: Any, metrics: GatewayMetrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        endpoint = path if path in ROUTES else ("/v1/models/{id}" if path.startswith("/v1/models/") else "other")
        start, status = time.perf_counter(), [500]
        state = scope.setdefault("state", {})  # request.state.arrived / .created: the request timeout's origin
        state["arrived"], state["created"] = time.monotonic(), time.time()

        async def send_counted(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_counted)
        finally:
            self.metrics.requests.labels(endpoint, str(status[0])).inc()
            self.metrics.latency.labels(endpoint).observe(time.perf_counter() - start)
