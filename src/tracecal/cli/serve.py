"""``tracecal serve``: run the gateway (in-process model with dynamic batching, or a proxy with --upstream).

Every limit is an option with a sane default (`tracecal.serve.config.ServeConfig`); bad values exit with a
message and status 2, never a traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

__all__ = ["serve_command"]

console = Console(stderr=True)


def _fail(msg: str) -> None:
    console.print(f"[bold red]error:[/] {msg}", soft_wrap=True, markup=True)
    raise typer.Exit(2)


def serve_command(
    model: Annotated[
        str | None, typer.Option("--model", "-m", help="HF id, local dir or .gguf (default: SmolLM2)")
    ] = None,
    calibrator: Annotated[Path | None, typer.Option("--calibrator", "-c", help="calibrator JSON (any kind)")] = None,
    host: Annotated[str, typer.Option(help="bind address")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port")] = 8000,
    no_model: Annotated[bool, typer.Option("--no-model", help="serve /score only")] = False,
    backend: Annotated[str, typer.Option(help="in-process backend: hf | llamacpp")] = "hf",
    upstream: Annotated[
        str | None, typer.Option(help="proxy an OpenAI-compatible server, e.g. http://h:8080/v1")
    ] = None,
    upstream_model: Annotated[str | None, typer.Option(help="the upstream's model name (default: ask it)")] = None,
    vocab_size: Annotated[int, typer.Option(help="|V| of the upstream model (top-k entropy tail)")] = 100_000,
    top_logprobs: Annotated[int, typer.Option(help="top-k log-probs asked from the upstream")] = 20,
    threads: Annotated[int | None, typer.Option(help="torch CPU threads (default: torch's choice)")] = None,
    dtype: Annotated[str, typer.Option(help="HF weights: auto (fp32 on CPU) | float32 | bfloat16 | float16")] = "auto",
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
    auth_token_env: Annotated[str, typer.Option(help="env variable holding the bearer token")] = "TRACECAL_SERVE_TOKEN",
    drift_statistic: Annotated[str, typer.Option(help="mean_entropy | c_trace")] = "mean_entropy",
    drift_delta: Annotated[float, typer.Option(help="Page-Hinkley tolerated drift δ (sd units)")] = 0.25,
    drift_threshold: Annotated[float, typer.Option(help="Page-Hinkley alarm threshold λ (sd units)")] = 8.0,
    drift_min_samples: Annotated[int, typer.Option(help="answers in the detector's reference window")] = 20,
    drift_direction: Annotated[str, typer.Option(help="both | up | down")] = "both",
) -> None:
    """Run the OpenAI-compatible confidence gateway: /v1/chat/completions, /v1/completions, /v1/models, /score,
    /health, /metrics (docs/gateway.md)."""
    from tracecal.serve.config import ServeConfig

    try:
        abstain = _abstain_from(abstain_from, abstain_task, abstain_below, model, dtype, upstream, backend)
        abstain_below = abstain.get("abstain_below", abstain_below)
        cfg = ServeConfig(
            max_batch=max_batch,
            batch_wait_ms=batch_wait_ms,
            batch_wait_share=batch_wait_share,
            max_queue=max_queue,
            retry_after=retry_after,
            max_body_bytes=max_body_bytes,
            max_prompt_tokens=max_prompt_tokens,
            max_tokens=max_tokens,
            default_max_tokens=default_max_tokens,
            max_prompts=max_prompts,
            request_timeout=request_timeout,
            abstain_below=abstain_below,
            stop_on_risk=stop_on_risk,
            risk_min_tokens=risk_min_tokens,
            auth_token_env=auth_token_env,
            drift_statistic=drift_statistic,
            drift_delta=drift_delta,
            drift_threshold=drift_threshold,
            drift_min_samples=drift_min_samples,
            drift_direction=drift_direction,
            abstain_on=abstain.get("abstain_on", "auto"),
            abstain_source=abstain.get("abstain_source"),
        )
        if threads is not None and threads < 1:
            raise ValueError(f"--threads must be ≥ 1, got {threads}")
        if upstream and (no_model or model):
            raise ValueError("--upstream proxies a server: leave out --model and --no-model")
        if backend not in ("hf", "llamacpp"):
            raise ValueError(f"--backend must be hf or llamacpp, got {backend!r}")
        if dtype not in ("auto", "float32", "bfloat16", "float16"):
            raise ValueError(f"--dtype must be auto, float32, bfloat16 or float16, got {dtype!r}")
        if dtype != "auto" and (upstream or backend != "hf"):
            raise ValueError("--dtype applies to the in-process HF backend only")
        app = _build_app(
            cfg,
            model,
            calibrator,
            no_model,
            backend,
            upstream,
            upstream_model,
            vocab_size,
            top_logprobs,
            threads,
            dtype,
        )
    except (ValueError, FileNotFoundError, RuntimeError, ImportError) as e:
        _fail(str(e))
    import uvicorn

    uvicorn.run(app, host=host, port=port)


def _abstain_from(path, task, below, model, dtype, upstream, backend) -> dict:  # type: ignore[no-untyped-def]
    """ServeConfig settings for ``--abstain-from``: the `tracecal selective` threshold of the ``trace`` estimator,
    applied to c_TRACE; refused for another model or weight dtype than the run's (the guarantee is for the answers
    the threshold was certified on)."""
    if path is None:
        if task is not None:
            raise ValueError("--abstain-task goes with --abstain-from")
        return {}
    if below is not None:
        raise ValueError("give --abstain-below or --abstain-from, not both")
    from tracecal.analysis.selective import deployed_threshold
    from tracecal.backends.defaults import DEFAULT_MODEL

    info = deployed_threshold(path, "trace", task)
    if not upstream:
        run_model, served = info["model"] or DEFAULT_MODEL, model or DEFAULT_MODEL
        if run_model != served:
            raise ValueError(f"{path} was certified on answers of {run_model!r}; this server would load {served!r}")
        run_dtype = info["dtype"] or "auto"
        if backend == "hf" and run_dtype not in ("auto", "float32") and dtype != run_dtype:
            raise ValueError(
                f"{path} was certified on {run_dtype} answers (the dtype changes answers): add --dtype {run_dtype}"
            )
    source = (
        f"{info['path']} (sha256 {info['sha256'][:16]}; c_TRACE on {info['task']}, alpha={info['alpha']:g}, "
        f"delta={info['delta']:g}, chosen on {info['n_threshold']} answers)"
    )
    return {"abstain_below": info["threshold"], "abstain_on": "c_trace", "abstain_source": source}


def _build_app(
    cfg, model, calibrator, no_model, backend, upstream, upstream_model, vocab_size, top_logprobs, threads, dtype="auto"
):  # type: ignore[no-untyped-def]
    """Load the calibrator and the backend(s) and build the app (errors: ValueError & co. with a message)."""
    from tracecal.calibrators.traceplus import load_calibrator
    from tracecal.serve.app import create_app

    cal = load_calibrator(calibrator) if calibrator else None
    if threads:
        import torch

        torch.set_num_threads(threads)
    if upstream:
        from tracecal.backends.http import HTTPBackendError
        from tracecal.serve.proxy import proxy_backends

        try:
            chat, text = proxy_backends(
                upstream, upstream_model, concurrency=cfg.max_batch, top_logprobs=top_logprobs, vocab_size=vocab_size
            )
        except HTTPBackendError as e:
            raise ValueError(str(e)) from e
        return create_app(chat, cal, cfg, text_model=text, calibrator_path=calibrator)
    from tracecal.backends.hf import load_model

    kw = {"dtype": dtype} if dtype != "auto" else {}  # part of the answers' identity (bf16 changes them)
    lm = None if no_model else load_model(model, backend=backend, **kw)
    return create_app(lm, cal, cfg, calibrator_path=calibrator)
