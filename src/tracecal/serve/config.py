"""The gateway's settings: every limit, the confidence policy and the drift detector, validated at the boundary.

`ServeConfig` is what ``tracecal serve`` builds from its options (one option per field, same name with dashes);
`create_app` takes one. Units: bytes, tokens, seconds, milliseconds where the name says ``_ms``.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, fields

__all__ = ["DRIFT_STATISTICS", "ServeConfig"]

DRIFT_STATISTICS = ("mean_entropy", "c_trace")
"""Per-answer statistics the drift detector can watch: the mean H_t of the answer (nats) or its c_TRACE."""


@dataclass(frozen=True)
class ServeConfig:
    """Limits, batching, confidence policy and drift detection of one gateway.

    Batching: ``max_batch`` requests (prompts) decoded together at most; a batch collects the requests that
    follow its first within ``batch_wait_ms`` of each other (a sliding window, at most 4 × ``batch_wait_ms``),
    or within ``batch_wait_share`` × the previous batch's decoding time when that is longer;
    ``max_queue`` requests may wait (more: 503 with ``Retry-After: retry_after`` seconds).
    Limits: ``max_body_bytes`` per request body (413), ``max_prompt_tokens`` per prompt after the chat template,
    ``max_tokens`` the largest ``max_tokens`` a request may ask, ``default_max_tokens`` when it asks none,
    ``max_prompts`` choices per request (list prompts × n), ``request_timeout`` seconds from arrival to answer
    (504; the generation is cancelled).
    Confidence: ``abstain_below`` (the threshold under which ``abstain`` is true; None = never) on ``abstain_on``:
    ``auto`` (the calibrator's probability when one is loaded, else c_TRACE), ``c_trace`` or ``probability``
    (needs a calibrator); ``abstain_source`` (where the threshold came from, shown in /health); ``stop_on_risk``
    (the server-wide default of the request field: stop generating once the running c_TRACE of the tokens so far
    falls below it; None = never), ``risk_min_tokens`` (tokens before early stopping may act).
    Auth: ``auth_token_env`` names the environment variable holding the bearer token (unset or empty: no auth).
    Drift: a Page-Hinkley detector (`tracecal.secl.detector.PageHinkley`) on ``drift_statistic`` per answer, with
    ``drift_delta``, ``drift_threshold`` (sd units), ``drift_min_samples`` (reference window) and
    ``drift_direction`` (``both``, ``up``, ``down``).
    """

    max_batch: int = 8
    batch_wait_ms: float = 5.0
    batch_wait_share: float = 0.05
    max_queue: int = 64
    retry_after: int = 1
    max_body_bytes: int = 1 << 20
    max_prompt_tokens: int = 1536
    max_tokens: int = 512
    default_max_tokens: int = 64
    max_prompts: int = 16
    request_timeout: float = 120.0
    abstain_below: float | None = None
    abstain_on: str = "auto"
    abstain_source: str | None = None
    stop_on_risk: float | None = None
    risk_min_tokens: int = 1
    auth_token_env: str = "TRACECAL_SERVE_TOKEN"
    drift_statistic: str = "mean_entropy"
    drift_delta: float = 0.25
    drift_threshold: float = 8.0
    drift_min_samples: int = 20
    drift_direction: str = "both"

    def __post_init__(self) -> None:
        for name in (
            "max_batch",
            "max_queue",
            "retry_after",
            "max_body_bytes",
            "max_prompt_tokens",
            "max_tokens",
            "default_max_tokens",
            "max_prompts",
            "risk_min_tokens",
            "drift_min_samples",
        ):
            _int(getattr(self, name), name)
        for name in ("batch_wait_ms", "drift_delta"):
            _real(getattr(self, name), name, 0.0, math.inf)
        _real(self.batch_wait_share, "batch_wait_share", 0.0, 1.0)
        _real(self.request_timeout, "request_timeout", 1e-3, math.inf)
        _real(self.drift_threshold, "drift_threshold", 1e-9, math.inf)
        for name in ("abstain_below", "stop_on_risk"):
            if getattr(self, name) is not None:
                _real(getattr(self, name), name, 0.0, 1.0)
        if self.default_max_tokens > self.max_tokens:
            raise ValueError(f"default_max_tokens ({self.default_max_tokens}) exceeds max_tokens ({self.max_tokens})")
        if self.abstain_on not in ("auto", "c_trace", "probability"):
            raise ValueError(f"abstain_on must be auto, c_trace or probability, got {self.abstain_on!r}")
        if self.drift_statistic not in DRIFT_STATISTICS:
            raise ValueError(
                f"drift_statistic must be one of {', '.join(DRIFT_STATISTICS)}, got {self.drift_statistic!r}"
            )
        if self.drift_direction not in ("both", "up", "down"):
            raise ValueError(f"drift_direction must be both, up or down, got {self.drift_direction!r}")
        if not isinstance(self.auth_token_env, str) or not self.auth_token_env:
            raise ValueError("auth_token_env must name an environment variable")

    def as_dict(self) -> dict[str, object]:
        """Every setting by name (for /health and logs; holds no secret: the token's variable name only)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _int(value: object, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def _real(value: object, name: str, lo: float, hi: float) -> None:
    ok = not isinstance(value, bool) and isinstance(value, numbers.Real) and math.isfinite(float(value))
    if not ok or not lo <= float(value) <= hi:  # type: ignore[arg-type]
        span = f"≥ {lo:g}" if hi == math.inf else f"in [{lo:g}, {hi:g}]"
        raise ValueError(f"{name} must be a finite number {span}, got {value!r}")
