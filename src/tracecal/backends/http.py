"""OpenAI-compatible HTTP backend (vLLM, llama.cpp server, TGI, …): traces from returned log-probs.

A server returns only the top-k log-probs per generated token, so H_t cannot be exact: traces carry
``entropy_kind="topk"`` with the truncated estimate of METHOD §1 (`topk_entropy`: the tail mass spread
uniformly over the |V| − k other tokens, an upper bound on the tail's contribution), and
``s_t = −logprob(chosen)``. Token ids are not returned by the standard API: they are recorded as −1.

Chat prompts (message lists, or strings with ``chat=True``) use ``/v1/chat/completions`` with
``logprobs=true, top_logprobs=k``; plain prompts use ``/v1/completions`` with ``logprobs=k``.
Requests run concurrently (``max_concurrency``) over one `httpx.Client`; greedy (temperature 0) by default.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from tracecal.backends.base import Prompt, check_prompts, topk_entropy
from tracecal.trace import Trace


class HTTPBackendError(RuntimeError):
    """The server answered with an error or without the log-probs a trace needs."""


class HTTPModel:
    """Traces from an OpenAI-compatible server.

    Args:
        base_url: e.g. ``http://127.0.0.1:8000/v1``.
        model: the served model name.
        vocab_size: |V| of the served model, for the tail term of the top-k entropy estimate.
        top_logprobs: k log-probs requested per token (servers usually allow up to 20).
        chat: send plain-string prompts as one user message to the chat endpoint.
        api_key: sent as a bearer token when given.
        max_concurrency: parallel requests.
        timeout: seconds per request.
        client: an `httpx.Client` to use (tests pass one with a mock transport).
    """

    def __init__(
        self,
        base_url: str,
        model: str = "default",
        vocab_size: int = 100_000,
        top_logprobs: int = 20,
        chat: bool = True,
        api_key: str | None = None,
        max_concurrency: int = 8,
        timeout: float = 120.0,
        client: Any = None,
    ) -> None:
        import httpx

        self.base_url = base_url.rstrip("/")
        self.model_id = model
        self.vocab_size = vocab_size
        self.top_logprobs = top_logprobs
        self.chat = chat
        self.max_concurrency = max_concurrency
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = client or httpx.Client(timeout=timeout, headers=headers)

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        r = self.client.post(f"{self.base_url}{path}", json=body)
        if r.status_code >= 400:
            raise HTTPBackendError(f"{path}: HTTP {r.status_code}: {r.text[:300]}")
        return r.json()

    def _one(self, prompt: Prompt, max_new_tokens: int, temperature: float, stop: Sequence[str]) -> Trace:
        if isinstance(prompt, dict):
            prompt = prompt.get("messages") or prompt.get("prompt") or ""
        chat = isinstance(prompt, list) or self.chat
        common: dict[str, Any] = {"model": self.model_id, "max_tokens": max_new_tokens, "temperature": temperature}
        if stop:
            common["stop"] = list(stop)
        if chat:
            messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
            out = self._post(
                "/chat/completions",
                common | {"messages": messages, "logprobs": True, "top_logprobs": self.top_logprobs},
            )
            choice = out["choices"][0]
            content = (choice.get("logprobs") or {}).get("content")
            if content is None:
                raise HTTPBackendError("the server returned no logprobs.content: does it support logprobs?")
            tokens = [c["token"] for c in content]
            lps = [float(c["logprob"]) for c in content]
            tops = [[float(t["logprob"]) for t in c.get("top_logprobs") or []] for c in content]
            text = choice["message"].get("content") or ""
            prompt_text = "\n".join(f"{m['role']}: {m['content']}" for m in messages)
        else:
            out = self._post("/completions", common | {"prompt": prompt, "logprobs": self.top_logprobs})
            choice = out["choices"][0]
            lp = choice.get("logprobs")
            if not lp or lp.get("token_logprobs") is None:
                raise HTTPBackendError("the server returned no logprobs: does it support logprobs?")
            tokens = list(lp["tokens"])
            lps = [float(x) for x in lp["token_logprobs"]]
            tops = [sorted((float(v) for v in (d or {}).values()), reverse=True) for d in lp.get("top_logprobs") or []]
            text = choice.get("text") or ""
            prompt_text = str(prompt)
        T = len(tokens)
        k = max((len(t) for t in tops), default=0)
        top = np.full((T, max(k, 1)), -np.inf)
        for i, t in enumerate(tops):
            top[i, : len(t)] = sorted(t, reverse=True)
        entropy = topk_entropy(top, self.vocab_size) if T else np.zeros(0)
        offsets = np.concatenate([[0], np.cumsum([len(t) for t in tokens])[:-1]]).astype(np.int64) if T else []
        finish = choice.get("finish_reason")
        return Trace(
            text=text,
            token_ids=np.full(T, -1, dtype=np.int64),
            surprisal=-np.asarray(lps, dtype=np.float64),
            entropy=entropy,
            token_strings=tokens,
            offsets=offsets,
            prompt=prompt_text,
            entropy_kind="topk",
            stop_reason={"stop": "eos", "length": "length"}.get(finish, "unknown"),
            model_id=self.model_id,
            decoding={
                "strategy": "greedy" if temperature == 0 else "sample",
                "temperature": temperature,
                "max_new_tokens": max_new_tokens,
                "top_logprobs": self.top_logprobs,
                "vocab_size_for_tail": self.vocab_size,
                "endpoint": "chat" if chat else "completions",
                "server": self.base_url,
            },
            topk_logprobs=top if T and k else None,
            topk_ids=np.full((T, max(k, 1)), -1, dtype=np.int64) if T and k else None,
        )

    def generate(
        self,
        prompts: Sequence[Prompt],
        max_new_tokens: int = 32,
        *,
        temperature: float = 0.0,
        stop_strings: Sequence[str] = (),
        ids: Sequence[str] | None = None,
        progress: Callable[[int], None] | None = None,
        **_: Any,
    ) -> list[Trace]:
        """One request per prompt (concurrently); returns traces in prompt order."""
        prompts = check_prompts(prompts)
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be ≥ 1, got {max_new_tokens}")

        def run(i: int) -> Trace:
            t = self._one(prompts[i], max_new_tokens, temperature, stop_strings)
            t.id = str(ids[i]) if ids is not None else str(i)
            if progress is not None:
                progress(1)
            return t

        with ThreadPoolExecutor(max_workers=self.max_concurrency) as pool:
            return list(pool.map(run, range(len(prompts))))
