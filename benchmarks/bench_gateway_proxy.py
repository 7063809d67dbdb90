"""Benchmark: what ``tracecal serve --upstream`` costs in front of a vLLM server - the same chat requests sent to vLLM
directly and through the gateway, at 1, 8 and 32 requests in flight, streamed and not, side by side in one run.

    python benchmarks/bench_gateway_proxy.py [--levels 1,8,32] [--block-requests 4,8,32] [--blocks 4] [--tokens 16]
        [--gateway-args '--upstream-concurrency 64'] [--compare-src DIR] [--vllm-url http://127.0.0.1:PORT/v1]
        [--out FILE]

Starts vLLM's CPU build (`tracecal.backends.vllm.serve_vllm`, the default model's fp32 weights; needs
``scripts/setup_vllm.sh``) unless ``--vllm-url``, and the gateway as its own process (``python -m tracecal.cli.app
serve --upstream URL --vocab-size 49152`` plus ``--gateway-args``; its ``--upstream-concurrency`` defaults to 64,
above every level here). The targets get the same requests (TriviaQA chat prompts, greedy, ``--tokens`` new tokens):

* ``direct``: vLLM as a plain client asks it (no log-probs);
* ``direct+lp``: vLLM asked for what the gateway asks it (``logprobs``, ``top_logprobs`` 20): the upstream's part;
* ``gateway``: the gateway in front of that vLLM (it asks the upstream for the log-probs, builds the trace, scores);
* ``gateway@src`` (with ``--compare-src DIR``): a second gateway importing tracecal from another source tree (e.g.
  a copy of ``src/`` before a change), for before / after ratios from the same run.

Each (level, stream) setting runs in ``--blocks`` blocks; in a block every target gets the same requests, in an order
that rotates from block to block, so that a slower or faster stretch of a shared machine falls on all alike. Per target
and setting: answer tokens/s (completion tokens / wall seconds), p50 / p99 latency (request to last byte, s), for
streams the p50 time to the first chunk with content (through the gateway: the upstream's first token plus the
relay, `tracecal.serve.relay`; not the whole answer), and CPU milliseconds per request of vLLM's processes and of the
gateway process (psutil; CPU time is much less sensitive to a contended machine than wall time). The ratios gateway ÷
direct+lp (the gateway's own overhead) and gateway ÷ direct are medians of the per-block tokens/s ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import httpx  # noqa: E402
import numpy as np  # noqa: E402

from tracecal.backends.servers import free_port, served_process  # noqa: E402
from tracecal.backends.vllm import serve_vllm  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
V = 49152
NAME = "smollm2"


@dataclass
class Run:
    """One target's requests at one setting: per request its latency, first-chunk time and completion tokens."""

    wall: float = 0.0
    latency: list[float] = field(default_factory=list)
    first: list[float] = field(default_factory=list)
    tokens: int = 0
    errors: int = 0
    cpu: float = 0.0  # the gateway process's CPU seconds during the run (0 for vLLM)
    upstream_cpu: float = 0.0  # vLLM's processes' CPU seconds during the run


def questions(n: int) -> list[Any]:
    from tracecal.tasks import get_task

    task = get_task("triviaqa")
    return [task.prompt(e, chat=True) for e in task.load(limit=n)]


@contextlib.contextmanager
def gateway(upstream: str, log: Any, extra: list[str], src: str | None = None) -> Iterator[tuple[str, Any]]:
    """``tracecal serve --upstream`` (plus ``extra`` options; ``src``: import tracecal from that source tree) as its
    own process on a free port; yields its /v1 URL and its `psutil.Process` (for its CPU time)."""
    port = free_port()
    cmd = [sys.executable, "-m", "tracecal.cli.app", "serve", "--upstream", upstream, "--upstream-model", NAME]
    cmd += ["--vocab-size", str(V), "--port", str(port), "--max-queue", "256", *extra]
    env = {"PYTHONPATH": src} if src else {}
    with served_process(cmd, port, NAME, what="gateway", timeout=300, log=log, env=env) as url:
        yield url, processes(url)[0]


def processes(url: str) -> list[Any]:
    """The `psutil.Process` listening on ``url``'s port and all its descendants (vLLM: API server, engine, worker)."""
    import psutil

    port = int(url.split(":")[2].split("/")[0])
    pid = next(c.pid for c in psutil.net_connections("tcp") if c.laddr and c.laddr.port == port and c.pid)
    top = psutil.Process(pid)
    return [top, *top.children(recursive=True)]


