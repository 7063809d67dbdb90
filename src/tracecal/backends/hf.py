"""Hugging Face transformers backend: batched generation that records the trace in the same pass.

`HFModel.generate` calls ``model.generate`` (left padding, KV cache, any decoding strategy transformers
supports) with one extra logits processor, :class:`~tracecal.backends.recorder.TraceRecorder`, which records
H_t and s_t from the logits the decoder uses, O(B) numbers per step (the T×|V| logits are never stored).
The other forward passes (teacher forcing, next-token log-probs, beam scores) are in
:class:`~tracecal.backends.hf_passes.HFForwardPasses`; the factory of every backend is `tracecal.backends.load_model`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LogitsProcessorList

from tracecal._inputs import UserFileNotFoundError
from tracecal._validation import check_param
from tracecal.backends.answers import check_sample_args, check_temperature, check_top_logprobs
from tracecal.backends.arguments import GENERATOR_SEED, Prompt, check_generate_args, check_stop_strings
from tracecal.backends.base import SampleSet, name_trace
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
from tracecal.backends.hf_passes import HFForwardPasses
from tracecal.backends.hidden import HiddenRecorder, LayerTap
from tracecal.backends.prefill import contiguous_head_input
from tracecal.backends.recorder import StepCallback, StepHook, TraceRecorder, generated_trace, output_cache
from tracecal.backends.runtime import apply_threads, check_threads
from tracecal.errors import TracecalError
from tracecal.traces.trace import Trace

__all__ = [
    "DEFAULT_MODEL",
    "END_OF_TURN_TOKENS",
    "HFModel",
    "ModelLoadError",
    "SampleSet",
    "load_tokenizer",
    "TraceRecorder",
    "default_gguf_path",
    "output_cache",
]


@dataclass(frozen=True)
class Sampling:
    """The decoding policy of one ``generate`` call (`HFModel.generate`'s keywords of the same names)."""

    do_sample: bool
    temperature: float
    top_p: float
    top_k: int
    top_logprobs: int
    stop_strings: Sequence[str]


class ModelLoadError(TracecalError, RuntimeError):
    """A model name or path that resolves to no loadable model (not a directory, a .gguf file or a cached id)."""


def _resolve(name_or_path: str | os.PathLike[str] | None) -> tuple[str, str]:
    """(the model id traces record, the folder or HF id transformers loads) of a named offline model (None: the
    default), a ``.gguf`` file (dequantised once into a cached checkpoint folder: `gguf_checkpoint`), a local
    directory or a Hugging Face id."""
    if name_or_path is None or str(name_or_path) in NAMED_MODELS:  # a named offline model (defaults.py)
        model_id = DEFAULT_MODEL if name_or_path is None else str(name_or_path)
        name_or_path = named_gguf_path(model_id)
    else:
        model_id = str(name_or_path)
    p = Path(name_or_path)
    if p.suffix == ".gguf":
        if not p.is_file():
            raise UserFileNotFoundError(f"GGUF file not found: {p}")
        return model_id, str(gguf_checkpoint(p))  # fp32 on CPU so gradients work; converted once
    if p.is_dir() and not (p / "config.json").is_file():
        raise ModelLoadError(
            f"{p} is a folder without a model in it (no config.json): give a model folder (save_pretrained), a "
            f".gguf file or a Hugging Face id; {named_models_hint()}"
        )
    return model_id, str(name_or_path)


def _load_error(what: str, name_or_path: Any, e: Exception) -> ModelLoadError:
    return ModelLoadError(
        f"could not load {what} {name_or_path!r}: not a local directory or .gguf file, and not in the Hugging Face "
        f"cache (offline: HF_HUB_OFFLINE={os.environ.get('HF_HUB_OFFLINE', '0')}); {named_models_hint()}. {e}"
    )


def load_tokenizer(name_or_path: str | os.PathLike[str] | None = None) -> Any:
    """The tokenizer of a model as `HFModel.load` names it (a named offline model, a ``.gguf``, a local directory or
    a Hugging Face id), without its weights: what the HTTP backend renders prompts with (`tracecal serve --upstream
    URL --tokenizer NAME`). `ModelLoadError` when it resolves to none."""
    _, source = _resolve(name_or_path)
    try:
        return AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError) as e:  # transformers: a missing file, or a folder it cannot read a tokenizer from
        raise _load_error("the tokenizer of", name_or_path, e) from e


