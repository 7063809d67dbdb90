"""Backends side by side: answer tokens/s and agreement of HF (fp32, bf16), llama.cpp in-process and its server.

    . scripts/env.sh && OMP_NUM_THREADS=1 python benchmarks/bench_backends.py [--n 64] [--max-new-tokens 24]
        [--threads 1] [--batch-size 16] [--sub-n 16] [--no-f32] [--no-server] [--json out.json]

The same TriviaQA prompts (chat template, greedy) go through each backend in turn, one model loaded at a time,
1 thread each (torch ``set_num_threads``, llama.cpp ``n_threads``, the server's ``--n_threads``):

* ``hf-fp32``, ``hf-bf16``: the HF backend on the GGUF dequantised by transformers (batches of ``--batch-size``);
* ``lcpp``: the llama.cpp backend as it loads by default (no extra buffer types: batch-invariant kernels);
* ``lcpp-extra``: the same with llama.cpp's extra buffer types (repacked / AMX weights: what llama.cpp and its
  server use by default);
* ``lcpp-f32``: llama.cpp on an F32 GGUF written by llama.cpp from the Q4_1 one (the very weights HF computes
  with, in float32 arithmetic): separates the weights from llama.cpp's quantised arithmetic;
* ``server``: ``python -m llama_cpp.server`` (stock: extra buffers on) through the HTTP backend, each prompt sent
  to ``/v1/completions`` as the text of the same prompt ids (the server tokenizes it back to the same ids),
  ``repeat_penalty`` 1.0 (the server's default is 1.1); one request at a time. Then on the first ``--sub-n``
  prompts: the server's default ``repeat_penalty`` and its own chat template (``/v1/chat/completions``).

Reported: answer tokens/s; identical answers; max |Δs_t|, |ΔH_t| per answer on the shared token prefix (median
and max over answers); at the first step, the largest |Δ log p| over HF fp32's top-10 tokens and how often the
argmax agrees; and, where greedy answers split, HF's log-prob margin between its token and llama.cpp's.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from tracecal.backends import load_model  # noqa: E402
from tracecal.backends.hf import default_gguf_path  # noqa: E402
from tracecal.backends.llamacpp import LlamaCppModel  # noqa: E402
from tracecal.backends.llamacpp_server import serve_gguf  # noqa: E402
from tracecal.tasks import get_task  # noqa: E402


def timed_generate(lm: Any, prompts: list, mnt: int) -> tuple[list, float]:
    lm.generate(prompts[:1], max_new_tokens=2)  # warm-up
    t0 = time.perf_counter()
    out = lm.generate(prompts, max_new_tokens=mnt)
    return out, time.perf_counter() - t0


def first_step_logprobs(lm: Any, prompt_ids: list[list[int]], vocab: int) -> np.ndarray:
    """Full-vocabulary log-softmax at the first answer position, (B, |V|)."""
    return np.asarray(lm.next_token_logprobs(prompt_ids, list(range(vocab)), batch_size=8), dtype=np.float64)


def lcp(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if len(diff) else n


def compare(ref: list, other: list, by_text: bool = False) -> dict[str, Any]:
    """Identical answers; per-answer max |Δs|, |ΔH| on the shared token prefix.

    ``by_text`` (an HTTP trace: no token ids, top-k H): max |Δs| on whole identical answers only.
    """
    same = [a.text == b.text for a, b in zip(ref, other, strict=True)]
    ds, dh = [], []
    for a, b in zip(ref, other, strict=True):
        n = (a.length if a.text == b.text else 0) if by_text else lcp(a.token_ids, b.token_ids)
        n = min(n, a.length, b.length)
        if n:
            ds.append(float(np.abs(a.surprisal[:n] - b.surprisal[:n]).max()))
            dh.append(float(np.abs(a.entropy[:n] - b.entropy[:n]).max()))
    out: dict[str, Any] = {"identical_answers": f"{sum(same)}/{len(same)}", "share": round(float(np.mean(same)), 3)}
    for name, v in (("max_abs_ds", ds), ("max_abs_dH", [] if by_text else dh)):
        if v:
            out[name] = {"median": float(np.median(v)), "max": float(np.max(v)), "answers": len(v)}
    return out


def first_step(ref_lp: np.ndarray, lp: np.ndarray) -> dict[str, Any]:
    top = np.argsort(-ref_lp, axis=1)[:, :10]
    d = np.abs(np.take_along_axis(lp, top, 1) - np.take_along_axis(ref_lp, top, 1)).max(axis=1)
    agree = float(np.mean(lp.argmax(1) == ref_lp.argmax(1)))
    return {"top10_max_abs_dlogp": {"median": float(np.median(d)), "max": float(d.max())}, "argmax_agrees": agree}


def split_margins(hf: Any, ref: list, other: list) -> dict[str, Any]:
    """Where greedy answers split: HF's log p(its token) − log p(the other backend's token) at that step."""
    m = []
    for a, b in zip(ref, other, strict=True):
        n = lcp(a.token_ids, b.token_ids)
        if n < min(a.length, b.length):
            s, _ = hf.teacher_forced(list(a.prompt_ids) + list(a.token_ids[:n]), [int(b.token_ids[n])])
            m.append(float(s[0] - a.surprisal[n]))
    return {"median": float(np.median(m)), "max": float(np.max(m)), "splits": len(m)} if m else {"splits": 0}


def f32_gguf(out_dir: str) -> Path:
    """The default Q4_1 GGUF dequantised to F32 by llama.cpp itself (llama_model_quantize, ftype ALL_F32)."""
    import llama_cpp

    dst = Path(out_dir) / "smollm2-f32.gguf"
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype, p.allow_requantize, p.nthread = llama_cpp.LLAMA_FTYPE_ALL_F32, True, 1
    rc = llama_cpp.llama_model_quantize(str(default_gguf_path()).encode(), str(dst).encode(), ctypes.byref(p))
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize failed ({rc})")
    return dst


def run_hf(a: argparse.Namespace, prompts: list, res: dict, traces: dict) -> tuple[Any, np.ndarray]:
    ids, lp = None, None
    for dtype in ("float32", "bfloat16"):
        name = "hf-fp32" if dtype == "float32" else "hf-bf16"
        lm = load_model(dtype=dtype, batch_size=a.batch_size)
        traces[name], sec = timed_generate(lm, prompts, a.max_new_tokens)
        res["speed"][name] = speed(traces[name], sec)
        if dtype == "float32":
            ids = [list(t.prompt_ids) for t in traces[name]]
            lp = first_step_logprobs(lm, ids, lm.vocab_size)
            fp32 = lm
        else:
            res["agreement"]["hf-bf16 vs hf-fp32"] = compare(traces["hf-fp32"], traces[name])
            del lm
    return fp32, lp


def speed(tr: list, sec: float) -> dict[str, Any]:
    n = sum(t.length for t in tr)
    return {"seconds": round(sec, 1), "answer_tokens": n, "answer_tokens_per_s": round(n / sec, 1)}


def run_lcpp(a: argparse.Namespace, prompts: list, res: dict, traces: dict, hf: Any, ref_lp: np.ndarray) -> None:
    variants: list[tuple[str, Any, bool]] = [("lcpp", None, False), ("lcpp-extra", None, True)]
    tmp = tempfile.TemporaryDirectory()
    if a.f32:
        variants.append(("lcpp-f32", f32_gguf(tmp.name), False))
    ids = [list(t.prompt_ids) for t in traces["hf-fp32"]]
    for name, path, extra in variants:
        lm = LlamaCppModel.load(path, n_threads=a.threads, extra_buffers=extra, tokenizer=hf.tokenizer)
        traces[name], sec = timed_generate(lm, prompts, a.max_new_tokens)
        res["speed"][name] = speed(traces[name], sec)
        assert [list(t.prompt_ids) for t in traces[name]] == ids, "HF and llama.cpp must get the same prompt ids"
        key = f"{name} vs hf-fp32"
        res["agreement"][key] = compare(traces["hf-fp32"], traces[name])
        res["agreement"][key]["first_step"] = first_step(ref_lp, first_step_logprobs(lm, ids, lm.vocab_size))
        res["agreement"][key]["hf_margin_at_split"] = split_margins(hf, traces["hf-fp32"], traces[name])
        del lm
        gc.collect()
    tmp.cleanup()


def run_server(a: argparse.Namespace, res: dict, traces: dict, tok: Any) -> None:
    texts = [tok.decode(t.prompt_ids) for t in traces["lcpp-extra"]]
    ref = traces["lcpp-extra"]
    with open(a.server_log, "w") as log, serve_gguf(n_threads=a.threads, log=log, extra_buffers=True) as url:

        def http(repeat_penalty: float | None, chat: bool) -> Any:
            extra = {} if repeat_penalty is None else {"repeat_penalty": repeat_penalty}
            kw = {"model": "smollm2", "vocab_size": 49152, "chat": chat, "batch_size": 1, "timeout": 600.0}
            return load_model(url, backend="http", extra_body=extra, **kw)

        lm = http(1.0, chat=False)
        traces["server"], sec = timed_generate(lm, texts, a.max_new_tokens)
        res["speed"]["server"] = speed(traces["server"], sec)
        res["agreement"]["server vs lcpp-extra"] = compare(ref, traces["server"], by_text=True)
        sub = slice(0, a.sub_n)
        default_rp = http(None, chat=False).generate(texts[sub], max_new_tokens=a.max_new_tokens)
        res["agreement"]["server (repeat_penalty 1.1) vs lcpp-extra"] = compare(ref[sub], default_rp, by_text=True)
        chat = http(1.0, chat=True).generate(a.prompts[sub], max_new_tokens=a.max_new_tokens)
        res["agreement"]["server chat endpoint vs lcpp-extra"] = compare(ref[sub], chat, by_text=True)
        pairs = [(x, b) for x, b in zip(ref, traces["server"], strict=True) if x.text == b.text and x.length]
        gap = [b.entropy[: x.length] - x.entropy for x, b in pairs]  # top-k estimate (upper bound) − exact
        res["server_topk_H_minus_exact_H"] = {
            "median_of_max": float(np.median([g.max() for g in gap])),
            "max": float(max(g.max() for g in gap)),
            "min": float(min(g.min() for g in gap)),
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--sub-n", type=int, default=16)
    ap.add_argument("--no-f32", dest="f32", action="store_false")
    ap.add_argument("--no-server", dest="server", action="store_false")
    ap.add_argument("--server-log", default=os.path.join(tempfile.gettempdir(), "bench_backends_server.log"))
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    task = get_task("triviaqa")
    a.prompts = [task.prompt(ex, chat=True) for ex in task.load(limit=a.n)]
    res: dict[str, Any] = {
        "prompts": len(a.prompts),
        "max_new_tokens": a.max_new_tokens,
        "threads": a.threads,
        "speed": {},
        "agreement": {},
    }
    traces: dict[str, list] = {}
    t0 = time.perf_counter()
    hf, ref_lp = run_hf(a, a.prompts, res, traces)
    run_lcpp(a, a.prompts, res, traces, hf, ref_lp)
    if a.server:
        run_server(a, res, traces, hf.tokenizer)
    res["wall_seconds"] = round(time.perf_counter() - t0, 1)
    res["loadavg_1min"] = round(os.getloadavg()[0], 2)
    print(json.dumps(res, indent=1))
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
