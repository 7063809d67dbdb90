"""llama.cpp backend: GGUF models in-process (llama-cpp-python), traces with the exact full-vocabulary entropy.

`LlamaCppModel.generate` feeds the prompt ids to llama.cpp and decodes greedily, one token per ``eval``. After
each it reads that step's |V| logits x_t from llama.cpp (``llama_get_logits_ith(ctx, -1)``) and, vectorised
over the vocabulary with NumPy (one exp pass, no Python loop over tokens),

    lse_t = logsumexp(x_t),  H_t = lse_t − Σ_v softmax(x_t)_v · x_t,v,  s_t = lse_t − x_t[ŷ_t],  ŷ_t = argmax x_t

(nats; ŷ_t is what llama.cpp's greedy sampler picks). O(1) numbers per step are kept, never the T×|V| logits.
Prompt ids are built as the Hugging Face backend builds them (:func:`prompt_ids`: the transformers tokenizer of
the GGUF and its chat template), so both backends feed identical ids; llama.cpp's own chat formatting is not
used. Prompts run one at a time; consecutive prompts reuse the KV cache of their common prefix (the chat
template's system prompt), which changed no number in our runs (without llama.cpp's extra buffer types, off by
default, see `LlamaCppModel.load`): each prompt is evaluated in one batch, each answer token alone. A cache filled
by another split of the same tokens (1 + 23 + 20 tokens) moved later logits by up to 0.11 nats, and so would a
multi-token batch of answer tokens: `trace_answers` (given answers, teacher forcing) feeds one token per ``eval``
too. Extra: ``pip install 'tracecal[llamacpp]'``. Its OpenAI-compatible server: `tracecal.backends.llamacpp_server`.
"""

from __future__ import annotations

import importlib.metadata
import os
import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from tracecal.backends import answers as bounds
from tracecal.backends.answers import Answer, Forced, check_answer_args, forced_decoding, trace_answers_local, why_not
from tracecal.backends.arguments import (
    Prompt,
    check_generate_args,
    check_id_lists,
    check_prompt_lengths,
    check_stop_strings,
    check_token_ids,
)
from tracecal.backends.base import (
    BackendUnsupportedError,
    SampleSet,
    decoded_prefixes,
    local_trace,
    name_trace,
    stop_string_hit,
)
from tracecal.backends.llamacpp_load import LlamaCppMissingError, import_llama_cpp, llama_model_params, open_gguf
from tracecal.backends.llamacpp_steps import draw, logits_stats, stack_top, top_k
from tracecal.backends.prompting import TokenizerBackend
from tracecal.backends.registry import HIDDEN_STATES
from tracecal.errors import ValidationError
from tracecal.traces.trace import Trace

__all__ = [
    "LlamaCppMissingError",
    "LlamaCppModel",
    "import_llama_cpp",
    "llama_model_params",
    "logits_stats",
]