def cpu_seconds(procs: list[Any]) -> float:
    """User + system CPU seconds used so far by ``procs`` (those still alive)."""
    total = 0.0
    for p in procs:
        try:
            total += sum(p.cpu_times()[:2])
        except Exception:  # noqa: BLE001 - a process that ended adds nothing more
            pass
    return total


async def one(client: httpx.AsyncClient, url: str, body: dict[str, Any], run: Run) -> None:
    """One request (streamed when ``body["stream"]``), timed to its last byte."""
    t0 = time.perf_counter()
    try:
        if not body.get("stream"):
            r = await client.post(url, json=body)
            r.raise_for_status()
            run.tokens += int(r.json()["usage"]["completion_tokens"])
        else:
            async with client.stream("POST", url, json=body) as r:
                r.raise_for_status()
                first = None
                async for line in r.aiter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    chunk = json.loads(line[6:])
                    if chunk.get("usage"):
                        run.tokens += int(chunk["usage"]["completion_tokens"])
                    choices = chunk.get("choices") or [{}]
                    if first is None and (choices[0].get("delta") or {}).get("content"):
                        first = time.perf_counter() - t0
                run.first.append(first if first is not None else time.perf_counter() - t0)
    except (httpx.HTTPError, KeyError, ValueError):
        run.errors += 1
        return
    run.latency.append(time.perf_counter() - t0)


async def load(url: str, bodies: list[dict[str, Any]], level: int) -> Run:
    """``bodies`` sent to ``url``/chat/completions by ``level`` workers (each sends its next when one is answered)."""
    run, todo = Run(), list(reversed(bodies))
    limits = httpx.Limits(max_connections=level, max_keepalive_connections=level)
    async with httpx.AsyncClient(timeout=600.0, limits=limits) as client:

        async def worker() -> None:
            while todo:
                await one(client, url + "/chat/completions", todo.pop(), run)

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(level)))
        run.wall = time.perf_counter() - t0
    return run


def bodies(prompts: list[Any], start: int, n: int, tokens: int, stream: bool, target: str) -> list[dict[str, Any]]:
    """Requests ``start`` … ``start + n - 1`` (prompts in turn) as ``target`` gets them."""
    out = []
    for i in range(start, start + n):
        b: dict[str, Any] = {"model": NAME, "messages": prompts[i % len(prompts)], "max_tokens": tokens}
        b["temperature"] = 0
        if stream:
            b |= {"stream": True, "stream_options": {"include_usage": True}}
        if target == "direct+lp":
            b |= {"logprobs": True, "top_logprobs": 20}
        out.append(b)
    return out


def summary(runs: list[Run]) -> dict[str, Any]:
    lat = np.concatenate([r.latency for r in runs]) if any(r.latency for r in runs) else np.zeros(1)
    first = [x for r in runs for x in r.first]
    return {
        "tokens_per_s": sum(r.tokens for r in runs) / sum(r.wall for r in runs),
        "p50_s": float(np.percentile(lat, 50)),
        "p99_s": float(np.percentile(lat, 99)),
        "first_p50_s": float(np.percentile(first, 50)) if first else None,
        "requests": int(sum(len(r.latency) for r in runs)),
        "errors": int(sum(r.errors for r in runs)),
        "cpu_ms_per_request": 1e3 * sum(r.cpu for r in runs) / max(1, sum(len(r.latency) for r in runs)),
        "vllm_cpu_ms_per_request": 1e3 * sum(r.upstream_cpu for r in runs) / max(1, sum(len(r.latency) for r in runs)),
    }


