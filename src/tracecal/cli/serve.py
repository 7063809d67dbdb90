"""``tracecal serve``: run the gateway (in-process model with dynamic batching, or a proxy with --upstream).

Every limit is an option with a sane default (`tracecal.serve.config.ServeConfig`); bad values exit with a
message and status 2, never a traceback.

A ``--calibrator`` or ``--abstain-from`` file holds for one model's answers: its own provenance record
(`tracecal.traces.provenance`) names the model and weight dtype, and a file made on another model or dtype than
the one served is refused at start-up (``--allow-foreign-calibrator`` serves it anyway, with a warning), and so is
a file whose record names no model (`tracecal.cli.common.NO_MODEL`: a Python-API ``cal.save`` of a calibrator
fitted on scores or a `TraceBatch`; one fitted on `Trace` objects records their model). A file without a record
(written before tracecal kept one) is served with a warning; for an ``--abstain-from`` file the run's
``config.json`` beside it, where there is one, stands in. Behind ``--upstream`` the model compared is
``--upstream-model`` (when given) and no dtype; with ``--no-model`` nothing is served to compare with.

Behind ``--upstream`` the upstream tokenises text itself: ``--tokenizer`` (the served model's) renders every prompt
here, user text as text, and sends token ids; without it, user text that spells a special-token string is refused
with a 400 (`tracecal.backends.http.prompt`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from tracecal._validation import Interval, check_params
from tracecal.backends.registry import DTYPE, IN_PROCESS, backend_names, get_backend
from tracecal.backends.runtime import DTYPES
from tracecal.cli.common import FOREIGN, THREADS, DtypeOpt, ThreadsOpt, check_option, user_errors
from tracecal.cli.common import check_provenance as common_check_provenance
from tracecal.errors import ValidationError

__all__ = ["check_provenance", "serve_command"]

#: The options that are `ServeConfig` fields of the same name (the abstain_* fields come from `_abstain_from`).
CONFIG_OPTIONS = (
    "max_batch",
    "batch_wait_ms",
    "batch_wait_share",
    "max_queue",
    "retry_after",
    "max_body_bytes",
    "max_prompt_tokens",
    "max_tokens",
    "default_max_tokens",
    "max_prompts",
    "request_timeout",
    "stop_on_risk",
    "risk_min_tokens",
    "spans",
    "span_threshold",
    "auth_token_env",
    "drift_statistic",
    "drift_delta",
    "drift_threshold",
    "drift_min_samples",
    "drift_direction",
)
#: The values of the options that are not `ServeConfig` fields (checked before anything is loaded).
OPTION_CONSTRAINTS = {
    "--port": ("port", Interval(int, 1, 65535)),
    "--threads": ("threads", THREADS),
    "--vocab-size": ("vocab_size", Interval(int, 2, None)),
    "--top-logprobs": ("top_logprobs", Interval(int, 1, None)),
    "--upstream-concurrency": ("upstream_concurrency", Interval(int, 1, None)),
}


@user_errors
def serve_command(
    model: Annotated[str | None, typer.Option("--model", "-m", help="HF id, dir or .gguf (default: SmolLM2)")] = None,
    calibrator: Annotated[Path | None, typer.Option("--calibrator", "-c", help="calibrator JSON (any kind)")] = None,
    host: Annotated[str, typer.Option(help="bind address")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port")] = 8000,
    no_model: Annotated[bool, typer.Option("--no-model", help="serve /score only")] = False,
    backend: Annotated[str, typer.Option(help=f"in-process backend: {' | '.join(backend_names(IN_PROCESS))}")] = "hf",
    upstream: Annotated[
        str | None, typer.Option(help="proxy an OpenAI-compatible server, e.g. http://h:8080/v1")
    ] = None,
    upstream_model: Annotated[str | None, typer.Option(help="the upstream's model name (default: ask it)")] = None,
    tokenizer: Annotated[
        str | None,
        typer.Option(help="with --upstream: the served model's tokenizer (name, .gguf, dir); prompts go as token ids"),
    ] = None,
    vocab_size: Annotated[int, typer.Option(help="|V| of the upstream model (top-k entropy tail)")] = 100_000,
    top_logprobs: Annotated[int, typer.Option(help="top-k log-probs asked from the upstream")] = 20,
    upstream_concurrency: Annotated[
        int, typer.Option(help="requests in flight to the upstream at most (its batching; not --max-batch)")
    ] = 64,
    threads: ThreadsOpt = None,
    dtype: DtypeOpt = "auto",
    max_batch: Annotated[int, typer.Option(help="prompts decoded together at most (1: no batching)")] = 8,
    batch_wait_ms: Annotated[float, typer.Option(help="ms a batch waits for the next request (≤ 4×)")] = 5.0,
    batch_wait_share: Annotated[float, typer.Option(help="… or this share of the last batch's time")] = 0.05,
    max_queue: Annotated[int, typer.Option(help="requests waiting at most (then 503 + Retry-After)")] = 64,
    retry_after: Annotated[int, typer.Option(help="seconds a 503 (queue full) asks clients to wait")] = 1,
    max_body_bytes: Annotated[int, typer.Option(help="request body limit (413)")] = 1 << 20,
    max_prompt_tokens: Annotated[int, typer.Option(help="prompt tokens after the chat template")] = 1536,
    max_tokens: Annotated[int, typer.Option(help="largest max_tokens a request may ask")] = 512,
    default_max_tokens: Annotated[int, typer.Option(help="max_tokens when a request asks none")] = 64,
    max_prompts: Annotated[int, typer.Option(help="prompts per request (/v1/completions lists)")] = 16,
    request_timeout: Annotated[float, typer.Option(help="seconds per request (504, generation cancelled)")] = 120.0,
    abstain_below: Annotated[float | None, typer.Option(help="abstain under this probability / c_TRACE")] = None,
    abstain_from: Annotated[
        Path | None, typer.Option(help="RUN/selective.json: abstain under its guaranteed c_TRACE threshold")
    ] = None,
    abstain_task: Annotated[str | None, typer.Option(help="the task of --abstain-from (if it holds several)")] = None,
    stop_on_risk: Annotated[float | None, typer.Option(help="default: stop when running c_TRACE < this")] = None,
    risk_min_tokens: Annotated[int, typer.Option(help="tokens before early stopping may act")] = 1,
    spans: Annotated[int, typer.Option(help="risky spans per answer in each confidence (0: none)")] = 3,
    span_threshold: Annotated[float, typer.Option(help="risky: r_t ≥ this share of the peak risk, (0, 1]")] = 0.5,
    auth_token_env: Annotated[str, typer.Option(help="env variable holding the bearer token")] = "TRACECAL_SERVE_TOKEN",
    drift_statistic: Annotated[str, typer.Option(help="mean_entropy | c_trace")] = "mean_entropy",
    drift_delta: Annotated[float, typer.Option(help="Page-Hinkley tolerated drift δ (sd units)")] = 0.25,
    drift_threshold: Annotated[float, typer.Option(help="Page-Hinkley alarm threshold λ (sd units)")] = 8.0,
    drift_min_samples: Annotated[int, typer.Option(help="answers in the detector's reference window")] = 20,
    drift_direction: Annotated[str, typer.Option(help="both | up | down")] = "both",
    allow_foreign_calibrator: Annotated[
        bool,
        typer.Option(FOREIGN, help="serve a --calibrator / --abstain-from file made on another model or dtype (warns)"),
    ] = False,
) -> None:
    """Run the OpenAI-compatible confidence gateway: /v1/chat/completions, /v1/completions, /v1/models, /score,
    /health, /metrics (docs/gateway.md)."""
    app = serve_app(dict(locals()))
    from tracecal.serve.app import run

    run(app, host, port)  # uvicorn, connections with TCP_NODELAY (tracecal.serve.app.listening_socket)


def _check_backend_options(o: dict[str, Any]) -> None:
    """Refuse options that contradict each other, name no backend or have values outside their range (before any
    model or server is touched)."""
    from tracecal.serve.config import ServeConfig

    for flag, (name, constraint) in OPTION_CONSTRAINTS.items():
        check_option(flag, o[name], constraint)
    given = {k: o[k] for k in (*CONFIG_OPTIONS, "abstain_below") if o.get(k) is not None}  # ServeConfig's own check,
    check_params(given, ServeConfig.parameter_constraints, rename=lambda n: "--" + n.replace("_", "-"))  # named
    if o["upstream"] and (o["no_model"] or o["model"]):
        raise ValidationError("--upstream proxies a server: leave out --model and --no-model")
    if o["tokenizer"] is not None and not o["upstream"]:
        raise ValidationError("--tokenizer goes with --upstream (in process, the model's own tokenizer is used)")
    names = backend_names(IN_PROCESS)
    if o["backend"] not in names:
        raise ValidationError(f"--backend must be {', '.join(names[:-1])} or {names[-1]}, got {o['backend']!r}")
    if o["dtype"] not in DTYPES:
        raise ValidationError(f"--dtype must be auto, float32, bfloat16 or float16, got {o['dtype']!r}")
    if o["dtype"] != "auto" and (o["upstream"] or not get_backend(o["backend"]).can(DTYPE)):
        raise ValidationError("--dtype applies to the in-process HF backend only")


def serve_app(o: dict[str, Any]) -> Any:
    """The gateway app of the `serve` command's options ``o`` (by parameter name): the validated `ServeConfig`
    (with the ``--abstain-from`` threshold), the calibrator and the backend(s)."""
    from tracecal.serve.config import ServeConfig

    _check_backend_options(o)
    below = o["abstain_below"]
    abstain = _abstain_from(o["abstain_from"], o["abstain_task"], below, _served(o), o["allow_foreign_calibrator"])
    cfg = ServeConfig(
        **{k: o[k] for k in CONFIG_OPTIONS},
        abstain_below=abstain.get("abstain_below", below),
        abstain_on=abstain.get("abstain_on", "auto"),
        abstain_source=abstain.get("abstain_source"),
    )
    return _build_app(cfg, o)


def _served(o: dict[str, Any]) -> tuple[str | None, str | None] | None:
    """(model, weight dtype) this server will answer with, as answers record them (None: unknown); None with
    ``--no-model``. In-process: the model's name or path and, for HF, the dtype ``--dtype`` resolves to (the one
    rule of `tracecal.backends.runtime.resolve_dtype`, which the model is then loaded in)."""
    if o["no_model"]:
        return None
    if o["upstream"]:
        return o["upstream_model"], None
    from tracecal.backends.defaults import DEFAULT_MODEL
    from tracecal.backends.runtime import resolve_dtype

    return o["model"] or DEFAULT_MODEL, resolve_dtype(o["dtype"]) if get_backend(o["backend"]).can(DTYPE) else None


def check_provenance(
    path: Path, record: dict[str, Any] | None, served: tuple[str | None, str | None] | None, allow: bool
) -> None:
    """`tracecal.cli.common.check_provenance` against the served model and weight dtype ``served`` (a dtype mismatch
    says which ``--dtype`` serves the file's)."""
    dtype = (record or {}).get("dtype")
    common_check_provenance(path, record, served, allow, "serve", f" (add --dtype {dtype})" if dtype in DTYPES else "")


def _abstain_from(
    path: Path | None,
    task: str | None,
    below: float | None,
    served: tuple[str | None, str | None] | None = None,
    allow_foreign: bool = False,
) -> dict[str, Any]:
    """ServeConfig settings for ``--abstain-from``: the `tracecal selective` threshold of the ``trace`` estimator,
    applied to c_TRACE; refused for another model or weight dtype than ``served`` (the guarantee is for the
    answers the threshold was certified on: `check_provenance`)."""
    if path is None:
        if task is not None:
            raise ValidationError("--abstain-task goes with --abstain-from")
        return {}
    if below is not None:
        raise ValidationError("give --abstain-below or --abstain-from, not both")
    from tracecal.analysis.selective import deployed_threshold

    info = deployed_threshold(path, "trace", task)
    record = info.get("provenance")
    if record is None and info.get("model"):  # an older file: the run's config.json beside it stands in
        record = {"model": info["model"], "dtype": None if info.get("dtype") == "auto" else info.get("dtype")}
    check_provenance(path, record, served, allow_foreign)
    source = (
        f"{info['path']} (sha256 {info['sha256'][:16]}; c_TRACE on {info['task']}, alpha={info['alpha']:g}, "
        f"delta={info['delta']:g}, chosen on {info['n_threshold']} answers)"
    )
    return {"abstain_below": info["threshold"], "abstain_on": "c_trace", "abstain_source": source}


def _build_app(cfg: Any, o: dict[str, Any]) -> Any:
    """Load the calibrator and the backend(s) and build the app (errors: ValueError & co. with a message)."""
    from tracecal.calibrators import load_calibrator
    from tracecal.serve.app import create_app

    calibrator = o["calibrator"]
    cal = load_calibrator(calibrator) if calibrator else None
    if cal is not None:
        check_provenance(calibrator, cal.provenance, _served(o), o["allow_foreign_calibrator"])
    if o["upstream"]:
        from tracecal.backends.http import HTTPBackendError
        from tracecal.serve.proxy import proxy_backends

        tok = None
        if o["tokenizer"] is not None:  # prompts rendered here, user text as text, sent as token ids
            from tracecal.backends.hf import load_tokenizer

            tok = load_tokenizer(o["tokenizer"])
        try:
            chat, text = proxy_backends(
                o["upstream"],
                o["upstream_model"],
                concurrency=o["upstream_concurrency"],
                top_logprobs=o["top_logprobs"],
                vocab_size=o["vocab_size"],
                tokenizer=tok,
            )
        except HTTPBackendError as e:
            raise ValidationError(str(e)) from e
        return create_app(chat, cal, cfg, text_model=text, calibrator_path=calibrator)
    from tracecal.backends import load_model

    served = _served(o)  # the dtype the provenance check compared with is the one loaded (bf16 changes answers)
    kw = {"dtype": served[1]} if served is not None and served[1] else {}
    lm = None if o["no_model"] else load_model(o["model"], backend=o["backend"], threads=o["threads"] or "auto", **kw)
    return create_app(lm, cal, cfg, calibrator_path=calibrator)
