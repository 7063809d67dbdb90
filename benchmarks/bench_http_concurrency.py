"""Benchmark: the HTTP backend's throughput at 1, 4 and 16 requests in flight against one real server, and
(vLLM) what exact entropy from the full distribution costs against top-20 log-probs.

    python benchmarks/bench_http_concurrency.py [--server llamacpp|vllm] [--n 16] [--tokens 8] [--levels 1,4,16]
        [--server-threads 1] [--full N] [--url http://127.0.0.1:PORT/v1]

``--server llamacpp`` starts ``python -m llama_cpp.server`` (the default GGUF, `serve_gguf`); ``--server vllm``
starts vLLM's CPU build (`serve_vllm`, fp32 weights, ``--max-logprobs`` = |V|; needs ``scripts/setup_vllm.sh``).
Then it generates the same TriviaQA prompts through `HTTPModel` with ``max_concurrency`` = each level, side by
side in one run, and prints answer tokens/s and the ratio to one request in flight. With ``--full N`` (vLLM)
it also generates the first N prompts one at a time with ``top_logprobs=20`` and with
``full_distribution=True``: seconds and response bytes per answer token for each.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from collections.abc import Iterator

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import httpx  # noqa: E402

from tracecal.backends.http import HTTPModel  # noqa: E402
from tracecal.backends.llamacpp_server import serve_gguf  # noqa: E402
from tracecal.backends.vllm import serve_vllm  # noqa: E402
from tracecal.tasks import get_task  # noqa: E402

V = 49152


@contextlib.contextmanager
def server(kind: str, threads: int, url: str | None = None) -> Iterator[str]:
    if url:
        yield url
    elif kind == "vllm":
        with serve_vllm(max_logprobs=V) as url:
            yield url
    else:
        with serve_gguf(n_threads=threads) as url:
            yield url


def counting_client() -> tuple[httpx.Client, list[int]]:
    """An httpx client that adds up the bytes of every response body it receives."""
    seen: list[int] = []

    def hook(r: httpx.Response) -> None:
        r.read()
        seen.append(len(r.content))

    return httpx.Client(timeout=600.0, event_hooks={"response": [hook]}), seen


def full_cost(url: str, prompts: list, tokens: int) -> None:
    for full in (False, True):
        client, seen = counting_client()
        lm = HTTPModel(
            url, model="smollm2", vocab_size=V, max_concurrency=1, full_distribution=full, client=client, timeout=600.0
        )
        t0 = time.perf_counter()
        traces = lm.generate(prompts, max_new_tokens=tokens)
        dt = time.perf_counter() - t0
        n = sum(t.length for t in traces)
        print(
            f"{'full |V|' if full else 'top-20  '}: {dt / n:7.3f} s and {sum(seen) / n / 1e6:7.3f} MB per answer "
            f"token ({n} tokens, entropy_kind={traces[0].entropy_kind})",
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", choices=("llamacpp", "vllm"), default="llamacpp")
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--levels", default="1,4,16")
    ap.add_argument("--server-threads", type=int, default=1)
    ap.add_argument("--url", help="use this running server (served as smollm2) instead of starting one")
    ap.add_argument("--full", type=int, default=0, help="vLLM: compare full-distribution and top-20 on N prompts")
    args = ap.parse_args()
    task = get_task("triviaqa")
    prompts = [task.prompt(ex, chat=True) for ex in task.load(limit=args.n)]
    with server(args.server, args.server_threads, args.url) as url:
        base = None
        for level in (int(x) for x in args.levels.split(",")):
            lm = HTTPModel(url, model="smollm2", vocab_size=V, max_concurrency=level)
            t0 = time.perf_counter()
            traces = lm.generate(prompts, max_new_tokens=args.tokens)
            dt = time.perf_counter() - t0
            tps = sum(t.length for t in traces) / dt
            base = base or tps
            print(
                f"{args.server} in flight {level:2d}: {dt:6.1f} s for {len(traces)} answers, {tps:5.1f} answer "
                f"tokens/s ({tps / base:.2f}x one in flight)",
                flush=True,
            )
        if args.full:
            full_cost(url, prompts[: args.full], args.tokens)


if __name__ == "__main__":
    main()
