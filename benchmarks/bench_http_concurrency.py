"""Benchmark: the HTTP backend's throughput at 1, 4 and 16 requests in flight against one real llama.cpp server.

    python benchmarks/bench_http_concurrency.py [--n 16] [--tokens 8] [--levels 1,4,16] [--server-threads 1]

Starts ``python -m llama_cpp.server`` on 127.0.0.1 (the default GGUF, `serve_gguf`), then generates the same
TriviaQA prompts through `HTTPModel` with ``max_concurrency`` = each level, side by side in one run, and prints
answer tokens/s and the ratio to one request in flight. Needs the `llamacpp` extra (with its [server] part).
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tracecal.backends.http import HTTPModel  # noqa: E402
from tracecal.backends.llamacpp import serve_gguf  # noqa: E402
from tracecal.tasks import get_task  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--levels", default="1,4,16")
    ap.add_argument("--server-threads", type=int, default=1)
    args = ap.parse_args()
    task = get_task("triviaqa")
    prompts = [task.prompt(ex, chat=True) for ex in task.load(limit=args.n)]
    with serve_gguf(n_threads=args.server_threads) as url:
        base = None
        for level in (int(x) for x in args.levels.split(",")):
            lm = HTTPModel(url, model="smollm2", vocab_size=49152, max_concurrency=level)
            t0 = time.perf_counter()
            traces = lm.generate(prompts, max_new_tokens=args.tokens)
            dt = time.perf_counter() - t0
            tps = sum(t.length for t in traces) / dt
            base = base or tps
            print(f"in flight {level:2d}: {dt:6.1f} s for {len(traces)} answers, {tps:5.1f} answer tokens/s "
                  f"({tps / base:.2f}x one in flight)", flush=True)


if __name__ == "__main__":
    main()
