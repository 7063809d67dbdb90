"""`Gateway`: the state one app shares between its routes - backends, batcher, scorer, metrics, drift, limits.

The routes (`tracecal.serve.routes`) stay thin: they validate, ask the gateway for jobs, wait for them (or
stream them, `tracecal.serve.streaming`) and shape OpenAI responses from `Gateway.record`'s confidences.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from pathlib import Path
from typing import Any, TypedDict

from fastapi import Request

from tracecal._inputs import read_bytes
from tracecal.backends.arguments import PromptTooLongError
from tracecal.backends.base import BackendUnsupportedError
from tracecal.backends.prompting import prompt_ids
from tracecal.serve.batching import Batcher, Job
from tracecal.serve.config import ServeConfig
from tracecal.serve.drift import DriftMonitor
from tracecal.serve.errors import APIError
from tracecal.serve.limits import BearerAuth
from tracecal.serve.metrics import GatewayMetrics
from tracecal.serve.scoring import Scorer
from tracecal.traces.trace import Trace

__all__ = ["Gateway", "GatewayOptions", "calibrator_info", "job_error"]


class GatewayOptions(TypedDict, total=False):
    """The keyword-only options of `Gateway` that `tracecal.serve.app.create_app` passes on."""

    text_model: Any
    calibrator_path: str | Path | None


def calibrator_info(calibrator: Any, path: str | Path | None = None) -> dict[str, Any] | None:
    """Provenance of the loaded calibrator for /health: kind (class), file path, the file's sha256 and the answers
    it was fitted on (its ``provenance`` record: model, dtype, tracecal version, run; None for an older file)."""
    if calibrator is None:
        return None
    record = getattr(calibrator, "provenance", None)
    info: dict[str, Any] = {"kind": type(calibrator).__name__, "path": None, "sha256": None, "provenance": record}
    if path is not None:
        p = Path(path)
        info["path"], info["sha256"] = str(p.resolve()), hashlib.sha256(read_bytes(p, "calibrator file")).hexdigest()
    return info


def job_error(e: BaseException) -> APIError:
    """What a failed generation means for the client: its fault (400), the upstream's (502), something the backend
    will never do (400 ``unsupported``: permanent, so not a 5xx the openai clients retry), or ours (500)."""
    from tracecal.backends.http import HTTPBackendError

    if isinstance(e, APIError):
        return e
    if isinstance(e, HTTPBackendError):  # also an upstream without log-probs: a setting to fix there
        return APIError(502, f"the upstream server failed: {e}", code="upstream_error")
    if isinstance(e, BackendUnsupportedError):  # e.g. an upstream that cannot score given answers (not vLLM)
        return APIError(400, str(e), code="unsupported")
    if isinstance(e, PromptTooLongError):
        return APIError(400, str(e), param="messages", code="context_length_exceeded")
    if isinstance(e, ValueError):
        return APIError(400, str(e), code="invalid_value")
    return APIError(500, "internal error (see the server log)", type="api_error")


class Gateway:
    """Everything the routes share (see the module docstring).

    Args:
        model: the backend answering chat prompts (None: /v1 answers 503, /score still works).
        text_model: the backend for raw-text prompts (/v1/completions); default ``model``. The proxy passes a
            second HTTP backend with ``chat=False`` so text prompts reach the upstream's /completions.
        calibrator, calibrator_path: a loaded calibrator and the file it came from (provenance in /health).
        config: a `ServeConfig`.
    """

    def __init__(
        self,
        model: Any = None,
        calibrator: Any = None,
        config: ServeConfig | None = None,
        *,
        text_model: Any = None,
        calibrator_path: str | Path | None = None,
    ) -> None:
        self.config = cfg = config or ServeConfig()
        self.model = model
        self.scorer = Scorer(
            calibrator, cfg.abstain_below, abstain_on=cfg.abstain_on, spans=cfg.spans, span_threshold=cfg.span_threshold
        )
        self.calibrator_info = calibrator_info(calibrator, calibrator_path)
        self.metrics = GatewayMetrics()
        self.drift = DriftMonitor(cfg.drift_statistic, cfg.page_hinkley())
        self.auth = BearerAuth(cfg.auth_token_env)
        self.created = int(time.time())
        models = {} if model is None else {"chat": model, "text": text_model or model}
        options = self.scorer.backend_options(model)  # refuses a calibrator that reads what the backend cannot give
        if text_model is not None and text_model is not model:
            self.scorer.backend_options(text_model)
        self.batcher = Batcher(models, cfg, self.scorer.config, self.metrics)
        self.batcher.trace_options = options

    @property
    def model_id(self) -> str | None:
        return None if self.model is None else str(self.model.model_id)

    @property
    def model_dtype(self) -> str | None:
        """The in-process weights' dtype (``float32``, ``bfloat16``; part of the answers' identity), else None."""
        dtype = getattr(getattr(self.model, "model", None), "dtype", None)
        return None if dtype is None else str(dtype).removeprefix("torch.")

    # ------------------------------------------------------------------ checks
    def check(self, request: Request, model: str) -> None:
        """Auth, a model to serve, and the right model name (404 ``model_not_found`` otherwise)."""
        self.auth.check(request)
        if self.model is None:
            raise APIError(  # permanent: a 4xx, never a 503 the openai clients would retry
                404,
                "this server was started without a model (--no-model): it serves no model, only /score works",
                param="model",
                code="no_model",
            )
        if model != self.model_id:
            raise APIError(
                404,
                f"the model '{model}' does not exist on this server; it serves '{self.model_id}' (GET /v1/models)",
                param="model",
                code="model_not_found",
            )

    def budget(self, asked: int | None) -> int:
        """The request's max_tokens: the default when absent, 400 above the server's limit."""
        if asked is None:
            return self.config.default_max_tokens
        if asked > self.config.max_tokens:
            raise APIError(
                400,
                f"max_tokens={asked} exceeds this server's limit of {self.config.max_tokens} (--max-tokens)",
                param="max_tokens",
                code="invalid_value",
            )
        return asked

    async def encode(self, prompt: Any, kind: str, max_tokens: int) -> tuple[Any, int]:
        """What the backend gets for ``prompt`` and its length in tokens (0 when the backend cannot count them).

        In-process backends get the exact ids (chat template for ``chat``, plain text for ``text``) so the
        prompt-length limits are checked here, before the request joins a batch.
        """
        model = self.batcher.models[kind]

        def ids() -> list[int] | None:
            check = getattr(model, "check_prompt", None)
            if check is not None:  # a server that tokenises text itself: no special-token string in it (400)
                check(prompt)
            try:
                if kind == "chat":
                    return list(model.encode_prompt(prompt))
                tok = getattr(model, "tokenizer", None)
                return None if tok is None else prompt_ids(tok, prompt, chat=False)
            except (BackendUnsupportedError, AttributeError):
                return None

        param = "messages" if kind == "chat" else "prompt"
        try:
            encoded = await asyncio.to_thread(ids)
        except ValueError as e:  # text the tokenizer refuses (`prompt_ids`: not valid Unicode, an odd role)
            raise APIError(400, str(e), param=param, code="invalid_value") from e
        if encoded is None:
            return prompt, 0
        n, limit, ctx = len(encoded), self.config.max_prompt_tokens, getattr(model, "context_length", None)
        if n == 0:
            raise APIError(400, "the prompt encodes to zero tokens", param=param, code="invalid_value")
        if n > limit:
            raise APIError(
                400,
                f"the prompt has {n} tokens; this server accepts at most {limit} (--max-prompt-tokens)",
                param=param,
                code="context_length_exceeded",
            )
        if isinstance(ctx, int) and n + max_tokens > ctx:
            raise APIError(
                400,
                f"the prompt has {n} tokens; with max_tokens={max_tokens} it exceeds the model's "
                f"context of {ctx} tokens. Shorten it or lower max_tokens",
                param=param,
                code="context_length_exceeded",
            )
        text = prompt if isinstance(prompt, str) else "\n".join(f"{m['role']}: {m['content']}" for m in prompt)
        return {"prompt_ids": encoded, "prompt": text}, n

    def job(
        self,
        prompt: Any,
        n_prompt: int,
        kind: str,
        req: Any,
        max_tokens: int,
        index: int,
        events: asyncio.Queue[Any] | None,
    ) -> Job:
        """A `Job` bound to the running event loop."""
        loop = asyncio.get_running_loop()
        stop_on_risk = req.stop_on_risk if req.stop_on_risk is not None else self.config.stop_on_risk
        return Job(
            prompt=prompt,
            max_tokens=max_tokens,
            loop=loop,
            future=loop.create_future(),
            kind=kind,
            stops=req.stops,
            stop_on_risk=stop_on_risk,
            n_prompt=n_prompt,
            index=index,
            events=events,
        )

    # ------------------------------------------------------------------ waiting
    def deadline(self, request: Request) -> float:
        return request.state.arrived + self.config.request_timeout

    async def wait(self, jobs: list[Job], request: Request) -> list[tuple[Trace, str]]:
        """Results of ``jobs``; cancels them when the client leaves (499) or the request times out (504)."""
        gathered = asyncio.gather(*(j.future for j in jobs))
        watcher = asyncio.create_task(self._disconnected(request))
        try:
            left = max(self.deadline(request) - time.monotonic(), 0.0)
            waiting: set[asyncio.Future[Any]] = {gathered, watcher}
            done, _ = await asyncio.wait(waiting, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            if gathered in done:
                try:
                    return list(gathered.result())
                except Exception as e:
                    raise job_error(e) from e
            for j in jobs:
                j.cancelled = True
            if watcher in done:
                raise APIError(499, "the client closed the connection", code="cancelled")
            raise APIError(
                504,
                f"no answer within {self.config.request_timeout:g} s (--request-timeout); the generation was cancelled",
                code="timeout",
            )
        finally:
            watcher.cancel()
            gathered.cancel()

    @staticmethod
    async def _disconnected(request: Request) -> None:
        """Returns once the client has gone: after the body, the next ASGI message is ``http.disconnect`` (sent when
        the connection drops or the response is complete). Awaited, not polled: a poll every 50 ms cost ~0.5 ms of
        CPU each, ~10 ms per second a request waits (docs/benchmarks.md, "Proxy overhead")."""
        while (await request.receive())["type"] != "http.disconnect":
            pass

    # ------------------------------------------------------------------ results
    def record(self, results: list[tuple[Trace, str]], n_prompts: list[int], return_trace: bool) -> list[dict]:
        """Confidence objects for finished answers; counts them in /metrics and feeds the drift detector."""
        confs = self.scorer.confidence([t for t, _ in results], return_trace)
        for (t, finish), conf, n in zip(results, confs, n_prompts, strict=True):
            self.metrics.answer(conf, n, finish)
            if self.drift.observe(t.entropy, conf["c_trace"]):
                self.metrics.drift_alarms.inc()
        return confs

    def health(self) -> dict[str, Any]:
        return {
            "status": "ok",
            "model": self.model_id,
            "dtype": self.model_dtype,
            "calibrator": self.calibrator_info,
            "drift": self.drift.state(),
            "auth": self.auth.enabled,
            "limits": self.config.as_dict(),
        }

    @staticmethod
    def new_id(prefix: str) -> str:
        return f"{prefix}-{uuid.uuid4().hex[:24]}"
