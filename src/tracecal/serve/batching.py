"""Dynamic batching: requests that arrive within a few milliseconds are decoded in one ``model.generate`` call.

Handlers `Batcher.submit` one `Job` per prompt into a bounded thread-safe queue (full: 503 with ``Retry-After``)
and await its future. One worker thread takes the first waiting job, collects the jobs that follow within
``batch_wait_ms`` of the previous one (at most ``max_batch``, at most 4 × ``batch_wait_ms`` in all), and decodes
them together (jobs of one kind and one stop list; with a backend that cannot stop answers one by one, also one
``max_tokens``). Results go back to each request's event loop with ``call_soon_threadsafe``.

With a backend that reports each step (``on_step``, the HF backend) the worker, after every step and for the
whole batch at once: appends each answer's token, s_t and H_t; computes the running risk R_t of the answers
that stream or may stop on risk (`tracecal.serve.scoring.running_risk`); ends an answer when its request
was cancelled (client gone, timeout), reached its own ``max_tokens``, completed a stop string, or its running
c_TRACE fell below ``stop_on_risk``; and sends streaming requests their new text with the running risk. Other
backends (llama.cpp) decode whole answers: early stopping then cuts the finished trace at the same token (no
compute is saved) and streaming replays it token by token. A remote backend (proxy mode: `remote_concurrency`) is
not batched here at all: the upstream batches, so the worker sends each job as soon as one of the backend's
``max_concurrency`` request slots is free (``tracecal serve --upstream-concurrency``) and posts its answer when it
arrives. A streamed job of a remote backend that takes ``on_token`` (the HTTP backend) streams from the upstream
too: each token is relayed as it arrives (`tracecal.serve.relay.TokenRelay`, which also stops the upstream on risk
or when the client has gone); a job that does not stream is answered whole, as above.

Jobs of ``kind="answers"`` (``POST /v1/score-answers``) carry answers that already exist: the worker traces them
by teacher forcing (``trace_answers``) between batches, one job per request.
"""

from __future__ import annotations

import asyncio
import logging
import math
import queue
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tracecal.backends.base import supports_on_step
from tracecal.serve.config import ServeConfig
from tracecal.serve.errors import APIError
from tracecal.serve.relay import TokenRelay
from tracecal.serve.scoring import first_risky, prefix_risks, record_extra, running_risk, truncate
from tracecal.traces.trace import Trace

__all__ = ["Batcher", "Job", "StepReporter", "remote_concurrency"]

log = logging.getLogger("tracecal.serve")
FINISH = {"eos": "stop", "stop_string": "stop", "length": "length", "unknown": "stop"}


@dataclass(eq=False)
class Job:
    """One prompt of one request: what to decode, its limits, and where its results go.

    ``prompt`` is what the backend's ``generate`` takes; ``kind`` picks the backend (``chat`` / ``text``);
    ``events`` (streaming only; shared by a request's jobs) receives ``(index, "token", dict)`` per step and
    ``(index, "done", (trace, finish) | error)``.
    """

    prompt: Any
    max_tokens: int
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]
    kind: str = "chat"
    stops: tuple[str, ...] = ()
    stop_on_risk: float | None = None
    n_prompt: int = 0
    index: int = 0
    events: asyncio.Queue[Any] | None = None
    cancelled: bool = False
    finished: bool = False
    finish: str | None = None
    ids: list[int] = field(default_factory=list)
    s: list[float] = field(default_factory=list)
    h: list[float] = field(default_factory=list)
    sent: str = ""

    @property
    def watched(self) -> bool:
        """Needs the running risk at every step (it streams, or may stop on risk)."""
        return self.events is not None or self.stop_on_risk is not None

    def post_token(self, text: str, c: float | None, risk: float) -> None:
        """Send a streaming request its newest token: ``text`` (its new text), the last s_t and H_t, c_t and R_t."""
        r = risk if math.isfinite(risk) else None
        token = {"text": text, "logprob": -self.s[-1], "entropy": self.h[-1], "tokens": len(self.s)}
        self.post(("token", token | {"c_trace": c, "risk": r}))

    def risky(self, c: float | None, min_tokens: int) -> bool:
        """Whether the answer stops on risk now: c_t below its ``stop_on_risk`` after at least ``min_tokens``."""
        limit = self.stop_on_risk
        return limit is not None and c is not None and len(self.s) >= min_tokens and c < limit

    def post(self, item: Any) -> None:
        """Hand ``item`` to the request's event loop (from the worker thread); a closed loop is ignored."""
        try:
            self.loop.call_soon_threadsafe(self._deliver, item)
        except RuntimeError:  # the request's loop is gone (client left, test client closed)
            pass

    def _deliver(self, item: Any) -> None:
        kind, payload = item
        self.finished = self.finished or kind == "done"
        if self.events is not None:  # streaming: the events are the answer (the future stays unused)
            self.events.put_nowait((self.index, kind, payload))
            return
        if kind == "done" and not self.future.done():
            if isinstance(payload, BaseException):
                self.future.set_exception(payload)
            else:
                self.future.set_result(payload)


