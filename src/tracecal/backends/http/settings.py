"""The settings of the OpenAI-compatible backend (`HTTPSettings`): one checked, frozen object that the backend and
every helper of its requests and replies read, instead of the backend itself.

>>> s = HTTPSettings("http://127.0.0.1:8000/v1/", top_logprobs=5)
>>> s.base_url, s.requested_logprobs, s.chat
('http://127.0.0.1:8000/v1', 5, True)
>>> HTTPSettings("http://x/v1", vocab_size=64, full_distribution=True).requested_logprobs
64
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tracecal._validation import Options, check_param
from tracecal.backends.arguments import check_positive_int
from tracecal.backends.http.client import check_retry_settings, check_url
from tracecal.backends.topk import DEFAULT_TOPK_ESTIMATOR, TOPK_ESTIMATORS
from tracecal.errors import ValidationError

__all__ = ["HTTPSettings"]


@dataclass(frozen=True)
class HTTPSettings:
    """What an `HTTPModel <tracecal.backends.http.HTTPModel>` is set to, checked when made (a `ValidationError`
    naming the setting otherwise); ``dataclasses.replace`` makes a changed copy, checked again.

    Args:
        base_url: e.g. ``http://127.0.0.1:8000/v1`` (no credentials, no query string; a trailing slash is dropped).
        model: the served model name; None asks the server (the first id of ``GET /models``) on first use.
        vocab_size: |V| of the served model, for the tail of the top-k entropy estimate.
        top_logprobs: k log-probs requested per token (servers usually allow up to 20).
        full_distribution: ask for every token's log-prob (k = ``vocab_size``) so that H_t is the exact entropy
            (``entropy_kind="exact"`` when all |V| come back), not a top-k estimate. Needs a server that allows
            it (vLLM with ``--max-logprobs`` ≥ |V|); costs ~4 MB of JSON and ~40× the time per token at |V| = 49,152
            (docs/backends.md). Traces still store only the top ``top_logprobs`` alternatives.
        entropy_estimator: how H_t is estimated from the k log-probs, one of `tracecal.backends.topk.TOPK_ESTIMATORS`.
        chat: send plain-string prompts as one user message to the chat endpoint.
        max_concurrency: requests in flight at once (also the backend's ``batch_size``).
        timeout: seconds per request (per attempt).
        max_retries: retries of one request after a retryable failure (0 = fail at once).
        backoff, max_wait: the first retry waits ``backoff`` seconds (with jitter ×0.5–1), doubling each time,
            never more than ``max_wait`` (which also caps a ``Retry-After``).
        context_length: the served model's context, if known (informational; the server enforces it).
        extra_body: fields added to every completion request beyond the OpenAI ones (as the `openai` client's
            ``extra_body``), e.g. ``{"repeat_penalty": 1.0}`` for llama-cpp-python's server, whose default is 1.1.
        tokenizer: the served model's tokenizer (transformers). Given, every prompt is rendered here (the chat
            template, contents as text: `tracecal.backends.prompting.prompt_ids`) and sent as token ids to
            ``/completions``; without it, user text spelling a special-token string is refused
            (`tracecal.backends.http.prompt`), since the server would read it as a control token.
        raw_prompts: send a plain-text prompt (a string, not a chat) as it is, special-token strings included: for
            an application that renders its own chat template into the prompt, which is what the completions API
            means by one. Chat contents and text answers are still checked. Never for text from untrusted users:
            the gateway and the CLI (prompts from user files) never set it.
    """

    base_url: str
    model: str | None = None
    vocab_size: int = 100_000
    top_logprobs: int = 20
    full_distribution: bool = False
    entropy_estimator: str = DEFAULT_TOPK_ESTIMATOR
    chat: bool = True
    max_concurrency: int = 8
    timeout: float = 120.0
    max_retries: int = 5
    backoff: float = 0.5
    max_wait: float = 60.0
    context_length: int | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)
    tokenizer: Any = field(default=None, repr=False, compare=False)
    raw_prompts: bool = False

    def __post_init__(self) -> None:
        def set_(name: str, value: Any) -> None:
            object.__setattr__(self, name, value)  # the checked (normalised) value, once, while the object is made

        set_("base_url", check_url(self.base_url))
        set_("vocab_size", check_positive_int(self.vocab_size, "vocab_size"))
        set_("top_logprobs", check_positive_int(self.top_logprobs, "top_logprobs"))
        if not isinstance(self.full_distribution, bool):
            raise ValidationError(f"full_distribution must be True or False, got {self.full_distribution!r}")
        check_param("entropy_estimator", self.entropy_estimator, Options(*TOPK_ESTIMATORS))
        set_("max_concurrency", check_positive_int(self.max_concurrency, "max_concurrency"))
        if self.context_length is not None:
            set_("context_length", check_positive_int(self.context_length, "context_length"))
        set_("extra_body", dict(self.extra_body or {}))
        if not isinstance(self.raw_prompts, bool):
            raise ValidationError(f"raw_prompts must be True or False, got {self.raw_prompts!r}")
        check_retry_settings(self.timeout, self.max_retries, self.backoff, self.max_wait)

    @property
    def requested_logprobs(self) -> int:
        """Log-probs asked for per token: |V| with ``full_distribution``, else ``top_logprobs``."""
        return self.vocab_size if self.full_distribution else self.top_logprobs