def bench(urls: dict[str, str], procs: dict[str, Any], prompts: list[Any], args: argparse.Namespace) -> list[dict]:  # type: ignore[type-arg]
    """Every (level, stream) setting in ``--blocks`` blocks; in each block every target gets the same requests, the
    targets in an order rotating from block to block (module docstring)."""
    targets = list(urls)
    levels = [int(x) for x in args.levels.split(",")]
    sizes = [int(x) for x in args.block_requests.split(",")]
    settings = [(lv, n, st) for lv, n in zip(levels, sizes, strict=True) for st in (False, True)]
    runs: dict[tuple[int, bool, str], list[Run]] = {}
    for t in targets:  # warm-up: connections, vLLM's prefix cache of these prompts, the gateway's first requests
        asyncio.run(load(urls[t], bodies(prompts, 0, 8, args.tokens, False, t), 8))
    for b in range(args.blocks):
        for k, (level, n, stream) in enumerate(settings):
            shift = (b + k) % len(targets)
            for t in targets[shift:] + targets[:shift]:
                own = [procs[t]] if t in procs else []
                cpu0, up0 = cpu_seconds(own), cpu_seconds(procs["vllm"])
                run = asyncio.run(load(urls[t], bodies(prompts, b * n, n, args.tokens, stream, t), level))
                run.cpu, run.upstream_cpu = cpu_seconds(own) - cpu0, cpu_seconds(procs["vllm"]) - up0
                runs.setdefault((level, stream, t), []).append(run)
                print(f"block {b} c={level} stream={stream} {t:15s}: {run.wall:6.1f} s", flush=True)
    out = []
    for level, _n, stream in settings:
        row: dict[str, Any] = {"level": level, "stream": stream}
        for t in targets:
            row[t] = summary(runs[(level, stream, t)])
        for g in (t for t in targets if t.startswith("gateway")):
            for ref in ("direct+lp", "direct"):
                per_block = [
                    (a.tokens / a.wall) / (r.tokens / r.wall)
                    for a, r in zip(runs[(level, stream, g)], runs[(level, stream, ref)], strict=True)
                ]
                row[f"{g}/{ref}"] = float(np.median(per_block))
        out.append(row)
    return out


def table(rows: list[dict[str, Any]]) -> str:
    """One line per setting and gateway: tokens/s, the median per-block ratios, p50 / p99 latency, first chunk."""
    gws = [k for k in rows[0] if isinstance(rows[0][k], dict) and k.startswith("gateway")]
    lines = [
        "| in flight | stream | gateway | tok/s direct / direct+lp / gateway | gateway ÷ direct+lp | gateway ÷ direct "
        "| p50 / p99 s direct | p50 / p99 s direct+lp | p50 / p99 s gateway | first chunk p50 s (d / lp / gw) "
        "| CPU ms / request: vLLM direct / direct+lp / gateway's vLLM + gateway |",
        "|---:|---|---|---|---:|---:|---|---|---|---|---|",
    ]
    for r in rows:
        d, lp = r["direct"], r["direct+lp"]
        for name in gws:
            g = r[name]
            first = " / ".join("-" if x["first_p50_s"] is None else f"{x['first_p50_s']:.2f}" for x in (d, lp, g))
            lines.append(
                f"| {r['level']} | {'yes' if r['stream'] else 'no'} | {name} "
                f"| {d['tokens_per_s']:.1f} / {lp['tokens_per_s']:.1f} / {g['tokens_per_s']:.1f} "
                f"| {r[name + '/direct+lp']:.2f} | {r[name + '/direct']:.2f} "
                f"| {d['p50_s']:.2f} / {d['p99_s']:.2f} | {lp['p50_s']:.2f} / {lp['p99_s']:.2f} "
                f"| {g['p50_s']:.2f} / {g['p99_s']:.2f} | {first} | {d['vllm_cpu_ms_per_request']:.0f} / "
                f"{lp['vllm_cpu_ms_per_request']:.0f} / {g['vllm_cpu_ms_per_request']:.0f} + "
                f"{g['cpu_ms_per_request']:.1f} |"
            )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--levels", default="1,8,32", help="requests in flight")
    ap.add_argument("--block-requests", default="4,8,32", help="requests per target and block, one per level")
    ap.add_argument("--blocks", type=int, default=4, help="blocks per setting (the targets take turns in each)")
    ap.add_argument("--tokens", type=int, default=16, help="max_tokens of every request")
    ap.add_argument("--vllm-url", help="a running vLLM serving the default model as smollm2 (default: start one)")
    ap.add_argument(
        "--gateway-args", default="", help="more `tracecal serve` options, e.g. '--upstream-concurrency 64'"
    )
    ap.add_argument("--compare-src", help="also a gateway importing tracecal from this source tree (e.g. before)")
    ap.add_argument("--log", default="/tmp/bench_gateway_proxy.log", help="the servers' output")
    ap.add_argument("--out", type=Path, help="write the rows as JSON")
    args = ap.parse_args()
    prompts = questions(64)
    with open(args.log, "w") as log, contextlib.ExitStack() as stack:
        vllm = args.vllm_url or stack.enter_context(serve_vllm(log=log))
        urls, procs = {"direct": vllm, "direct+lp": vllm}, {"vllm": processes(vllm)}
        extra = args.gateway_args.split()
        urls["gateway"], procs["gateway"] = stack.enter_context(gateway(vllm, log, extra))
        if args.compare_src:
            urls["gateway@src"], procs["gateway@src"] = stack.enter_context(gateway(vllm, log, extra, args.compare_src))
        rows = bench(urls, procs, prompts, args)
    print(table(rows))
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