class StepReporter:
    """The ``on_step`` callback for one batch of jobs (see the module docstring)."""

    def __init__(self, jobs: Sequence[Job], tokenizer: Any, config: ServeConfig, scorer_config: Any) -> None:
        self.jobs, self.tokenizer, self.config, self.trace_config = list(jobs), tokenizer, config, scorer_config

    def __call__(self, rows: np.ndarray, tokens: np.ndarray, s: np.ndarray, h: np.ndarray) -> np.ndarray:
        jobs = [self.jobs[int(r)] for r in rows]
        for j, tok, sv, hv in zip(jobs, tokens.tolist(), s.tolist(), h.tolist(), strict=True):
            j.ids.append(tok)
            j.s.append(sv)
            j.h.append(hv)
        watched = [k for k, j in enumerate(jobs) if j.watched]
        risk = np.full(len(jobs), np.nan)
        if watched:
            risk[watched] = running_risk(
                [np.asarray(jobs[k].s) for k in watched], [np.asarray(jobs[k].h) for k in watched], self.trace_config
            )
        end = np.zeros(len(jobs), dtype=bool)
        for k, j in enumerate(jobs):
            end[k] = self._decide(j, float(risk[k]))
        return end

    def _decide(self, j: Job, risk: float) -> bool:
        """Whether job ``j`` ends after its newest token (and why: ``j.finish``); streams its new text."""
        c = math.exp(-risk) if math.isfinite(risk) else None
        if j.cancelled:
            j.finish = "cancelled"
            return True
        text = self.tokenizer.decode(j.ids) if (j.events is not None or j.stops) and self.tokenizer else None
        if text is not None and any(stop in text for stop in j.stops):
            j.finish = "stop"  # the trace ends before this token (the backend cuts at the stop string)
            return True
        if j.events is not None:
            self._stream(j, text or "", c, risk)
        if j.risky(c, self.config.risk_min_tokens):
            j.finish = "risk"
            return True
        if len(j.ids) >= j.max_tokens:
            j.finish = "length"
            return True
        return False

    @staticmethod
    def _stream(j: Job, text: str, c: float | None, risk: float) -> None:
        delta = ""
        if text.startswith(j.sent):
            safe = text.rstrip("\ufffd")  # a token that ends inside a multi-byte character: wait for the rest
            delta = safe[len(j.sent) :] if len(safe) > len(j.sent) else ""
            j.sent += delta
        j.post_token(delta, c, risk)


def remote_concurrency(models: dict[str, Any], hooks: dict[str, bool]) -> int:
    """Upstream requests in flight when every backend answers each prompt as its own request to a server (the HTTP
    backend of proxy mode: its ``max_concurrency``, no step hooks); 0 otherwise (in-process: batch)."""
    n = [getattr(m, "max_concurrency", None) for m in models.values()]
    slots = [x for x in n if isinstance(x, int) and not isinstance(x, bool) and x > 0]
    if not models or any(hooks.values()) or len(slots) < len(n):
        return 0
    return max(slots)