def _policy_kwargs(policy: Sampling) -> dict[str, Any]:
    """transformers' ``generate`` keywords of a decoding policy (greedy: the sampling knobs unset, so no
    generation-config default warns or applies)."""
    if policy.do_sample:
        return {"do_sample": True, "temperature": policy.temperature, "top_p": policy.top_p, "top_k": policy.top_k}
    return {"do_sample": False, "temperature": None, "top_p": None, "top_k": None}


class HFModel(HFForwardPasses):
    """A causal LM from transformers that returns `Trace` objects.

    Args:
        model: a loaded ``AutoModelForCausalLM``.
        tokenizer: its tokenizer.
        model_id: name recorded in every trace.
        chat: format prompts with the tokenizer's chat template (default: when it has one).
        system_prompt: optional system message for chat prompts.
        batch_size: prompts per generation batch.
    """

    backend_name: ClassVar[str] = "hf"  # its registered backend (`tracecal.backends.registry`)

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
        contiguous_head_input(model)  # frozen weights (SECL's peft model) would copy the head per batch row
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        self.pad_id = int(tokenizer.pad_token_id)
        super().__init__(tokenizer, model_id, chat, system_prompt, batch_size)

    # ------------------------------------------------------------------ loading
    @classmethod
    def load(
        cls,
        name_or_path: str | os.PathLike[str] | None = None,
        device: str = "auto",
        dtype: str | torch.dtype = "auto",
        threads: int | str | None = "auto",
        **kwargs: Any,
    ) -> HFModel:
        """Load the offline default (None), a named offline model (``NAMED_MODELS``: ``gemma3-270m``), a ``.gguf``
        file, a local directory, or a Hugging Face model id.

        ``dtype``: ``auto`` (bf16 on a GPU or on a CPU with bf16 matrix units, else fp32:
        `tracecal.backends.runtime.resolve_dtype`), ``float32``, ``bfloat16``, ``float16`` or a torch dtype.
        ``threads``: torch's CPU threads (process-wide), set here: ``auto`` (the CPUs other processes leave free,
        or ``OMP_NUM_THREADS``: `tracecal.backends.runtime.auto_threads`), a number, or None (leave them).
        """
        dev = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
        dtype_ = torch_dtype(dtype, dev)
        apply_threads(check_threads(threads))
        model_id, source = _resolve(name_or_path)
        try:
            tok = AutoTokenizer.from_pretrained(source)
            model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype_)
        except (OSError, ValueError) as e:
            raise _load_error("model", name_or_path, e) from e
        model.to(dev)  # type: ignore[arg-type]  # transformers wraps PreTrainedModel.to in functools.wraps: no self type
        tok.padding_side = "left"
        return cls(model, tok, model_id=model_id, **kwargs)

    def _model_eos_ids(self) -> list[int]:
        eos = self.model.generation_config.eos_token_id
        return [] if eos is None else [eos] if isinstance(eos, int) else list(eos)

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
        hidden_layers: str | Sequence[int] | None = None,
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
            hidden_layers: also record each answer's hidden-state summary in the same pass (``trace.hidden``, shape
                (2, layers, d): the mean over the answer's decoding states and the state before its first token,
                `tracecal.backends.hidden`): ``"auto"`` or 1-based layer indices; None (default) records none. With
                ``on_step``, an answer the callback ends is summarised over the tokens it keeps.
        """
        more = {"stop_strings": stop_strings, "progress": progress, "on_step": on_step, "hidden_layers": hidden_layers}
        prompts, max_new_tokens, bs, top_logprobs = check_generate_args(
            prompts, max_new_tokens, batch_size, self.batch_size, ids, top_logprobs, **more
        )
        top_logprobs = check_top_logprobs(top_logprobs, self.vocab_size)
        temperature = check_temperature(temperature) if do_sample else temperature
        prompt_ids = [self.encode_prompt(p) for p in prompts]
        self._check_length(prompt_ids, max_new_tokens)
        if seed is not None:
            torch.manual_seed(check_param("seed", seed, GENERATOR_SEED))
        policy = Sampling(do_sample, temperature, top_p, top_k, top_logprobs, tuple(check_stop_strings(stop_strings)))
        decoding = self._decoding(max_new_tokens, policy)
        traces = self._in_batches(prompt_ids, bs, max_new_tokens, policy, decoding, on_step, hidden_layers, progress)
        return [name_trace(tr, prompts[i], i, ids) for i, tr in enumerate(traces)]

    def _in_batches(
        self,
        prompt_ids: list[list[int]],
        bs: int,
        max_new_tokens: int,
        policy: Sampling,
        decoding: dict[str, Any],
        on_step: StepCallback | None,
        hidden: str | Sequence[int] | None,
        progress: Callable[[int], None] | None,
    ) -> list[Trace]:
        """The traces of every prompt, in prompt order, decoded in batches of ``bs`` prompts of similar length."""
        order = np.argsort([-len(p) for p in prompt_ids], kind="stable")  # similar lengths share a batch
        out: list[Trace | None] = [None] * len(prompt_ids)
        for start in range(0, len(order), bs):
            idx = order[start : start + bs]
            hook = None if on_step is None else (on_step, idx)
            traces, _ = self._generate_batch(
                [prompt_ids[i] for i in idx], max_new_tokens, policy, decoding, hook, hidden=hidden
            )
            for j, i in enumerate(idx):
                out[i] = traces[j]
            if progress is not None:
                progress(len(idx))
        return [t for t in out if t is not None]

    def _decoding(self, max_new_tokens: int, policy: Sampling) -> dict[str, Any]:
        """The decoding settings recorded in every trace (greedy decoding records the neutral values)."""
        sample = policy.do_sample
        return {
            "strategy": "sample" if sample else "greedy",
            "max_new_tokens": max_new_tokens,
            "temperature": policy.temperature if sample else 1.0,
            "top_p": policy.top_p if sample else 1.0,
            "top_k": policy.top_k if sample else 0,
            "top_logprobs": policy.top_logprobs,
            "stop_strings": list(policy.stop_strings),
            "recorded_logits": "after transformers' logits processors and temperature, before top-k/top-p",
            "chat_template": self.chat,
            "dtype": str(self.model.dtype).replace("torch.", ""),
            "device": str(self.device),
        }

    @torch.no_grad()
    def _generate_batch(
        self,
        prompt_ids: list[list[int]],
        max_new_tokens: int,
        policy: Sampling,
        decoding: dict[str, Any],
        hook: tuple[StepCallback, Sequence[int] | np.ndarray] | None = None,
        prefill: dict[str, Any] | None = None,
        hidden: str | Sequence[int] | None = None,
    ) -> tuple[list[Trace], int]:
        """The traces of one batch and the number of decoding steps it ran; ``prefill``: a KV cache of every prompt
        but its last token (`_shared_prefill`), so ``generate`` feeds only the last prompt token; ``hidden``: the
        layers whose summaries each trace gets (``trace.hidden``, `HiddenRecorder`), or None."""
        input_ids, mask = self.left_pad(prompt_ids)
        rec = TraceRecorder(policy.temperature if policy.do_sample else 1.0, policy.top_logprobs)
        steps = None if hook is None else StepHook(rec, hook[0], hook[1], self.stop_ids)
        gen_kwargs = _policy_kwargs(policy) | ({} if steps is None else steps.kwargs())
        states = None
        if hidden is not None:
            tap, kept = LayerTap(self.model, hidden, True), None if steps is None else steps.kept
            states = HiddenRecorder(tap, self.tokenizer, self.stop_ids, policy.stop_strings, kept=kept)
        try:
            seqs = self.model.generate(
                input_ids=input_ids,
                attention_mask=mask,
                max_new_tokens=max_new_tokens,
                logits_processor=LogitsProcessorList([rec] if states is None else [rec, states]),
                eos_token_id=self.stop_ids,
                pad_token_id=self.pad_id,
                **gen_kwargs,
                **(prefill or {}),
            )
        finally:
            if states is not None:
                states.tap.close()
        new = seqs[:, input_ids.shape[1] :]
        S, H, TI, TL = rec.finish(seqs)
        new_np = new.cpu().numpy()
        traces = [
            generated_trace(
                self.tokenizer,
                self.stop_ids,
                p,
                new_np[b],
                (S[b], H[b], None if TI is None else TI[b], None if TL is None else TL[b]),
                policy.stop_strings,
                self.model_id,
                decoding,
                None if steps is None or steps.kept[b] < 0 else int(steps.kept[b]),
            )
            for b, p in enumerate(prompt_ids)
        ]
        if states is not None:
            for t, summary in zip(traces, states.finish(seqs, [t.length for t in traces]), strict=True):
                t.hidden, t.hidden_layers = summary, states.tap.layers
        return traces, int(new.shape[1])

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
        """``num_samples`` answers per prompt drawn at ``temperature`` (no top-k / top-p truncation), each with its
        trace recorded from softmax(x_t / τ), the distribution it was drawn from, and what drawing them cost.

        One batch of ``num_samples`` rows per prompt: the prompt's KV cache is computed once and shared by the rows
        (`_shared_prefill`), then the rows decode together until the last one ends. ``seeds[i]`` seeds torch's
        generator before prompt i, so a prompt's samples do not depend on the prompts before it (the same seed
        gives the same answers on the same machine, dtype and thread count). The cost of prompt i (`SampleSet`):
        ``prefill_tokens`` (its prompt, once), ``decode_tokens`` (rows × decoding steps, finished rows included),
        ``answer_tokens`` (Σ answer lengths), ``forward_passes`` (the prefill + one per step, each over all rows),
        ``cpu_seconds`` (this process's CPU time, every thread) and ``wall_seconds``.
        """
        args = check_sample_args(
            prompts, num_samples, max_new_tokens, temperature, stop_strings, seeds, self.batch_size
        )
        prompts, k, max_new_tokens, temperature, stop_strings, seeds = args
        prompt_ids = [self.encode_prompt(p) for p in prompts]
        self._check_length(prompt_ids, max_new_tokens)
        policy = Sampling(True, float(temperature), 1.0, 0, 0, tuple(stop_strings))
        decoding = self._decoding(max_new_tokens, policy) | {"num_samples": k}
        out = []
        for i, p in enumerate(prompt_ids):
            cpu, wall = time.process_time(), time.perf_counter()
            if seeds is not None:
                torch.manual_seed(int(seeds[i]))
            with torch.no_grad():
                ids, mask = self.left_pad([p])
                prefill = self._shared_prefill(ids, mask, k) if len(p) >= 2 else None
                traces, steps = self._generate_batch([p] * k, max_new_tokens, policy, decoding, prefill=prefill)
            cost = {
                "prefill_tokens": float(len(p)),
                "decode_tokens": float(k * steps),
                "answer_tokens": float(sum(t.length for t in traces)),
                "forward_passes": float(steps + (prefill is not None)),
                "cpu_seconds": time.process_time() - cpu,
                "wall_seconds": time.perf_counter() - wall,
            }
            out.append(SampleSet([name_trace(t, prompts[i], i, None) for t in traces], cost))
        return out
