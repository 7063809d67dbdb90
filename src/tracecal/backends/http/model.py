"""The OpenAI-compatible HTTP backend, `HTTPModel`: prompts sent as requests, at most ``max_concurrency`` in flight,
each reply made a `Trace` (the package docstring, `tracecal.backends.http`, says what a server can and cannot give).
"""

from __future__ import annotations

import dataclasses
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import Any, ClassVar, NoReturn

import numpy as np

from tracecal._validation import Interval
from tracecal.backends.answers import ANSWER_OPTIONS, check_answer_args, why_not
from tracecal.backends.arguments import Prompt, check_generate_args
from tracecal.backends.base import BackendUnsupportedError, prompt_text
from tracecal.backends.http.answers import answer_trace, root_client
from tracecal.backends.http.client import API_KEY_ENV, HTTPBackendError, RetryingClient
from tracecal.backends.http.prompt import check_prompt
from tracecal.backends.http.reply import Reply, chat_reply, completion_reply, reply_trace
from tracecal.backends.http.settings import HTTPSettings
from tracecal.backends.http.stream import TokenHook, active_hook, post_streamed, streamed_each
from tracecal.backends.prompting import prompt_ids
from tracecal.backends.registry import HIDDEN_STATES
from tracecal.backends.topk import DEFAULT_TOPK_ESTIMATOR
from tracecal.errors import ValidationError
from tracecal.traces.trace import Trace

__all__ = ["HTTPModel"]

TEMPERATURE = Interval(float, 0, None)
"""Constraint of ``temperature`` (0: greedy)."""


