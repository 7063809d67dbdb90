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

__all__ = ["proxy_backends"]


def proxy_backends(
    base_url: str,
    model: str | None = None,
    *,
    concurrency: int = 8,
    top_logprobs: int = 20,
    vocab_size: int = 100_000,
    timeout: float = 120.0,
    client: Any = None,
    **kwargs: Any,
) -> tuple[Any, Any]:
    """(chat backend, text backend) for ``base_url`` (e.g. ``http://127.0.0.1:8080/v1``).

    ``model``: the upstream's model name (None: the first of its ``GET /models``, asked now so that a wrong URL
    fails at start-up); ``concurrency``: requests in flight to the upstream; ``vocab_size``: |V| of the served
    model (the tail of the top-k entropy estimate); ``client``: an `httpx.Client` to share (tests pass one with
    a mock transport; default: a pool of ``concurrency`` connections); other keywords go to `HTTPModel`.
    """
    import httpx

    from tracecal.backends.http import HTTPModel

    if client is None:
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        client = httpx.Client(timeout=timeout, limits=limits)
    common = dict(
        model=model,
        max_concurrency=concurrency,
        top_logprobs=top_logprobs,
        vocab_size=vocab_size,
        timeout=timeout,
        client=client,
        **kwargs,
    )
    chat = HTTPModel(base_url, chat=True, **common)
    name = chat.model_id  # resolves the served name (GET /models) when not given
    text = HTTPModel(base_url, chat=False, **(common | {"model": name}))
    return chat, text
