"""The HTTP client of the OpenAI-compatible backend: URL and API-key handling, retries, error classification.

Faults: 408/429/500/502/503/504 answers, connection errors and timeouts (``timeout`` seconds per request) are
retried up to ``max_retries`` times with exponential backoff and jitter (``backoff``·2^attempt, at most
``max_wait`` seconds), waiting what a ``Retry-After`` header asks when there is one. A 500 (or any error) whose
text is about log-probs is a setting to fix: `LogprobsUnavailableError` at once, saying how to start the server.

API keys: read from the environment (`API_KEY_ENV`) at each request and sent as a bearer token; never an
argument, never stored, in traces, logs or errors. A base URL with credentials or a query string is refused.
"""

from __future__ import annotations

import email.utils
import os
import random
import time
from collections.abc import Callable
from typing import Any

from tracecal._validation import Interval, check_param
from tracecal.errors import TracecalError, ValidationError

__all__ = [
    "API_KEY_ENV",
    "LOGPROBS_HELP",
    "RETRY_STATUS",
    "HTTPBackendError",
    "LogprobsUnavailableError",
    "RetryingClient",
    "api_key_headers",
    "check_retry_settings",
    "check_url",
    "mentions_logprobs",
    "parse_retry_after",
]

SECONDS = {
    "timeout": Interval(float, 1e-3, None),
    "backoff": Interval(float, 0, None),
    "max_wait": Interval(float, 0, None),
}
"""Constraints of the client's durations (seconds; a timeout of at least a millisecond)."""

RETRIES = Interval(int, 0, None)
"""Constraint of ``max_retries``."""

API_KEY_ENV = ("TRACECAL_API_KEY", "OPENAI_API_KEY")
"""Environment variables read (first set wins) for the bearer token, at request time."""

RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
"""HTTP statuses retried with backoff (besides connection errors and timeouts)."""

LOGPROBS_HELP = (
    "tracecal needs the generated tokens' top-k log-probs. llama.cpp (llama-cpp-python): start the server with "
    "--logits_all true; vLLM: start it with --max-logprobs at least top_logprobs (or lower top_logprobs=, "
    "default 20); other servers: enable log-probs (OpenAI 'logprobs'/'top_logprobs') in their settings."
)


class HTTPBackendError(TracecalError, RuntimeError):
    """The server could not be reached, answered with an error, or without the log-probs a trace needs."""


class LogprobsUnavailableError(HTTPBackendError, ValueError):
    """The server answered without the top-k log-probs (or refused to compute them): a setting to fix."""


def api_key_headers() -> dict[str, str]:
    """``Authorization: Bearer KEY`` from the first of `API_KEY_ENV` that is set (read at each request), or none."""
    for name in API_KEY_ENV:
        key = os.environ.get(name)
        if key:
            return {"Authorization": f"Bearer {key}"}
    return {}


def check_url(base_url: Any) -> str:
    """``base_url`` without a trailing slash, if it is an http(s) URL with no credentials and no query string."""
    import httpx

    if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
        raise ValidationError(f"base_url must be an http(s) URL such as http://127.0.0.1:8000/v1, got {base_url!r:.80}")
    url = httpx.URL(base_url)
    if url.userinfo or url.query:
        raise ValidationError(
            "base_url must not contain credentials or a query string (it is written to run configs and traces): "
            f"put the API key in the environment ({' or '.join(API_KEY_ENV)}) and pass {url.scheme}://{url.host}…"
        )
    return base_url.rstrip("/")


def parse_retry_after(value: str | None, now: Callable[[], float]) -> float | None:
    """Seconds a ``Retry-After`` header asks for (a number or an HTTP date), None when absent or unreadable."""
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - now(), 0.0)


def mentions_logprobs(text: str) -> bool:
    """Whether a server's error text is about log-probs (a setting to fix, not a transient fault)."""
    t = text.lower()
    return "logprob" in t or "logits_all" in t


def check_retry_settings(timeout: Any, max_retries: Any, backoff: Any, max_wait: Any) -> None:
    """Refuse (`ValidationError` naming the setting) a ``timeout`` ≤ 0, a negative ``backoff`` or ``max_wait``
    (seconds) or a ``max_retries`` that is not a whole number ≥ 0."""
    for name, value in (("timeout", timeout), ("backoff", backoff), ("max_wait", max_wait)):
        if not SECONDS[name].accepts(value):
            raise ValidationError(
                f"{name} must be a number of seconds {'> 0' if name == 'timeout' else '≥ 0'}, got {value!r}"
            )
    check_param("max_retries", max_retries, RETRIES)