class HTTPModel:
    """Traces from an OpenAI-compatible server (a :class:`~tracecal.backends.base.Backend`).

    What a server cannot do - beam scores, prompt token ids, next-token log-probs of given tokens, a
    teacher-forced pass - raises :class:`~tracecal.backends.base.BackendUnsupportedError` (a ValueError)
    saying so; use the Hugging Face backend for the estimators that need them.

    Args:
        base_url, model, vocab_size, top_logprobs, full_distribution, entropy_estimator, chat, max_concurrency,
            timeout, max_retries, backoff, max_wait, context_length, extra_body, tokenizer, raw_prompts: the
            settings, checked and held as one `HTTPSettings` (``settings``; its docstring says what each means).
            Each is also an attribute of the model (``chat`` may be set: a new ``settings`` is made).
        client: an `httpx.Client` to use (tests pass one with a mock transport).
        sleep, clock, rng: injectable `time.sleep`, `time.time` and `random.Random` (tests).
        api_key: refused - API keys come from the environment only (package docstring).
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
        self.settings = HTTPSettings(
            base_url=base_url,
            model=model,
            vocab_size=vocab_size,
            top_logprobs=top_logprobs,
            full_distribution=full_distribution,
            entropy_estimator=entropy_estimator,
            chat=chat,
            max_concurrency=max_concurrency,
            timeout=timeout,
            max_retries=max_retries,
            backoff=backoff,
            max_wait=max_wait,
            context_length=context_length,
            extra_body=dict(extra_body or {}),
            tokenizer=tokenizer,
            raw_prompts=raw_prompts,
        )
        self._model = self.settings.model
        self._model_lock = threading.Lock()
        s = self.settings
        self.http = RetryingClient(
            s.base_url, s.timeout, s.max_retries, s.backoff, s.max_wait, client, s.max_concurrency, sleep, clock, rng
        )
        self.client = self.http.client

    @classmethod
    def from_settings(
        cls,
        settings: HTTPSettings,
        client: Any = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
    ) -> HTTPModel:
        """The backend of ``settings`` (the other arguments as the constructor's)."""
        fields = {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)}
        return cls(**fields, client=client, sleep=sleep, clock=clock, rng=rng)

    # ------------------------------------------------------------ the settings, read as the model's attributes
    @property
    def base_url(self) -> str:
        return self.settings.base_url

    @property
    def vocab_size(self) -> int:
        return self.settings.vocab_size

    @property
    def top_logprobs(self) -> int:
        return self.settings.top_logprobs

    @property
    def full_distribution(self) -> bool:
        return self.settings.full_distribution

    @property
    def entropy_estimator(self) -> str:
        return self.settings.entropy_estimator

    @property
    def requested_logprobs(self) -> int:
        """Log-probs asked for per token: |V| with ``full_distribution``, else ``top_logprobs``."""
        return self.settings.requested_logprobs

    @property
    def chat(self) -> bool:
        return self.settings.chat

    @chat.setter
    def chat(self, value: bool) -> None:
        self.settings = dataclasses.replace(self.settings, chat=value)

    @property
    def batch_size(self) -> int:
        """Requests in flight at once (``max_concurrency``)."""
        return self.settings.max_concurrency

    @batch_size.setter
    def batch_size(self, value: int) -> None:
        self.settings = dataclasses.replace(self.settings, max_concurrency=value)

    @property
    def max_concurrency(self) -> int:
        """Requests in flight at once (the same number as ``batch_size``)."""
        return self.settings.max_concurrency

    @property
    def context_length(self) -> int | None:
        return self.settings.context_length

    @property
    def extra_body(self) -> dict[str, Any]:
        return self.settings.extra_body

    @property
    def tokenizer(self) -> Any:
        return self.settings.tokenizer

    @property
    def raw_prompts(self) -> bool:
        return self.settings.raw_prompts

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
        out = (
            self.http.request("POST", path, body)
            if hook is None
            else post_streamed(self.http, self.settings, path, body, *hook)
        )
        if not out.get("choices"):
            raise HTTPBackendError(f"{path}: the answer has no 'choices': {str(out)[:200]}")
        return out

    def _chat(self, messages: list[dict[str, str]], common: dict[str, Any]) -> Reply:
        body = common | {"messages": messages, "logprobs": True, "top_logprobs": self.requested_logprobs}
        return chat_reply(self._post("/chat/completions", body)["choices"][0], messages, self.settings)

    def _completion(self, prompt: str | list[int], common: dict[str, Any], text: str | None = None) -> Reply:
        body = common | {"prompt": prompt, "logprobs": self.requested_logprobs}
        choice = self._post("/completions", body)["choices"][0]
        return completion_reply(choice, str(prompt) if text is None else text, self.settings)

    def check_prompt(self, prompt: Prompt, answer: Any = None) -> None:
        """Refuse (`ValidationError`) user text the server would read as control tokens: without a ``tokenizer``, a
        prompt (or text ``answer``) that spells a special-token string (`tracecal.backends.http.prompt`)."""
        check_prompt(self.settings, prompt, answer)

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
        return reply_trace(reply, self.settings, self.model_id, max_new_tokens, temperature)

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
        (`tracecal.backends.http.stream`: a `StreamedToken`; True ends that answer there, ``stop_reason``
        ``stopped``); the traces are those of the same answers not streamed.
        """
        prompts, max_new_tokens, workers, _top = check_generate_args(
            prompts,
            max_new_tokens,
            batch_size,
            self.batch_size,
            ids,
            stop_strings=stop_strings,
            progress=progress,
            on_token=on_token,
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
        appended to the prompt; `tracecal.backends.http.answers`): s_t and the top-k estimate of H_t as for
        generated answers, vLLM's token ids. Keywords as `tracecal.backends.answers.ANSWER_OPTIONS` but
        ``temperature`` (prompt log-probs are at temperature 1); ``top_logprobs`` is ignored (the backend's own k).
        A server that cannot (not vLLM) raises `BackendUnsupportedError`."""
        known = [o for o in ANSWER_OPTIONS if o != "temperature"]
        args = check_answer_args(prompts, answers, options, self.batch_size, known, why_not(self, HIDDEN_STATES))
        for prompt, answer in zip(args.prompts, args.answers, strict=True):  # every one, before any is sent
            self.check_prompt(prompt, answer)
        root, served = root_client(self.http), self.model_id  # the served name resolved once, before the workers

        def one(i: int) -> Trace:
            return answer_trace(self.settings, self.http, root, served, args, i)

        return self._in_parallel(len(args.prompts), one, args.batch_size, options.get("ids"), options.get("progress"))

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
