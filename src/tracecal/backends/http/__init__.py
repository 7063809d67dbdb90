"""OpenAI-compatible HTTP backend (vLLM, llama.cpp server, TGI, …): traces from returned log-probs.

A server returns only the top-k log-probs per generated token, so H_t cannot be exact: traces carry
``entropy_kind="topk"`` with an estimate of H_t from those k log-probs (`tracecal.backends.topk`; which estimator and
k are in the trace's ``decoding``: ``entropy_estimator``, ``top_logprobs``), and ``s_t = −logprob(chosen)``.
Token ids are not returned by the standard API: they are recorded as −1.

Chat prompts (message lists, or strings with ``chat=True``) use ``/v1/chat/completions`` with
``logprobs=true, top_logprobs=k``; plain prompts use ``/v1/completions`` with ``logprobs=k``.
Requests run concurrently, at most ``max_concurrency`` in flight, over one `httpx.Client`; traces come back
in prompt order; greedy (temperature 0) by default. With ``generate(..., on_token=hook)`` each answer streams
(``stream: true``) and every token goes to the hook as the server sends it (`tracecal.backends.http.stream`); the
traces are the same as without.

Given answers (``trace_answers``) are scored through vLLM's ``prompt_logprobs``, the answer appended to the prompt
(`tracecal.backends.http.answers`); every reply becomes a trace in `tracecal.backends.http.reply`.

Faults are retried with backoff (`tracecal.backends.http.client.RetryingClient`). A server that returns no
log-probs raises :class:`LogprobsUnavailableError` (a ValueError) saying how to start it so that it does.

API keys: read from the environment (``TRACECAL_API_KEY``, else ``OPENAI_API_KEY``) at each request and sent as a
bearer token; never an argument, never stored on the model, in traces, logs or errors. A base URL with
credentials (``user:key@``) or a query string is refused for the same reason (it is written to run configs).

The package's rooms: `model` (the backend, `HTTPModel`), `settings` (what it is set to, `HTTPSettings`: the one
object its helpers read), `client` (requests, retries, errors), `prompt` (what is sent for a prompt), `reply` (what
comes back, as a trace), `stream` (streamed answers), `answers` (given answers scored through vLLM).
"""

from tracecal.backends.http.client import API_KEY_ENV, RETRY_STATUS, HTTPBackendError, LogprobsUnavailableError
from tracecal.backends.http.model import HTTPModel
from tracecal.backends.http.settings import HTTPSettings

__all__ = ["API_KEY_ENV", "RETRY_STATUS", "HTTPBackendError", "HTTPModel", "HTTPSettings", "LogprobsUnavailableError"]