class RetryingClient:
    """API calls to ``base_url`` over one `httpx.Client`, retried on transient faults (module docstring).

    Args:
        base_url: the checked server URL (`check_url`).
        timeout: seconds per request (per attempt), > 0.
        max_retries: retries of one request after a retryable failure (0 = fail at once).
        backoff, max_wait: the first retry waits ``backoff`` seconds (with jitter ×0.5–1), doubling each time,
            never more than ``max_wait`` (which also caps a ``Retry-After``).
        client: an `httpx.Client` to use (tests pass one with a mock transport); default: a new one allowing
            ``max_connections`` connections.
        sleep, clock, rng: injectable `time.sleep`, `time.time` and `random.Random` (tests).
    """

    def __init__(
        self,
        base_url: str,
        timeout: float = 120.0,
        max_retries: int = 5,
        backoff: float = 0.5,
        max_wait: float = 60.0,
        client: Any = None,
        max_connections: int = 8,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
    ) -> None:
        import httpx

        check_retry_settings(timeout, max_retries, backoff, max_wait)
        self.base_url = base_url
        self.timeout, self.max_retries = float(timeout), int(max_retries)
        self.backoff, self.max_wait = float(backoff), float(max_wait)
        self.sleep, self.clock, self.rng = sleep, clock, rng or random.Random()
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        self.client = client or httpx.Client(timeout=self.timeout, limits=limits)

    def wait(self, attempt: int, retry_after: float | None) -> float:
        """Seconds before retry ``attempt + 1``: what ``Retry-After`` asked (≤ ``max_wait``), else
        min(backoff·2^attempt, max_wait)·u with jitter u ∈ [0.5, 1)."""
        if retry_after is not None:
            return min(retry_after, self.max_wait)
        return min(self.backoff * 2.0**attempt, self.max_wait) * (0.5 + 0.5 * self.rng.random())

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """One API call with retries; the decoded JSON object, or an `HTTPBackendError` saying what failed."""
        return self.decode(path, self._send(method, path, body, stream=False))

    def open_stream(self, path: str, body: dict[str, Any]) -> Any:
        """``POST path`` with retries until the server answers for good, its body not read yet: an `httpx.Response`
        to read (``iter_lines``) and close. Faults before the answer are retried as `request`'s; an error answer
        raises as `request`'s. Nothing is retried once the caller reads the body (tokens may have been used)."""
        r = self._send("POST", path, body, stream=True)
        if r.status_code >= 400:
            try:
                r.read()
            finally:
                r.close()
            self.decode(path, r)  # raises the error the status means
        return r

    def _send(self, method: str, path: str, body: dict[str, Any] | None, stream: bool) -> Any:
        """The server's final answer (not a retryable fault) to one API call, after retries with backoff; its body
        unread when ``stream``; an `HTTPBackendError` when every attempt failed."""
        import httpx

        url = f"{self.base_url}{path}"
        failure, retry_after = "", None
        for attempt in range(self.max_retries + 1):
            if attempt:
                self.sleep(self.wait(attempt - 1, retry_after))
            retry_after = None
            try:
                req = self.client.build_request(method, url, json=body, headers=api_key_headers(), timeout=self.timeout)
                r = self.client.send(req, stream=stream)
                if stream and r.status_code in RETRY_STATUS:
                    r.read()  # the error's text, then the connection goes back to the pool
                    r.close()
            except httpx.TimeoutException as e:
                failure = f"no answer within {self.timeout:g} s ({type(e).__name__})"
                continue
            except httpx.TransportError as e:
                failure = f"could not reach the server ({type(e).__name__}: {e})"
                continue
            if r.status_code not in RETRY_STATUS or (r.status_code == 500 and mentions_logprobs(r.text)):
                return r  # a 500 about log-probs is a setting to fix, not a transient fault
            failure = f"HTTP {r.status_code}: {r.text[:200]}"
            retry_after = parse_retry_after(r.headers.get("retry-after"), self.clock)
        tries = f"{self.max_retries + 1} attempt" + ("s" if self.max_retries else "")
        raise HTTPBackendError(f"{url}: {failure} (gave up after {tries}; is the server up and not overloaded?)")

    def decode(self, path: str, r: Any) -> dict[str, Any]:
        """The JSON object of a final answer, or the `HTTPBackendError` / `LogprobsUnavailableError` it means."""
        if r.status_code >= 400:
            if mentions_logprobs(r.text):
                raise LogprobsUnavailableError(
                    f"{self.base_url}{path} refused to return log-probs (HTTP {r.status_code}: {r.text[:300]}). "
                    + LOGPROBS_HELP
                )
            if r.status_code in (401, 403):
                raise HTTPBackendError(
                    f"{self.base_url}{path}: HTTP {r.status_code}: the server refused the request; "
                    f"set its API key in {API_KEY_ENV[0]} (or {API_KEY_ENV[1]})"
                )
            raise HTTPBackendError(f"{path}: HTTP {r.status_code}: {r.text[:300]}")
        try:
            out = r.json()
        except ValueError:
            raise HTTPBackendError(f"{path}: the server answered with no JSON: {r.text[:200]!r}") from None
        if not isinstance(out, dict):
            raise HTTPBackendError(f"{path}: expected a JSON object, got {str(out)[:200]}")
        return out