class LlamaCppModel(TokenizerBackend):
    """A GGUF model run in-process by llama.cpp that returns `Trace` objects (a :class:`Backend`).

    Args:
        llm: a ``llama_cpp.Llama`` (created with ``logits_all=False``).
        tokenizer: the transformers tokenizer of the same model (chat template, decoding of answer tokens).
        model_id: name recorded in every trace.
        chat: format plain-string prompts with the tokenizer's chat template (default: when it has one).
        system_prompt: optional system message for chat prompts.
        batch_size: accepted for the protocol; prompts are decoded one at a time.
        reuse_prefix: keep the KV cache of the prefix shared with the previous sequence (as llama.cpp's
            server does; changes no number unless the model was loaded with ``extra_buffers``).
    """

    backend_name: ClassVar[str] = "llamacpp"  # its registered backend (`tracecal.backends.registry`)

    # The same constructor keywords as HFModel's, on purpose (`load_model` passes one set to either backend);
    # what they set is shared in `TokenizerBackend.__init__`, only the signatures repeat (`duplicates` lists them).
    def __init__(
        self,
        llm: Any,
        tokenizer: Any,
        model_id: str,
        chat: bool | None = None,
        system_prompt: str | None = None,
        batch_size: int = 1,
        reuse_prefix: bool = True,
    ) -> None:
        self.llm = llm
        self.reuse_prefix = reuse_prefix
        self._lib = import_llama_cpp()
        super().__init__(tokenizer, model_id, chat, system_prompt, batch_size)
        self._stop_set = frozenset(self.stop_ids)

    # ------------------------------------------------------------------ loading
    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str] | None = None,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        tokenizer: Any = None,
        dtype: str | None = "auto",
        device: str | None = "auto",
        extra_buffers: bool = False,
        **kwargs: Any,
    ) -> LlamaCppModel:
        """Load a ``.gguf`` file (None: the offline default SmolLM2-135M-Instruct Q4_1) on the CPU.

        ``n_threads``: llama.cpp threads (default: the count this process chose, else the rule of
        `tracecal.backends.runtime.auto_threads`, the CPUs other processes leave free).
        ``tokenizer``: a transformers tokenizer or a folder to load one from (default: the tokenizer stored in the
        GGUF, read by transformers).
        ``dtype`` / ``device`` must stay ``auto``: the GGUF's quantisation and the build decide.
        ``extra_buffers``: llama.cpp's repacked weight layouts (AMX / AVX-512 on CPUs that have them). Off by
        default: with them this build's Q4 matmuls depend on how the tokens are batched and are far less exact
        (docs/backends.md; ggml-org/llama.cpp#16315); without them traces are batch-invariant.
        """
        llm, tokenizer, model_id = open_gguf(path, n_ctx, n_threads, tokenizer, dtype, device, extra_buffers)
        return cls(llm, tokenizer, model_id=model_id, **kwargs)

    @property
    def vocab_size(self) -> int:
        """|V| of llama.cpp's output distribution (the size H_t is computed over)."""
        return int(self.llm.n_vocab())

    @property
    def context_length(self) -> int:
        """The llama.cpp context (``n_ctx``): prompt + answer tokens must fit."""
        return int(self.llm.n_ctx())

    def _model_eos_ids(self) -> list[int]:
        """The GGUF's EOS id (the rest of the stop set is the HF backend's, `TokenizerBackend._stop_token_ids`)."""
        eos = int(self.llm.token_eos())
        return [eos] if eos >= 0 else []

    def _check_length(self, prompt_ids: list[list[int]], max_new_tokens: int) -> None:
        ctx = self.context_length
        where, remedy = "the llama.cpp context", "Shorten it, lower max_new_tokens or raise n_ctx."
        check_prompt_lengths(prompt_ids, max_new_tokens, ctx, where, remedy)

    # ------------------------------------------------------------------ llama.cpp steps
    def _feed(self, ids: Sequence[int]) -> None:
        """Evaluate ``ids`` as a new sequence, keeping the cached prefix it shares with the previous one."""
        llm = self.llm
        keep = 0
        if self.reuse_prefix and llm.n_tokens:
            cached = llm.input_ids[: min(llm.n_tokens, len(ids) - 1)]
            diff = np.flatnonzero(cached != np.asarray(ids[: len(cached)]))
            keep = int(diff[0]) if len(diff) else len(cached)
        llm.n_tokens = keep  # llama.cpp's eval drops the KV cache from n_tokens on
        llm.eval(list(ids[keep:]))

    def _logits(self) -> np.ndarray:
        """The logits of the last evaluated position, as float64 (a copy of llama.cpp's |V| floats)."""
        ptr = self._lib.llama_get_logits_ith(self.llm.ctx, -1)
        return np.array(np.ctypeslib.as_array(ptr, shape=(self.vocab_size,)), dtype=np.float64)

    def _decode(
        self,
        prompt_ids: list[int] | None,
        max_new_tokens: int,
        top_logprobs: int,
        stops: Sequence[str],
        rng: np.random.Generator | None = None,
        temperature: float = 1.0,
    ) -> tuple[list[int], list[float], list[float], list[tuple[np.ndarray, np.ndarray]], bool]:
        """Decode one prompt: (new ids incl. a final stop token, s, H, top-k, hit a stop string).

        Greedy (``rng`` None), or each token drawn from softmax(x_t / τ) by inverse CDF with ``rng``; s_t and H_t
        are those of the distribution the token came from (x_t / τ; τ = 1 for greedy). ``prompt_ids`` None: the
        prompt is already evaluated (`sample_answers`).
        """
        if prompt_ids is not None:
            self._feed(prompt_ids)
        new: list[int] = []
        s: list[float] = []
        h: list[float] = []
        top: list[tuple[np.ndarray, np.ndarray]] = []
        for step in range(max_new_tokens):
            x = self._logits()
            if temperature != 1.0:
                x /= temperature
            lse, ent = logits_stats(x)
            tok = int(np.argmax(x)) if rng is None else draw(x, lse, rng)
            new.append(tok)
            s.append(lse - float(x[tok]))
            h.append(ent)
            if top_logprobs:
                top.append(top_k(x, lse, top_logprobs))
            if tok in self._stop_set:
                break
            if stops and stop_string_hit(self.tokenizer.decode(new), stops):
                return new, s, h, top, True
            if step + 1 < max_new_tokens:
                self.llm.eval([tok])
        return new, s, h, top, False

    def sample_answers(
        self,
        prompts: Sequence[Prompt],
        num_samples: int,
        max_new_tokens: int = 32,
        *,
        temperature: float = 1.0,
        stop_strings: Sequence[str] = (),
        seeds: Sequence[int] | None = None,
    ) -> list[SampleSet]:
        """The contract of :meth:`HFModel.sample_answers <tracecal.backends.hf.HFModel.sample_answers>` (``num_samples``
        answers per prompt drawn at ``temperature``, untruncated, each trace read from softmax(x_t / τ), and the
        cost of drawing them; arguments checked by `tracecal.backends.answers.check_sample_args`), one
        sequence at a time: all but the prompt's last token are evaluated once, from an empty cache, and kept; each
        sample evaluates the last token alone and decodes from there, so every sample is drawn from the same
        state whatever was evaluated before (llama.cpp's batched and one-token kernels differ in the last bits,
        enough to change a draw). ``seeds[i]`` seeds NumPy's generator of prompt i: the same seed gives the same
        answers with the same GGUF, llama.cpp build and thread count. Cost (`SampleSet`): ``prefill_tokens`` = the
        prompt, ``decode_tokens`` = Σ steps of the samples, ``forward_passes`` = 1 (the prompt) + Σ steps (one
        ``eval`` per step, the first of each sample being its prompt's last token), CPU and wall seconds."""
        args = bounds.check_sample_args(
            prompts, num_samples, max_new_tokens, temperature, stop_strings, seeds, self.batch_size
        )
        prompts, k, max_new_tokens, temperature, stops, seeds = args
        encoded = [self.encode_prompt(p) for p in prompts]
        self._check_length(encoded, max_new_tokens)
        decoding = self._decoding(max_new_tokens, 0, stops) | {
            "strategy": "sample",
            "temperature": float(temperature),
            "num_samples": k,
        }
        out = []
        for i, pids in enumerate(encoded):
            cpu, wall = time.process_time(), time.perf_counter()
            rng = np.random.default_rng(None if seeds is None else int(seeds[i]))
            traces, steps = [], 0
            self.llm.n_tokens = 0  # llama.cpp's eval drops the KV cache from n_tokens on
            if len(pids) > 1:
                self.llm.eval(pids[:-1])
            for _ in range(k):
                self.llm.n_tokens = len(pids) - 1
                self.llm.eval(pids[-1:])
                new, s, h, top, hit = self._decode(None, max_new_tokens, 0, stops, rng, float(temperature))
                steps += len(new)
                traces.append(name_trace(self._make_trace(pids, new, s, h, top, hit, decoding), prompts[i], i, None))
            cost = {
                "prefill_tokens": float(len(pids)),
                "decode_tokens": float(steps),
                "answer_tokens": float(sum(t.length for t in traces)),
                "forward_passes": float(1 + steps),
                "cpu_seconds": time.process_time() - cpu,
                "wall_seconds": time.perf_counter() - wall,
            }
            out.append(SampleSet(traces, cost))
        return out

    def _decoding(self, max_new_tokens: int, top_logprobs: int, stop_strings: list[str]) -> dict[str, Any]:
        """What a trace records of how it was decoded (greedy; `sample_answers` adds its sampling keys)."""
        return {
            "strategy": "greedy",
            "max_new_tokens": max_new_tokens,
            "temperature": 1.0,
            "top_logprobs": top_logprobs,
            "stop_strings": stop_strings,
            "recorded_logits": "llama.cpp's logits of each step (the GGUF's weights, llama.cpp's CPU kernels)",
            "chat_template": self.chat,
            "backend": "llama.cpp",
            "llama_cpp_python": importlib.metadata.version("llama-cpp-python"),
            "n_threads": int(self.llm.context_params.n_threads),
            "extra_buffers": bool(self.llm.model_params.use_extra_bufts),
        }

    # ------------------------------------------------------------------ Backend
    def generate(
        self,
        prompts: Sequence[Prompt],
        max_new_tokens: int = 32,
        *,
        do_sample: bool = False,
        top_logprobs: int = 0,
        stop_strings: Sequence[str] = (),
        batch_size: int | None = None,
        ids: Sequence[str] | None = None,
        progress: Callable[[int], None] | None = None,
        **_: Any,
    ) -> list[Trace]:
        """Decode one greedy answer per prompt and record its trace in the same pass.

        The keywords mean what they mean for :meth:`HFModel.generate <tracecal.backends.hf.HFModel.generate>`
        (``progress`` is called after each prompt); sampling (``do_sample=True``) raises
        :class:`BackendUnsupportedError`; the HF backend's other sampling keywords are accepted and ignored.
        """
        if do_sample:
            raise BackendUnsupportedError("the llama.cpp backend decodes greedily; sample with backend='hf'")
        more = {"stop_strings": stop_strings, "progress": progress}
        prompts, max_new_tokens, _batch, top_logprobs = check_generate_args(
            prompts, max_new_tokens, batch_size, self.batch_size, ids, top_logprobs, **more
        )
        top_logprobs = bounds.check_top_logprobs(top_logprobs, self.vocab_size)
        stop_strings = check_stop_strings(stop_strings)
        encoded = [self.encode_prompt(p) for p in prompts]
        self._check_length(encoded, max_new_tokens)
        decoding = self._decoding(max_new_tokens, top_logprobs, stop_strings)
        out = []
        for i, (p, pids) in enumerate(zip(prompts, encoded, strict=True)):
            new, s, h, top, hit = self._decode(pids, max_new_tokens, top_logprobs, stop_strings)
            out.append(name_trace(self._make_trace(pids, new, s, h, top, hit, decoding), p, i, ids))
            if progress is not None:
                progress(1)
        return out

    def _make_trace(
        self,
        prompt_ids: list[int],
        new: list[int],
        s: list[float],
        h: list[float],
        top: list[tuple[np.ndarray, np.ndarray]],
        hit_stop_string: bool,
        decoding: dict[str, Any],
    ) -> Trace:
        """The trace of one answer: stop token and stop-string token dropped, offsets from decoded prefixes."""
        T = len(new)
        stop_reason = "length"
        if T and new[-1] in self._stop_set:
            T, stop_reason = T - 1, "eos"
        elif hit_stop_string:
            T, stop_reason = T - 1, "stop_string"
        answer = new[:T]
        topk = stack_top(top[:T])
        prefixes = decoded_prefixes(self.tokenizer, answer)
        return local_trace(prefixes, answer, s, h, prompt_ids, stop_reason, self.model_id, decoding, topk)

    def teacher_forced(self, prompt_ids: Sequence[int], answer_ids: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """(s_t, H_t) of ``answer_ids`` after ``prompt_ids``, nats: llama.cpp fed one answer token per step."""
        prompt_ids = check_token_ids(prompt_ids, "prompt_ids", self.vocab_size, min_len=1)
        f = self._forced(prompt_ids, check_token_ids(answer_ids, "answer_ids", self.vocab_size), 1.0, 0)
        return f.surprisal, f.entropy

    def _forced(self, prompt_ids: list[int], answer_ids: list[int], temperature: float, k: int) -> Forced:
        """Teacher forcing of one answer, one token per ``eval`` as greedy decoding feeds them: llama.cpp's
        multi-token batches run other matmul kernels, whose logits differ from one-token steps by up to 0.1 nats
        on Q4 weights (measured), so batching the answer would not reproduce the generation-time trace."""
        if not prompt_ids:
            raise ValidationError("teacher forcing needs at least one prompt token")
        self._feed(prompt_ids)
        T = len(answer_ids)
        s, h = np.zeros(T), np.zeros(T)
        top: list[tuple[np.ndarray, np.ndarray]] = []
        for t in range(T + 1):
            x = self._logits() / temperature
            lse, ent = logits_stats(x)
            if t == T:
                end = float(np.exp(x[list(self._stop_set)] - lse).sum())
                return Forced(s, h, *stack_top(top), int(np.argmax(x)), end)
            s[t], h[t] = lse - x[answer_ids[t]], ent
            if k:
                top.append(top_k(x, lse, k))
            self.llm.eval([answer_ids[t]])
        raise AssertionError("unreachable")

    def trace_answers(self, prompts: Sequence[Prompt], answers: Sequence[Answer], **options: Any) -> list[Trace]:
        """The trace of each given answer after its prompt, as if llama.cpp had decoded it greedily (teacher forcing,
        one token per step: `_forced`; prompts one at a time, cached prefixes kept). The keywords of
        `HFForwardPasses.trace_answers`; what the trace means: `tracecal.backends.answers`."""
        args = check_answer_args(
            prompts, answers, options, self.batch_size, hidden=why_not(self, HIDDEN_STATES), vocab_size=self.vocab_size
        )
        k = min(args.top_logprobs, self.vocab_size - 1)
        extra = {"backend": "llama.cpp", "recorded_logits": "llama.cpp's logits, one answer token per step"}

        def forced(rows: list[tuple[list[int], list[int]]]) -> list[Forced]:
            return [self._forced(p, a, args.temperature, k) for p, a in rows]

        decoding = forced_decoding(args, self.chat, extra)
        return trace_answers_local(self, args, forced, decoding, options.get("ids"), options.get("progress"))

    def next_token_logprobs(
        self, prompt_ids: Sequence[Sequence[int]], token_ids: Sequence[int], batch_size: int | None = None
    ) -> np.ndarray:
        """log P(v | prompt) of the next token for each prompt and each v in ``token_ids`` (full-vocabulary
        log-softmax): shape (B, K). Prompts are evaluated one at a time (``batch_size`` is ignored)."""
        prompt_ids = check_id_lists(prompt_ids, "prompt_ids", self.vocab_size)
        tok = np.asarray(check_token_ids(token_ids, "token_ids", self.vocab_size, min_len=1), dtype=np.int64)
        out = np.zeros((len(prompt_ids), len(tok)))
        for i, p in enumerate(prompt_ids):
            if not len(p):
                raise ValidationError(f"prompt {i} has no tokens")
            self._feed([int(t) for t in p])
            x = self._logits()
            out[i] = x[tok] - logits_stats(x)[0]
        return out

    def beam_scores(self, prompts: Sequence[Prompt], num_beams: int = 5, max_new_tokens: int = 32, **_: Any) -> Any:
        """Not available: raises :class:`BackendUnsupportedError` (use the HF backend for beam scores)."""
        raise BackendUnsupportedError(
            "beam search scores (beam_scores) are not available from the llama.cpp backend: it decodes one "
            "sequence at a time and llama-cpp-python has no beam search. Use the Hugging Face backend (backend='hf')."
        )
