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

import numbers
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple, NoReturn

import numpy as np

from tracecal.backends.base import (
    BackendUnsupportedError,
    Prompt,
    check_batch_size,
    check_positive_int,
    check_prompts,
    topk_entropy,
)
from tracecal.trace import Trace

__all__ = ["HTTPBackendError", "HTTPModel"]


class HTTPBackendError(RuntimeError):
    """The server could not be reached, answered with an error, or without the log-probs a trace needs."""


class _Reply(NamedTuple):
    """What one request returned, endpoint-independent."""

    text: str
    tokens: list[str]
    logprobs: list[float]
    top: list[list[float]]  # per token, the top-k log-probs (any order)
    finish: str | None
    prompt_text: str
    endpoint: str


class HTTPModel:
    """Traces from an OpenAI-compatible server (a :class:`~tracecal.backends.base.Backend`).

    What a server cannot do - beam scores, prompt token ids, next-token log-probs of given tokens, a
    teacher-forced pass - raises :class:`~tracecal.backends.base.BackendUnsupportedError` (a ValueError)
    saying so; use the Hugging Face backend for the estimators that need them.

    Args:
        base_url: e.g. ``http://127.0.0.1:8000/v1``.
        model: the served model name.
        vocab_size: |V| of the served model, for the tail term of the top-k entropy estimate.
        top_logprobs: k log-probs requested per token (servers usually allow up to 20).
        chat: send plain-string prompts as one user message to the chat endpoint.
        api_key: sent as a bearer token when given.
        max_concurrency: parallel requests (also this backend's ``batch_size``).
        timeout: seconds per request.
        client: an `httpx.Client` to use (tests pass one with a mock transport).
        context_length: the served model's context, if known (informational; the server enforces it).
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
        context_length: int | None = None,
    ) -> None:
        import httpx

        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be an http(s) URL such as http://127.0.0.1:8000/v1, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.model_id = model
        self.vocab_size = check_positive_int(vocab_size, "vocab_size")
        self.top_logprobs = check_positive_int(top_logprobs, "top_logprobs")
        self.chat = chat
        self.batch_size = check_positive_int(max_concurrency, "max_concurrency")
        self.context_length = None if context_length is None else check_positive_int(context_length, "context_length")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = client or httpx.Client(timeout=timeout, headers=headers)

    @property
    def max_concurrency(self) -> int:
        """Requests in flight at once (the same number as ``batch_size``)."""
        return self.batch_size

    # ------------------------------------------------------------------ requests
    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        import httpx

        try:
            r = self.client.post(f"{self.base_url}{path}", json=body)
        except httpx.HTTPError as e:
            raise HTTPBackendError(f"could not reach {self.base_url}{path}: {e}") from e
        if r.status_code >= 400:
            raise HTTPBackendError(f"{path}: HTTP {r.status_code}: {r.text[:300]}")
        try:
            out = r.json()
        except ValueError:
            raise HTTPBackendError(f"{path}: the server answered with no JSON: {r.text[:200]!r}") from None
        if not isinstance(out, dict) or not out.get("choices"):
            raise HTTPBackendError(f"{path}: the answer has no 'choices': {str(out)[:200]}")
        return out

    def _chat(self, messages: list[dict[str, str]], common: dict[str, Any]) -> _Reply:
        body = common | {"messages": messages, "logprobs": True, "top_logprobs": self.top_logprobs}
        choice = self._post("/chat/completions", body)["choices"][0]
        content = (choice.get("logprobs") or {}).get("content")
        if content is None:
            raise HTTPBackendError("the server returned no logprobs.content: does it support logprobs?")
        return _Reply(
            text=(choice.get("message") or {}).get("content") or "",
            tokens=[c["token"] for c in content],
            logprobs=[float(c["logprob"]) for c in content],
            top=[[float(t["logprob"]) for t in c.get("top_logprobs") or []] for c in content],
            finish=choice.get("finish_reason"),
            prompt_text="\n".join(f"{m['role']}: {m['content']}" for m in messages),
            endpoint="chat",
        )

    def _completion(self, prompt: str, common: dict[str, Any]) -> _Reply:
        choice = self._post("/completions", common | {"prompt": prompt, "logprobs": self.top_logprobs})["choices"][0]
        lp = choice.get("logprobs")
        if not lp or lp.get("token_logprobs") is None:
            raise HTTPBackendError("the server returned no logprobs: does it support logprobs?")
        return _Reply(
            text=choice.get("text") or "",
            tokens=list(lp["tokens"]),
            logprobs=[float(x) for x in lp["token_logprobs"]],
            top=[[float(v) for v in (d or {}).values()] for d in lp.get("top_logprobs") or []],
            finish=choice.get("finish_reason"),
            prompt_text=prompt,
            endpoint="completions",
        )

    def _one(self, prompt: Prompt, max_new_tokens: int, temperature: float, stop: Sequence[str]) -> Trace:
        if isinstance(prompt, dict):
            if prompt.get("prompt_ids") is not None and not (prompt.get("messages") or prompt.get("prompt")):
                self._unsupported("a prompt given as token ids ('prompt_ids')")
            prompt = prompt.get("messages") or prompt.get("prompt") or ""
        chat = isinstance(prompt, list) or self.chat
        common: dict[str, Any] = {"model": self.model_id, "max_tokens": max_new_tokens, "temperature": temperature}
        if stop:
            common["stop"] = list(stop)
        try:
            if chat:
                messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
                reply = self._chat(messages, common)
            else:
                reply = self._completion(str(prompt), common)
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise HTTPBackendError(f"unexpected answer from {self.base_url}: {type(e).__name__}: {e}") from e
        return self._trace(reply, max_new_tokens, temperature)

    def _trace(self, reply: _Reply, max_new_tokens: int, temperature: float) -> Trace:
        T = len(reply.tokens)
        k = max((len(t) for t in reply.top), default=0)
        top = np.full((T, max(k, 1)), -np.inf)
        for i, t in enumerate(reply.top[:T]):
            top[i, : len(t)] = sorted(t, reverse=True)
        entropy = topk_entropy(top, self.vocab_size) if T else np.zeros(0)
        offsets = np.concatenate([[0], np.cumsum([len(t) for t in reply.tokens])[:-1]]).astype(np.int64) if T else []
        return Trace(
            text=reply.text,
            token_ids=np.full(T, -1, dtype=np.int64),
            surprisal=-np.asarray(reply.logprobs, dtype=np.float64),
            entropy=entropy,
            token_strings=reply.tokens,
            offsets=offsets,
            prompt=reply.prompt_text,
            entropy_kind="topk",
            stop_reason={"stop": "eos", "length": "length"}.get(reply.finish or "", "unknown"),
            model_id=self.model_id,
            decoding={
                "strategy": "greedy" if temperature == 0 else "sample",
                "temperature": temperature,
                "max_new_tokens": max_new_tokens,
                "top_logprobs": self.top_logprobs,
                "vocab_size_for_tail": self.vocab_size,
                "endpoint": reply.endpoint,
                "server": self.base_url,
            },
            topk_logprobs=top if T and k else None,
            topk_ids=np.full((T, max(k, 1)), -1, dtype=np.int64) if T and k else None,
        )

    # ------------------------------------------------------------------ Backend
    def generate(
        self,
        prompts: Sequence[Prompt],
        max_new_tokens: int = 32,
        *,
        temperature: float = 0.0,
        stop_strings: Sequence[str] = (),
        ids: Sequence[str] | None = None,
        progress: Callable[[int], None] | None = None,
        batch_size: int | None = None,
        **_: Any,
    ) -> list[Trace]:
        """One request per prompt, ``batch_size`` (default ``max_concurrency``) at a time; traces in prompt order.

        Other keywords of the Hugging Face backend (``top_logprobs``, ``seed``, ...) are accepted and ignored.
        """
        prompts = check_prompts(prompts)
        max_new_tokens = check_positive_int(max_new_tokens, "max_new_tokens")
        workers = check_batch_size(batch_size, self.batch_size)
        if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real) or not temperature >= 0:
            raise ValueError(f"temperature must be a number ≥ 0, got {temperature!r}")
        if isinstance(stop_strings, str):
            stop_strings = [stop_strings]
        if ids is not None and len(ids) != len(prompts):
            raise ValueError(f"ids must have one entry per prompt: {len(ids)} ids for {len(prompts)} prompts")

        def run(i: int) -> Trace:
            t = self._one(prompts[i], max_new_tokens, float(temperature), stop_strings)
            t.id = str(ids[i]) if ids is not None else str(i)
            if progress is not None:
                progress(1)
            return t

        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(run, range(len(prompts))))

    def _unsupported(self, what: str) -> NoReturn:
        raise BackendUnsupportedError(
            f"{what} is not available from an OpenAI-compatible server ({self.base_url}): it returns only the "
            "generated tokens' top-k log-probs. Use the Hugging Face backend (backend='hf') for this."
        )

    def beam_scores(self, prompts: Sequence[Prompt], num_beams: int = 5, max_new_tokens: int = 32, **_: Any) -> Any:
        """Not available from a server: raises :class:`BackendUnsupportedError`."""
        self._unsupported("beam search scores (beam_scores)")

    def encode_prompt(self, prompt: Prompt) -> list[int]:
        """Not available from a server: raises :class:`BackendUnsupportedError`."""
        self._unsupported("the prompt's token ids (encode_prompt)")

    def next_token_logprobs(self, prompt_ids: Any, token_ids: Any, batch_size: int | None = None) -> Any:
        """Not available from a server: raises :class:`BackendUnsupportedError`."""
        self._unsupported("next-token log-probs of given tokens (next_token_logprobs; P(True) needs it)")

    def teacher_forced(self, prompt_ids: Any, answer_ids: Any) -> Any:
        """Not available from a server: raises :class:`BackendUnsupportedError`."""
        self._unsupported("a teacher-forced pass (teacher_forced)")
