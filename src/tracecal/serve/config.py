"""The gateway's settings: every limit, the confidence policy and the drift detector, validated at the boundary.

`ServeConfig` is what ``tracecal serve`` builds from its options (one option per field, same name with dashes);
`create_app` takes one. Units: bytes, tokens, seconds, milliseconds where the name says ``_ms``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar

from tracecal._validation import Constraint, Interval, Options, check_params
from tracecal.errors import ValidationError
from tracecal.signals.spans import SPAN_THRESHOLD
from tracecal.stats.drift import PAGE_HINKLEY_DEFAULTS as PH
from tracecal.stats.drift import PageHinkleySettings, page_hinkley_constraints

__all__ = ["COUNT", "DRIFT_STATISTICS", "ServeConfig"]

COUNT = Interval(int, 1, None)
"""A count (requests, bytes, tokens, seconds of Retry-After): a whole number ≥ 1."""

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
    Spans: ``spans`` risky spans per answer in each ``confidence`` (0: none) by the merging rule's
    ``span_threshold`` (a token is risky at this share of its answer's peak risk; `tracecal.signals.spans`).
    Auth: ``auth_token_env`` names the environment variable holding the bearer token (unset or empty: no auth).
    Drift: a Page-Hinkley detector (`tracecal.stats.drift.PageHinkley`) on ``drift_statistic`` per answer, with
    ``drift_delta``, ``drift_threshold`` (sd units), ``drift_min_samples`` (reference window) and
    ``drift_direction`` (``both``, ``up``, ``down``): `PageHinkleySettings` under the gateway's names (its defaults
    and constraints, with λ = 8), given to the detector by ``page_hinkley()``.

    Every constrained setting has one entry in ``parameter_constraints`` (`tracecal._validation`); a bad value is a
    `tracecal.errors.ValidationError` (a ``ValueError``) naming the setting, what it must be and what it got.
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
    spans: int = 3
    span_threshold: float = 0.5
    auth_token_env: str = "TRACECAL_SERVE_TOKEN"
    drift_statistic: str = "mean_entropy"
    drift_delta: float = PH.delta
    drift_threshold: float = 8.0  # the gateway's own λ (SECL's gate keeps PH.threshold = 10)
    drift_min_samples: int = PH.min_samples
    drift_direction: str = PH.direction

    parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "max_batch": COUNT,
        "max_queue": COUNT,
        "retry_after": COUNT,
        "max_body_bytes": COUNT,
        "max_prompt_tokens": COUNT,
        "max_tokens": COUNT,
        "default_max_tokens": COUNT,
        "max_prompts": COUNT,
        "risk_min_tokens": COUNT,
        "batch_wait_ms": Interval(float, 0, None),
        "batch_wait_share": Interval(float, 0, 1),
        "request_timeout": Interval(float, 1e-3, None),
        "abstain_below": (Interval(float, 0, 1), None),
        "stop_on_risk": (Interval(float, 0, 1), None),
        "abstain_on": Options("auto", "c_trace", "probability"),
        "spans": Interval(int, 0, None),
        "span_threshold": SPAN_THRESHOLD,
        "drift_statistic": Options(*DRIFT_STATISTICS),
        **page_hinkley_constraints(
            delta="drift_delta",
            threshold="drift_threshold",
            min_samples="drift_min_samples",
            direction="drift_direction",
        ),
    }
    """Every constrained setting's constraint, declared once (`tracecal._validation`)."""

    def __post_init__(self) -> None:
        check_params(vars(self), self.parameter_constraints)
        if self.default_max_tokens > self.max_tokens:
            raise ValidationError(
                f"default_max_tokens ({self.default_max_tokens}) exceeds max_tokens ({self.max_tokens})"
            )
        if not isinstance(self.auth_token_env, str) or not self.auth_token_env:
            raise ValidationError("auth_token_env must name an environment variable")

    def page_hinkley(self) -> PageHinkleySettings:
        """The drift detector's settings (``drift_*``; standardised, as SECL's)."""
        return PageHinkleySettings(self.drift_delta, self.drift_threshold, self.drift_min_samples, self.drift_direction)

    def as_dict(self) -> dict[str, object]:
        """Every setting by name (for /health and logs; holds no secret: the token's variable name only)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}