class Batcher:
    """The queue and the worker thread (see the module docstring).

    Args:
        models: backend per job kind (``chat`` and ``text``; the same object for an in-process model).
        config: limits and batching settings.
        trace_config: the TRACE configuration of the running risk.
        metrics: a `tracecal.serve.metrics.GatewayMetrics` (queue depth, batch sizes) or None.

    ``trace_options`` (set by the gateway): what the calibrator reads beyond the trace (a probe's ``hidden_layers``),
    recorded during generation where step hooks run (HF), else by `record_extra` (a second, teacher-forced pass).
    """

    def __init__(self, models: dict[str, Any], config: ServeConfig, trace_config: Any, metrics: Any = None) -> None:
        self.models, self.config, self.trace_config, self.metrics = models, config, trace_config, metrics
        self.trace_options: dict[str, Any] = {}
        self.hooks = {k: supports_on_step(m) for k, m in models.items()}
        self.token_hooks = {k: supports_on_step(m, "on_token") for k, m in models.items()}  # remote streaming
        self.remote = remote_concurrency(models, self.hooks)
        self._q: queue.Queue[Job | None] = queue.Queue(maxsize=config.max_queue)
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._last_batch_s = 0.0  # decoding time of the previous batch (sizes the gathering window)

    def submit(self, jobs: Sequence[Job]) -> None:
        """Queue a request's jobs (all or none); 503 with ``Retry-After`` when the queue cannot take them."""
        self._ensure_worker()
        busy = APIError(
            503,
            f"the server is busy ({self.config.max_queue} requests waiting); retry shortly",
            code="queue_full",
            headers={"Retry-After": str(self.config.retry_after)},
        )
        if self._q.qsize() + len(jobs) > self.config.max_queue:
            raise busy
        for j in jobs:
            try:
                self._q.put_nowait(j)
            except queue.Full:
                for k in jobs:
                    k.cancelled = True
                raise busy from None
        self._gauge()

    def close(self, timeout: float = 10.0) -> None:
        """Stop the worker after the batch it is decoding (queued jobs are dropped)."""
        if self._thread is not None and self._thread.is_alive():
            while True:
                try:
                    job = self._q.get_nowait()
                except queue.Empty:
                    break
                if job is not None:
                    job.post(("done", APIError(503, "the server is shutting down", code="shutdown")))
            self._q.put(None)
            self._thread.join(timeout)
        self._thread = None

    def _gauge(self) -> None:
        if self.metrics is not None:
            self.metrics.queue_depth.set(self._q.qsize())

    def _ensure_worker(self) -> None:
        with self._start_lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="tracecal-batcher", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        if self.remote:
            self._dispatch(self.remote)
            return
        while True:
            first = self._q.get()
            if first is None:
                return
            batch = self._gather(first)
            self._gauge()
            t0 = time.monotonic()
            try:
                self._execute(batch)
            except Exception as e:  # never let the worker die: fail the batch, keep serving
                log.exception("batch failed")
                for j in batch:
                    j.post(("done", e))
            self._last_batch_s = time.monotonic() - t0

    def _dispatch(self, slots: int) -> None:
        """Remote backends (`remote_concurrency`): each job on its own, sent as soon as one of ``slots`` upstream
        requests is free, its answer posted when it arrives (the upstream batches; waiting here would only add
        latency and make each answer wait for the slowest of its batch). Jobs wait in the queue, not in the pool,
        so ``max_queue`` still bounds them."""
        free = threading.BoundedSemaphore(slots)
        pool = ThreadPoolExecutor(max_workers=slots, thread_name_prefix="tracecal-upstream")

        def alone(job: Job) -> None:
            try:
                self._execute([job])
            except Exception as e:  # as `_run`: fail the job, keep serving
                log.exception("request failed")
                job.post(("done", e))
            finally:
                free.release()

        try:
            while True:
                job = self._q.get()
                if job is None:
                    return
                self._gauge()
                free.acquire()
                pool.submit(alone, job)
        finally:
            pool.shutdown(wait=False)  # at most ``slots`` running, none waiting: they finish and post

    def _gather(self, first: Job) -> list[Job]:
        """``first`` and the jobs that follow it within a window w of the previous one (sliding, 4·w in all, so a
        burst of arrivals lands in one batch): w = ``batch_wait_ms``, or ``batch_wait_share`` of the previous
        batch's decoding time when that is longer (clients answered by that batch are sending their next
        requests; waiting a few % of a batch for them beats decoding them in a batch of their own)."""
        wait = max(self.config.batch_wait_ms / 1000.0, self.config.batch_wait_share * self._last_batch_s)
        start = time.monotonic()
        batch, deadline = [first], start + wait
        while len(batch) < self.config.max_batch:
            try:
                left = deadline - time.monotonic()
                job = self._q.get(timeout=left) if left > 0 else self._q.get_nowait()
            except queue.Empty:
                break
            if job is None:
                self._q.put(None)  # shutting down: let the loop see it after this batch
                break
            batch.append(job)
            deadline = min(time.monotonic() + wait, start + 4 * wait)
        return batch

    def _execute(self, jobs: list[Job]) -> None:
        groups: dict[tuple[Any, ...], list[Job]] = {}
        for j in jobs:
            if j.cancelled:
                j.post(("done", APIError(499, "cancelled", code="cancelled")))
                continue
            if j.kind == "answers":
                self._score(j)
                continue
            key = (j.kind, j.stops) if self.hooks[j.kind] else (j.kind, j.stops, j.max_tokens)
            groups.setdefault(key, []).append(j)
        for group in groups.values():
            for part in self._fit_context(group):
                self._generate(part)

    def _score(self, job: Job) -> None:
        """A job of given answers (``kind="answers"``, ``prompt`` = ``(prompts, answers, ids)``): their traces by
        teacher forcing (the chat backend's ``trace_answers``), here so that it never runs beside a generation on the
        same weights; the result is the list of traces."""
        prompts, answers, ids = job.prompt
        try:
            traces = self.models["chat"].trace_answers(prompts, answers, ids=ids, batch_size=self.config.max_batch)
        except Exception as e:
            job.post(("done", e))
            return
        job.post(("done", traces))

    def _fit_context(self, jobs: list[Job]) -> list[list[Job]]:
        """Split ``jobs`` so that each part's longest prompt plus its largest max_tokens fits the context."""
        ctx = getattr(self.models[jobs[0].kind], "context_length", None)
        if not isinstance(ctx, int):
            return [jobs]
        parts: list[list[Job]] = [[]]
        for j in jobs:
            cur = parts[-1] + [j]
            if parts[-1] and max(k.n_prompt for k in cur) + max(k.max_tokens for k in cur) > ctx:
                parts.append([j])
            else:
                parts[-1] = cur
        return parts

    def _generate(self, jobs: list[Job]) -> None:
        kind = jobs[0].kind
        model = self.models[kind]
        if self.metrics is not None:
            self.metrics.batch_size.observe(len(jobs))
        kwargs: dict[str, Any] = {"max_new_tokens": max(j.max_tokens for j in jobs)}
        if jobs[0].stops:
            kwargs["stop_strings"] = list(jobs[0].stops)
        relayed = not self.hooks[kind] and self.token_hooks[kind] and all(j.events is not None for j in jobs)
        if self.hooks[kind]:  # step hooks; what the calibrator reads is recorded in the same pass
            steps = StepReporter(jobs, getattr(model, "tokenizer", None), self.config, self.trace_config)
            kwargs.update(batch_size=len(jobs), on_step=steps, **self.trace_options)
        elif relayed:  # streamed jobs of a remote backend: each token as the upstream sends it
            kwargs["on_token"] = TokenRelay(jobs, self.config.risk_min_tokens, self.trace_config)
        try:
            traces = model.generate([j.prompt for j in jobs], **kwargs)
        except Exception as e:
            if len(jobs) > 1 and isinstance(e, ValueError):  # one bad prompt must not fail the others
                for j in jobs:
                    j.ids, j.s, j.h, j.sent, j.finish = [], [], [], "", None
                    self._generate([j])
                return
            for j in jobs:
                j.post(("done", e))
            return
        results = [self._finish(j, t, self.hooks[kind] or relayed) for j, t in zip(jobs, traces, strict=True)]
        extra = {} if self.hooks[kind] else self.trace_options  # else recorded above, during generation
        failed = record_extra(model, [j.prompt for j in jobs], [r[0] for r in results], extra)
        for j, t, result in zip(jobs, traces, results, strict=True):
            if result[1] == "cancelled" and self.metrics is not None:  # nobody is left to record it
                self.metrics.early_stops.labels("cancelled").inc()
                self.metrics.tokens.labels("completion").inc(t.length)
            j.post(("done", result if failed is None else failed))

    def _finish(self, job: Job, trace: Trace, hooked: bool) -> tuple[Trace, str]:
        """The final trace and OpenAI finish reason (early stop applied after the fact without step hooks)."""
        if hooked:
            finish = FINISH.get(trace.stop_reason) if trace.stop_reason != "stopped" else job.finish
            return trace, finish or "stop"
        if job.stop_on_risk is not None and trace.length:
            n = first_risky(prefix_risks([trace], self.trace_config)[0], job.stop_on_risk, self.config.risk_min_tokens)
            if n is not None and n < trace.length:
                return truncate(trace, n, "stopped"), "risk"
        return trace, FINISH.get(trace.stop_reason, "stop")
