"""OpenAI-compatible HTTP backend (vLLM, llama.cpp server, TGI, …): traces from returned log-probs.

A server returns only the top-k log-probs per generated token, so H_t cannot be exact: traces carry
``entropy_kind="topk"`` with an estimate of H_t from those k log-probs (`tracecal.backends.topk`; which estimator and
k are in the trace's ``decoding``: ``entropy_estimator``, ``top_logprobs``), and ``s_t = −logprob(chosen)``.
Token ids are not returned by the standard API: they are recorded as −1.

Chat prompts (message lists, or strings with ``chat=True``) use ``/v1/chat/completions`` with
``logprobs=true, top_logprobs=k``; plain prompts use ``/v1/completions`` with ``logprobs=k``.
Requests run concurrently, at most ``max_concurrency`` in flight, over one `httpx.Client`; traces come back
in prompt order; greedy (temperature 0) by default. With ``generate(..., on_token=hook)`` each answer streams
(``stream: true``) and every token goes to the hook as the server sends it (`tracecal.backends.http_stream`); the
traces are the same as without.

Given answers (``trace_answers``) are scored through vLLM's ``prompt_logprobs``, the answer appended to the prompt
(`tracecal.backends.http_answers`); every reply becomes a trace in `tracecal.backends.http_reply`.

Faults are retried with backoff (`tracecal.backends.http_client.RetryingClient`). A server that returns no
log-probs raises :class:`LogprobsUnavailableError` (a ValueError) saying how to start it so that it does.

API keys: read from the environment (``TRACECAL_API_KEY``, else ``OPENAI_API_KEY``) at each request and sent as a
bearer token; never an argument, never stored on the model, in traces, logs or errors. A base URL with
credentials (``user:key@``) or a query string is refused for the same reason (it is written to run configs).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import Any, ClassVar, NoReturn

import numpy as np

from tracecal._validation import Interval, Options, check_param
from tracecal.backends.answers import ANSWER_OPTIONS, check_answer_args, why_not
from tracecal.backends.base import (
    BackendUnsupportedError,
    Prompt,
    check_generate_args,
    check_positive_int,
    prompt_text,
)
from tracecal.backends.http_answers import answer_trace, root_client
from tracecal.backends.http_client import (
    API_KEY_ENV,
    LOGPROBS_HELP,
    RETRY_STATUS,
    HTTPBackendError,
    LogprobsUnavailableError,
    RetryingClient,
    check_url,
)
from tracecal.backends.http_prompt import check_user_texts, is_plain_text
from tracecal.backends.http_reply import Reply, reply_trace
from tracecal.backends.http_stream import TokenHook, active_hook, post_streamed, streamed_each
from tracecal.backends.prompting import prompt_ids
from tracecal.backends.registry import HIDDEN_STATES
from tracecal.backends.topk import DEFAULT_TOPK_ESTIMATOR, TOPK_ESTIMATORS
from tracecal.errors import ValidationError
from tracecal.traces.trace import Trace

__all__ = ["API_KEY_ENV", "RETRY_STATUS", "HTTPBackendError", "HTTPModel", "LogprobsUnavailableError"]

TEMPERATURE = Interval(float, 0, None)
"""Constraint of ``temperature`` (0: greedy)."""


class HTTPModel:
    """Traces from an OpenAI-compatible server (a :class:`~tracecal.backends.base.Backend`).

    What a server cannot do - beam scores, prompt token ids, next-token log-probs of given tokens, a
    teacher-forced pass - raises :class:`~tracecal.backends.base.BackendUnsupportedError` (a ValueError)
    saying so; use the Hugging Face backend for the estimators that need them.

    Args:
        base_url: e.g. ``http://127.0.0.1:8000/v1`` (no credentials, no query string).
        model: the served model name; None asks the server (the first id of ``GET /models``) on first use.
        vocab_size: |V| of the served model, for the tail of the top-k entropy estimate.
        top_logprobs: k log-probs requested per token (servers usually allow up to 20).
        full_distribution: ask for every token's log-prob (k = ``vocab_size``) so that H_t is the exact entropy
            (``entropy_kind="exact"`` when all |V| come back), not a top-k estimate. Needs a server that allows
            it (vLLM with ``--max-logprobs`` ≥ |V|); costs ~4 MB of JSON and ~40× the time per token at |V| = 49,152
            (docs/backends.md). Traces still store only the top ``top_logprobs`` alternatives.
        entropy_estimator: how H_t is estimated from the k log-probs, one of `tracecal.backends.topk.TOPK_ESTIMATORS`.
        chat: send plain-string prompts as one user message to the chat endpoint.
        max_concurrency: requests in flight at once (also this backend's ``batch_size``).
        timeout: seconds per request (per attempt).
        max_retries: retries of one request after a retryable failure (0 = fail at once).
        backoff, max_wait: the first retry waits ``backoff`` seconds (with jitter ×0.5–1), doubling each time,
            never more than ``max_wait`` (which also caps a ``Retry-After``).
        client: an `httpx.Client` to use (tests pass one with a mock transport).
        context_length: the served model's context, if known (informational; the server enforces it).
        extra_body: fields added to every completion request beyond the OpenAI ones (as the `openai` client's
            ``extra_body``), e.g. ``{"repeat_penalty": 1.0}`` for llama-cpp-python's server, whose default is 1.1.
        tokenizer: the served model's tokenizer (transformers). Given, every prompt is rendered here (the chat
            template, contents as text: `tracecal.backends.prompting.prompt_ids`) and sent as token ids to
            ``/completions``; without it, user text spelling a special-token string is refused
            (`tracecal.backends.http_prompt`), since the server would read it as a control token.
        raw_prompts: send a plain-text prompt (a string, not a chat) as it is, special-token strings included: for
            an application that renders its own chat template into the prompt, which is what the completions API
            means by one. Chat contents and text answers are still checked. Never for text from untrusted users:
            the gateway and the CLI (prompts from user files) never set it.
        sleep, clock, rng: injectable `time.sleep`, `time.time` and `random.Random` (tests).
        api_key: refused - API keys come from the environment only (module docstring).
    """

    backend_name: ClassVar[str] = "http"  # its registered backend (`tracecal.backends.registry`)

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        vocab_size: int = 100_000,
        top_logprobs: int = 20,
        full_distribution: bool = False,
        entropy_estimator: str = DEFAULT_TOPK_ESTIMATOR,
        chat: bool = True,
        max_concurrency: int = 8,
        timeout: float = 120.0,
        max_retries: int = 5,
        backoff: float = 0.5,
        max_wait: float = 60.0,
        client: Any = None,
        context_length: int | None = None,
        extra_body: dict[str, Any] | None = None,
        tokenizer: Any = None,
        raw_prompts: bool = False,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        api_key: Any = None,
    ) -> None:
        if api_key is not None:
            raise ValidationError(
                "HTTPModel takes no api_key argument (it would end up in configs and logs): "
                f"export it as {API_KEY_ENV[0]} (or {API_KEY_ENV[1]}); it is read at each request"
            )
        self.base_url = check_url(base_url)
        self._model = model
        self._model_lock = threading.Lock()
        self.vocab_size = check_positive_int(vocab_size, "vocab_size")
        self.top_logprobs = check_positive_int(top_logprobs, "top_logprobs")
        if not isinstance(full_distribution, bool):
            raise ValidationError(f"full_distribution must be True or False, got {full_distribution!r}")
        self.full_distribution = full_distribution
        self.entropy_estimator = check_param("entropy_estimator", entropy_estimator, Options(*TOPK_ESTIMATORS))
        self.chat = chat
        self.batch_size = check_positive_int(max_concurrency, "max_concurrency")
        self.context_length = None if context_length is None else check_positive_int(context_length, "context_length")
        self.extra_body = dict(extra_body or {})
        self.tokenizer = tokenizer
        if not isinstance(raw_prompts, bool):
            raise ValidationError(f"raw_prompts must be True or False, got {raw_prompts!r}")
        self.raw_prompts = raw_prompts
        self.http = RetryingClient(
            self.base_url, timeout, max_retries, backoff, max_wait, client, self.batch_size, sleep, clock, rng
        )
        self.client = self.http.client

    @property
    def max_concurrency(self) -> int:
        """Requests in flight at once (the same number as ``batch_size``)."""
        return self.batch_size

    @property
    def model_id(self) -> str:
        """The served model name (asked from ``GET /models`` on first use when not given)."""
        if self._model is None:
            with self._model_lock:
                if self._model is None:
                    self._model = self._served_model()
        return self._model

    @model_id.setter
    def model_id(self, value: str) -> None:
        self._model = value

    def _served_model(self) -> str:
        try:
            data = self.http.request("GET", "/models").get("data") or []
            return str(data[0]["id"])
        except (HTTPBackendError, LookupError, TypeError) as e:
            raise HTTPBackendError(
                f"could not ask {self.base_url}/models for the served model's name ({e}); "
                "pass model='NAME' (the name the server serves)"
            ) from e

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        hook = active_hook()  # set by generate(on_token=...): the answer streams, as the same JSON in the end
        body = self.extra_body | body
        out = self.http.request("POST", path, body) if hook is None else post_streamed(self, path, body, *hook)
        if not out.get("choices"):
            raise HTTPBackendError(f"{path}: the answer has no 'choices': {str(out)[:200]}")
        return out

    def _no_logprobs(self, what: str) -> NoReturn:
        raise LogprobsUnavailableError(f"{self.base_url} returned {what}. {LOGPROBS_HELP}")

    @property
    def requested_logprobs(self) -> int:
        """Log-probs asked for per token: |V| with ``full_distribution``, else ``top_logprobs``."""
        return self.vocab_size if self.full_distribution else self.top_logprobs

    def _chat(self, messages: list[dict[str, str]], common: dict[str, Any]) -> Reply:
        body = common | {"messages": messages, "logprobs": True, "top_logprobs": self.requested_logprobs}
        choice = self._post("/chat/completions", body)["choices"][0]
        content = (choice.get("logprobs") or {}).get("content")
        text = (choice.get("message") or {}).get("content") or ""
        if content is None or (not content and text):
            self._no_logprobs("no log-probs (choices[0].logprobs.content is missing)")
        return Reply(
            text=text,
            tokens=[c["token"] for c in content],
            logprobs=[float(c["logprob"]) for c in content],
            top=[[float(t["logprob"]) for t in c.get("top_logprobs") or []] for c in content],
            finish=choice.get("finish_reason"),
            prompt_text="\n".join(f"{m['role']}: {m['content']}" for m in messages),
            endpoint="chat",
        )

    def _completion(self, prompt: str | list[int], common: dict[str, Any], text: str | None = None) -> Reply:
        body = common | {"prompt": prompt, "logprobs": self.requested_logprobs}
        choice = self._post("/completions", body)["choices"][0]
        lp = choice.get("logprobs")
        if not lp or lp.get("token_logprobs") is None:
            self._no_logprobs("no log-probs (choices[0].logprobs.token_logprobs is missing)")
        return Reply(
            text=choice.get("text") or "",
            tokens=list(lp["tokens"]),
            logprobs=[float(x) for x in lp["token_logprobs"]],
            top=[[float(v) for v in (d or {}).values()] for d in lp.get("top_logprobs") or []],
            finish=choice.get("finish_reason"),
            prompt_text=str(prompt) if text is None else text,
            endpoint="completions",
        )

    def check_prompt(self, prompt: Prompt, answer: Any = None) -> None:
        """Refuse (`ValidationError`) user text the server would read as control tokens: without a ``tokenizer``, a
        prompt (or text ``answer``) that spells a special-token string (`tracecal.backends.http_prompt`)."""
        if self.tokenizer is None:
            check_user_texts(None if self.raw_prompts and is_plain_text(prompt) else prompt, answer)

    def _prompt_ids(self, prompt: Prompt) -> list[int] | None:
        """The ids to send for ``prompt`` (rendered with the ``tokenizer``, or given ones), or None to send text."""
        if self.tokenizer is not None:
            return self.encode_prompt(prompt)
        if isinstance(prompt, dict) and prompt.get("prompt_ids") is not None:
            if not (prompt.get("messages") or prompt.get("prompt")):
                self._unsupported("a prompt given as token ids ('prompt_ids') without the model's tokenizer")
        self.check_prompt(prompt)
        return None

    def _one(self, prompt: Prompt, max_new_tokens: int, temperature: float, stop: Sequence[str]) -> Trace:
        ids = self._prompt_ids(prompt)
        text = prompt_text(prompt)
        if isinstance(prompt, dict):
            prompt = prompt.get("messages") or prompt.get("prompt") or ""
        chat = isinstance(prompt, list) or self.chat
        common: dict[str, Any] = {"model": self.model_id, "max_tokens": max_new_tokens, "temperature": temperature}
        if stop:
            common["stop"] = list(stop)
        try:
            if ids is not None:
                trace = self._trace(self._completion(ids, common, text), max_new_tokens, temperature)
                trace.prompt_ids = np.asarray(ids, dtype=np.int64)
                return trace
            if chat:
                messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
                reply = self._chat(messages, common)
            else:
                reply = self._completion(str(prompt), common)
            return self._trace(reply, max_new_tokens, temperature)
        except HTTPBackendError:
            raise
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
            raise HTTPBackendError(f"unexpected answer from {self.base_url}: {type(e).__name__}: {e}") from e

    def _trace(self, reply: Reply, max_new_tokens: int, temperature: float) -> Trace:
        return reply_trace(reply, self, max_new_tokens, temperature)

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
        on_token: TokenHook | None = None,
        **_: Any,
    ) -> list[Trace]:
        """One request per prompt, at most ``batch_size`` (default ``max_concurrency``) in flight; prompt order.

        The first request that fails for good cancels the ones not yet sent and raises. Other keywords of the
        Hugging Face backend (``top_logprobs``, ``seed``, ...) are accepted and ignored. ``on_token``: the answers
        are streamed (``stream: true``) and each token goes to ``on_token`` as it arrives
        (`tracecal.backends.http_stream`: a `StreamedToken`; True ends that answer there, ``stop_reason``
        ``stopped``); the traces are those of the same answers not streamed.
        """
        prompts, max_new_tokens, workers, _top = check_generate_args(
            prompts, max_new_tokens, batch_size, self.batch_size, ids
        )
        if not TEMPERATURE.accepts(temperature):
            raise ValidationError(f"temperature must be a number ≥ 0, got {temperature!r}")
        if isinstance(stop_strings, str):
            stop_strings = [stop_strings]
        for prompt in prompts:  # every prompt, before any is sent
            self.check_prompt(prompt)
        _served = self.model_id  # resolve the served name once, before the workers start

        def one(i: int) -> Trace:
            return self._one(prompts[i], max_new_tokens, float(temperature), stop_strings)

        return self._in_parallel(
            len(prompts), one if on_token is None else streamed_each(one, on_token), workers, ids, progress
        )

    def _in_parallel(
        self,
        n: int,
        one: Callable[[int], Trace],
        workers: int,
        ids: Sequence[str] | None,
        progress: Callable[[int], None] | None,
    ) -> list[Trace]:
        """``one(i)`` for i < n, at most ``workers`` in flight, in order; each trace gets ``ids[i]`` (else i)."""

        def run(i: int) -> Trace:
            t = one(i)
            t.id = str(ids[i]) if ids is not None else str(i)
            if progress is not None:
                progress(1)
            return t

        if n == 1:  # one prompt (each gateway request in proxy mode): no thread to start
            return [run(0)]
        pool = ThreadPoolExecutor(max_workers=min(workers, n))
        try:
            futures = [pool.submit(run, i) for i in range(n)]
            wait(futures, return_when=FIRST_EXCEPTION)  # a failure stops the queue at once, whatever its place
            return [f.result() for f in futures]
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def trace_answers(self, prompts: Sequence[Prompt], answers: Sequence[Any], **options: Any) -> list[Trace]:
        """The trace of each given answer after its prompt, from a vLLM server's ``prompt_logprobs`` (the answer
        appended to the prompt; `tracecal.backends.http_answers`): s_t and the top-k estimate of H_t as for
        generated answers, vLLM's token ids. Keywords as `tracecal.backends.answers.ANSWER_OPTIONS` but
        ``temperature`` (prompt log-probs are at temperature 1); ``top_logprobs`` is ignored (the backend's own k).
        A server that cannot (not vLLM) raises `BackendUnsupportedError`."""
        known = [o for o in ANSWER_OPTIONS if o != "temperature"]
        args = check_answer_args(prompts, answers, options, self.batch_size, known, why_not(self, HIDDEN_STATES))
        for prompt, answer in zip(args.prompts, args.answers, strict=True):  # every one, before any is sent
            self.check_prompt(prompt, answer)
        root, _served = root_client(self.http), self.model_id  # the served name resolved once, before the workers
        ids, progress = options.get("ids"), options.get("progress")
        return self._in_parallel(
            len(args.prompts), lambda i: answer_trace(self, root, args, i), args.batch_size, ids, progress
        )

    def _unsupported(self, what: str) -> NoReturn:
        raise BackendUnsupportedError(
            f"{what} is not available from an OpenAI-compatible server ({self.base_url}): it returns only the "
            "generated tokens' top-k log-probs. Use the Hugging Face backend (backend='hf') for this."
        )

    def beam_scores(self, prompts: Sequence[Prompt], num_beams: int = 5, max_new_tokens: int = 32, **_: Any) -> Any:
        """Not available from a server: raises :class:`BackendUnsupportedError`."""
        self._unsupported("beam search scores (beam_scores)")

    def encode_prompt(self, prompt: Prompt) -> list[int]:
        """The ids sent for ``prompt`` with a ``tokenizer`` (`tracecal.backends.prompting.prompt_ids`); without one
        not available from a server: raises :class:`BackendUnsupportedError`."""
        if self.tokenizer is None:
            self._unsupported("the prompt's token ids (encode_prompt) without the model's tokenizer")
        return prompt_ids(self.tokenizer, prompt, self.chat)

    def next_token_logprobs(self, prompt_ids: Any, token_ids: Any, batch_size: int | None = None) -> Any:
        """Not available from a server: raises :class:`BackendUnsupportedError`."""
        self._unsupported("next-token log-probs of given tokens (next_token_logprobs; P(True) needs it)")

    def teacher_forced(self, prompt_ids: Any, answer_ids: Any) -> Any:
        """Not available from a server: raises :class:`BackendUnsupportedError`."""
        self._unsupported("a teacher-forced pass (teacher_forced)")
