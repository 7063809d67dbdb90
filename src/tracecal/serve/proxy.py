"""Proxy mode: the gateway in front of an OpenAI-compatible server (vLLM, llama.cpp server, …).

The upstream is asked for the generated tokens' top-k log-probs and the trace is built by the HTTP backend
(`tracecal.backends.http.HTTPModel`: s_t = −logprob, H_t estimated from the top-k, ``entropy_kind="topk"``).
Two backends share one connection pool: chat prompts go to the upstream's /chat/completions, raw-text
prompts (/v1/completions) to its /completions. The upstream API key is read by the HTTP backend from the
environment at each request (``TRACECAL_API_KEY``, else ``OPENAI_API_KEY``), never from an argument, and
never logged.
"""

from __future__ import annotations

from typing import Any

__all__ = ["UPSTREAM_CONCURRENCY", "proxy_backends"]

UPSTREAM_CONCURRENCY = 64
"""Requests in flight to the upstream at most, by default (``tracecal serve --upstream-concurrency``): the upstream
batches what it is sent, so this is its batch, not the gateway's ``--max-batch`` (in-process batching)."""


def proxy_backends(
    base_url: str,
    model: str | None = None,
    *,
    concurrency: int = UPSTREAM_CONCURRENCY,
    timeout: float = 120.0,
    client: Any = None,
    **kwargs: Any,
) -> tuple[Any, Any]:
    """(chat backend, text backend) for ``base_url`` (e.g. ``http://127.0.0.1:8080/v1``).

    ``model``: the upstream's model name (None: the first of its ``GET /models``, asked now so that a wrong URL
    fails at start-up); ``concurrency``: requests in flight to the upstream; ``timeout``: seconds per upstream
    request; ``client``: an `httpx.Client` to share (tests pass one with a mock transport; default: a pool of
    ``concurrency`` connections); other keywords go to both `HTTPModel` backends, e.g. ``vocab_size`` (|V| of the
    served model: the tail of the top-k entropy estimate, default 100 000) and ``top_logprobs`` (default 20).
    """
    import httpx

    from tracecal.backends.http import HTTPModel

    if client is None:
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        client = httpx.Client(timeout=timeout, limits=limits)
    shared: dict[str, Any] = {"max_concurrency": concurrency, "timeout": timeout, "client": client, **kwargs}
    chat = HTTPModel(base_url, model, chat=True, **shared)
    # the text backend asks for the name the chat backend resolved (GET /models when ``model`` is None)
    text = HTTPModel(base_url, chat.model_id, chat=False, **shared)
    return chat, text
