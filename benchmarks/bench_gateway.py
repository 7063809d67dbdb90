"""Load test of the gateway on 127.0.0.1: dynamic batching against one request at a time, same load.

For each mode (``--max-batch 8`` and ``--max-batch 1``) a ``tracecal serve`` process is started with the real
default model and warmed up; then the modes take turns (A1 B1 A2 B2 …), each round ``--requests`` chat requests
(TriviaQA questions, ``--max-tokens`` new tokens) at ``--concurrency`` requests in flight. Reported per mode:
5xx count (and every status), p50 / p99 latency, requests/s and generated tokens/s, and the server's RSS before
the first round and after each round (a leak shows as growth between rounds). The ratio of throughputs is the
batching speed-up.

    OMP_NUM_THREADS=1 python benchmarks/bench_gateway.py --requests 200 --concurrency 8 --max-tokens 16

Run it on an otherwise idle machine if possible; it prints a Markdown table and writes ``--out`` (JSON).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import psutil

ROOT = Path(__file__).resolve().parents[1]
MODEL = "smollm2-135m-instruct"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def questions(n: int) -> list[list[dict[str, str]]]:
    from tracecal.tasks import get_task

    task = get_task("triviaqa")
    exs = task.load(limit=n)
    return [task.prompt(e, chat=True) for e in exs]  # type: ignore[misc]


def start_server(max_batch: int, threads: int, port: int, wait_share: float, dtype: str) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable,
        "-m",
        "tracecal.cli.app",
        "serve",
        "--port",
        str(port),
        "--max-batch",
        str(max_batch),
        "--threads",
        str(threads),
        "--max-queue",
        "256",
        "--batch-wait-ms",
        "5",
        "--batch-wait-share",
        str(wait_share),
        "--dtype",
        dtype,
    ]
    env = os.environ | {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
    for _ in range(1200):
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited: {proc.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.kill()
    raise RuntimeError("the server did not start within 10 minutes")


async def one_round(url: str, prompts: list, concurrency: int, max_tokens: int) -> dict:  # type: ignore[type-arg]
    sem = asyncio.Semaphore(concurrency)
    lat: list[float] = []
    status: dict[int, int] = {}
    tokens = [0]

    async with httpx.AsyncClient(base_url=url, timeout=600, limits=httpx.Limits(max_connections=concurrency)) as c:

        async def ask(messages: list[dict[str, str]]) -> None:
            async with sem:
                t0 = time.perf_counter()
                r = await c.post(
                    "/v1/chat/completions", json={"model": MODEL, "messages": messages, "max_tokens": max_tokens}
                )
                lat.append(time.perf_counter() - t0)
                status[r.status_code] = status.get(r.status_code, 0) + 1
                if r.status_code == 200:
                    tokens[0] += r.json()["usage"]["completion_tokens"]

        t0 = time.perf_counter()
        await asyncio.gather(*(ask(p) for p in prompts))
        wall = time.perf_counter() - t0
    a = np.array(lat)
    return {
        "wall_s": wall,
        "requests_per_s": len(prompts) / wall,
        "tokens_per_s": tokens[0] / wall,
        "p50_s": float(np.percentile(a, 50)),
        "p99_s": float(np.percentile(a, 99)),
        "status": {str(k): v for k, v in sorted(status.items())},
        "server_errors": sum(v for k, v in status.items() if k >= 500),
        "tokens": tokens[0],
    }


def run_modes(args: argparse.Namespace, prompts: list) -> list[dict]:  # type: ignore[type-arg]
    """Start one server per mode, warm each up, then alternate their rounds (A1 B1 A2 B2: a change in the
    machine's load hits both modes alike). Only the server being measured is busy."""
    modes = [int(m) for m in args.modes.split(",")]
    procs, urls = [], []
    try:
        for m in modes:
            port = free_port()
            procs.append(start_server(m, args.threads, port, args.batch_wait_share, args.dtype))
            urls.append(f"http://127.0.0.1:{port}")
        servers = [psutil.Process(p.pid) for p in procs]
        for url in urls:  # warm-up
            asyncio.run(one_round(url, prompts[: args.concurrency * 2], args.concurrency, args.max_tokens))
        out = [
            {"max_batch": m, "rounds": [], "rss_mib": [s.memory_info().rss / 2**20]}
            for m, s in zip(modes, servers, strict=True)
        ]
        for i in range(args.rounds):
            for res, url, server in zip(out, urls, servers, strict=True):
                r = asyncio.run(one_round(url, prompts, args.concurrency, args.max_tokens))
                res["rounds"].append(r)
                res["rss_mib"].append(server.memory_info().rss / 2**20)
                print(
                    f"max-batch {res['max_batch']} round {i + 1}: {r['requests_per_s']:.2f} req/s, p50 "
                    f"{r['p50_s']:.2f} s, p99 {r['p99_s']:.2f} s, statuses {r['status']}, "
                    f"RSS {res['rss_mib'][-1]:.0f} MiB",
                    file=sys.stderr,
                )
        for res, url in zip(out, urls, strict=True):
            res["mean_batch_size"] = _mean_batch(httpx.get(url + "/metrics").text)
        return out
    finally:
        for p in procs:
            p.terminate()
            p.wait(30)


def _mean_batch(metrics: str) -> float | None:
    vals = {}
    for line in metrics.splitlines():
        for key in ("tracecal_batch_size_sum", "tracecal_batch_size_count"):
            if line.startswith(key + " "):
                vals[key] = float(line.split()[-1])
    n = vals.get("tracecal_batch_size_count")
    return vals["tracecal_batch_size_sum"] / n if n else None


def table(results: list[dict], args: argparse.Namespace) -> str:  # type: ignore[type-arg]
    lines = [
        f"{args.requests} chat requests × {args.rounds} rounds, {args.concurrency} in flight, max_tokens "
        f"{args.max_tokens}, torch threads {args.threads}, weights {args.dtype}",
        "",
        "| mode | round | 5xx | statuses | p50 s | p99 s | req/s | tokens/s | RSS MiB (before → after) |",
        "|---|---:|---:|---|---:|---:|---:|---:|---|",
    ]
    for res in results:
        mode = f"max-batch {res['max_batch']} (mean batch {res['mean_batch_size'] or 0:.1f})"
        for i, r in enumerate(res["rounds"]):
            lines.append(
                f"| {mode} | {i + 1} | {r['server_errors']} | {r['status']} | {r['p50_s']:.2f} | "
                f"{r['p99_s']:.2f} | {r['requests_per_s']:.2f} | {r['tokens_per_s']:.1f} | "
                f"{res['rss_mib'][i]:.0f} → {res['rss_mib'][i + 1]:.0f} |"
            )
    if len(results) == 2:
        tp = [np.mean([r["requests_per_s"] for r in res["rounds"]]) for res in results]
        lines += ["", f"throughput ratio (batched / one at a time): {tp[0] / tp[1]:.2f}×"]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=1, help="torch threads of the server")
    p.add_argument("--modes", default="8,1", help="max-batch values to compare (first / second = the ratio)")
    p.add_argument("--batch-wait-share", type=float, default=0.05, help="the server's --batch-wait-share")
    p.add_argument("--dtype", default="auto", help="the server's --dtype (auto: fp32 on CPU)")
    p.add_argument("--out", type=Path, default=Path("bench_gateway.json"))
    args = p.parse_args()
    prompts = questions(args.requests)
    results = run_modes(args, prompts)
    args.out.write_text(json.dumps({"args": vars(args) | {"out": str(args.out)}, "results": results}, indent=1))
    print(table(results, args))


if __name__ == "__main__":
    main()
