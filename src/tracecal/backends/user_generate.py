"""Traces from your own ``model.generate(...)`` call (transformers), whatever its decoding settings.

    from tracecal.backends.user_generate import record

    with record(model, tokenizer) as rec:            # any transformers causal LM and its tokenizer
        out = model.generate(**inputs, do_sample=True, temperature=0.7, top_p=0.9, max_new_tokens=32)
    traces = rec.traces                               # one tracecal Trace per returned sequence, in order

Inside the block, ``model.generate`` is your call with one extra logits processor, `TraceRecorder` (transformers
runs it after the model's own processors - repetition penalty, suppressed tokens, ... - and before its temperature,
top-k and top-p warpers) and, with ``on_step``, one extra stopping criterion (`StepHook`: the streaming hook, each
step's tokens with s_t and H_t, True ends that sequence). What ``generate`` returns is unchanged. Without the
``with``, ``rec = Recording(model, tokenizer)`` and ``rec.generate(...)`` do the same for one call.

Which distribution s_t and H_t are read from (``decoding["recorded_logits"]`` of each trace):

* ``distribution="temperature"`` (default, as `HFModel.generate <tracecal.backends.hf.HFModel.generate>`):
  softmax(x_t / τ), x_t the processed logits, τ the sampling temperature (1 for greedy): the model's tempered
  distribution before truncation, so H_t still measures how spread the model was;
* ``distribution="sampled"``: the distribution tokens were drawn from - after the temperature, top-k, top-p and
  min-p warpers (rebuilt from the same settings: `sampling_warpers`) - truncated and renormalised; H_t is then the
  entropy of that truncated distribution.

Beam search (``num_beams > 1``) and assisted decoding reorder or batch candidates between steps, so a logits
processor's rows do not follow one returned sequence: their traces come from one teacher-forced pass over the
returned sequences (`tracecal.backends.hf_passes.forced_pass`; raw logits / τ when sampling), which is what the
model's distribution is along each returned answer. The settings are resolved as transformers resolves them: the
call's keywords, else its ``generation_config``, else ``model.generation_config``, else transformers' defaults
(`DEFAULTS`: e.g. top-k 50 when sampling). Answers end at the first stop token (the generation config's EOS ids, the
tokenizer's EOS and end-of-turn tokens: the HF backend's rule) or before a ``stop_strings`` match.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from transformers import (
    LogitsProcessorList,
    MinPLogitsWarper,
    StoppingCriteriaList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from tracecal._validation import Options, check_param, check_text
from tracecal.backends.answers import check_temperature, check_top_logprobs
from tracecal.backends.arguments import check_callback
from tracecal.backends.base import BackendUnsupportedError
from tracecal.backends.defaults import tokenizer_stop_ids
from tracecal.backends.hf_passes import forced_pass
from tracecal.backends.recorder import StepCallback, StepHook, TraceRecorder, generated_trace
from tracecal.traces.trace import Trace

__all__ = ["DEFAULTS", "DISTRIBUTIONS", "Recording", "record", "sampling_warpers"]

DISTRIBUTIONS = ("temperature", "sampled")
"""What s_t and H_t are read from (module docstring)."""

DEFAULTS: dict[str, Any] = {
    "do_sample": False,
    "temperature": 1.0,
    "top_k": 50,
    "top_p": 1.0,
    "min_p": None,
    "typical_p": 1.0,
    "epsilon_cutoff": 0.0,
    "eta_cutoff": 0.0,
    "num_beams": 1,
    "num_return_sequences": 1,
    "eos_token_id": None,
    "pad_token_id": None,
    "max_new_tokens": None,
    "stop_strings": None,
}
"""transformers' defaults of the settings read here (``GenerationConfig._get_default_generation_params``)."""


def _setting(name: str, kwargs: dict[str, Any], model: Any) -> Any:
    """A generation setting as transformers resolves it: keyword > ``generation_config`` > the model's > default."""
    values = (kwargs.get(name), getattr(kwargs.get("generation_config"), name, None))
    return next((v for v in (*values, getattr(model.generation_config, name, None)) if v is not None), DEFAULTS[name])


def sampling_warpers(settings: dict[str, Any]) -> LogitsProcessorList:
    """transformers' temperature, top-k, top-p and min-p warpers for these settings, in its order (what
    ``distribution="sampled"`` records through); `BackendUnsupportedError` for typical-p / epsilon / eta sampling."""
    for name, neutral in (("typical_p", 1.0), ("epsilon_cutoff", 0.0), ("eta_cutoff", 0.0)):
        if settings[name] not in (None, neutral):
            raise BackendUnsupportedError(f"distribution='sampled' does not rebuild {name}; use 'temperature'")
    out = LogitsProcessorList()
    if settings["temperature"] != 1.0:
        out.append(TemperatureLogitsWarper(settings["temperature"]))
    if settings["top_k"]:
        out.append(TopKLogitsWarper(top_k=settings["top_k"]))
    if settings["top_p"] < 1.0:
        out.append(TopPLogitsWarper(top_p=settings["top_p"]))
    if settings["min_p"] is not None:
        out.append(MinPLogitsWarper(min_p=settings["min_p"]))
    return out


def _vocab_size(model: Any) -> int | None:
    """The number of alternatives a step of ``model`` has (its config's ``vocab_size``; None if it says none)."""
    size = getattr(getattr(model, "config", None), "vocab_size", None)
    return int(size) if isinstance(size, int) and size > 0 else None


class Recording:
    """Traces of the sequences ``model.generate`` returns (module docstring). ``traces`` collects every call's.

    Args:
        model: a transformers causal LM (decoder-only).
        tokenizer: its tokenizer (decodes the answers; its EOS and end-of-turn tokens end them).
        distribution: ``"temperature"`` or ``"sampled"`` (`DISTRIBUTIONS`).
        top_logprobs: keep the top-k alternatives per step (0 = off).
        on_step: ``(rows, token_ids, s, h) -> None | bool per row`` after each step (`StepHook`; rows index the
            returned sequences); not with beams.
        model_id: name stored in the traces (default: the model's ``name_or_path``).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        distribution: str = "temperature",
        top_logprobs: int = 0,
        on_step: StepCallback | None = None,
        model_id: str | None = None,
    ) -> None:
        check_param("distribution", distribution, Options(*DISTRIBUTIONS))
        check_callback(on_step, "on_step")
        if model_id is not None:
            check_text(model_id, "model_id")
        if getattr(model.config, "is_encoder_decoder", False):
            raise BackendUnsupportedError("recording own generate() calls supports decoder-only causal LMs")
        self.model, self.tokenizer, self.distribution = model, tokenizer, distribution
        self.top_logprobs = check_top_logprobs(top_logprobs, _vocab_size(model))
        self.on_step = on_step
        self.model_id = model_id or str(getattr(model, "name_or_path", "") or type(model).__name__)
        self.traces: list[Trace] = []
        self._generate = model.generate
        self._previous: Any = None

    def __enter__(self) -> Recording:
        self._previous = vars(self.model).get("generate")  # an outer recording's, if any
        self.model.generate = self.generate  # the instance attribute shadows the method until __exit__
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is None:
            vars(self.model).pop("generate", None)
        else:
            self.model.generate = self._previous

    def _settings(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        s = {name: _setting(name, kwargs, self.model) for name in DEFAULTS}
        s["stepwise"] = s["num_beams"] == 1 and not (
            kwargs.get("assistant_model") or kwargs.get("prompt_lookup_num_tokens")
        )
        s["tau"] = check_temperature(s["temperature"]) if s["do_sample"] else 1.0
        eos = s["eos_token_id"]
        s["stop_ids"] = tokenizer_stop_ids(
            self.tokenizer, [] if eos is None else [eos] if isinstance(eos, int) else eos
        )
        return s

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        """``model.generate(*args, **kwargs)`` recorded: returns what it returns; its traces are added to
        ``traces``."""
        s = self._settings(kwargs)
        input_ids = kwargs.get("input_ids", kwargs.get("inputs", args[0] if args else None))
        if not isinstance(input_ids, torch.Tensor) or input_ids.ndim != 2:
            raise BackendUnsupportedError("recording needs the prompt as input_ids (a 2-D tensor of token ids)")
        mask = kwargs.get("attention_mask")
        rec = None
        if s["stepwise"]:
            warpers = sampling_warpers(s) if self.distribution == "sampled" and s["do_sample"] else None
            rec = TraceRecorder(s["tau"], self.top_logprobs, warpers)
            kwargs["logits_processor"] = LogitsProcessorList([*(kwargs.get("logits_processor") or []), rec])
        elif self.on_step is not None or self.distribution == "sampled":
            raise BackendUnsupportedError(
                "beam search and assisted decoding are recorded by one teacher-forced pass over the returned "
                "sequences: on_step and distribution='sampled' need step-by-step decoding (num_beams=1)"
            )
        n = len(input_ids) * int(s["num_return_sequences"])
        hook = None if rec is None or self.on_step is None else StepHook(rec, self.on_step, np.arange(n), s["stop_ids"])
        if hook is not None:
            kwargs["stopping_criteria"] = StoppingCriteriaList([*(kwargs.get("stopping_criteria") or []), hook])
        out = self._generate(*args, **kwargs)
        seqs = out if isinstance(out, torch.Tensor) else out.sequences
        mask = torch.ones_like(input_ids) if mask is None else mask
        prompts = [p[m.bool()].tolist() for p, m in zip(input_ids, mask, strict=True)]
        prompts = [prompts[r // (n // len(input_ids))] for r in range(len(seqs))]
        self.traces.extend(self._traces(prompts, seqs[:, input_ids.shape[1] :], s, rec, hook))
        return out

    def _traces(
        self, prompts: list[list[int]], new: torch.Tensor, s: dict[str, Any], rec: Any, hook: Any
    ) -> list[Trace]:
        """One trace per returned row: the recorder's numbers, or (beams, assisted decoding) a teacher-forced pass
        over prompt + returned tokens (the tokens after a stop token are cut by `generated_trace` either way)."""
        new_np = new.cpu().numpy()
        stops = s["stop_strings"] or []
        stops = [stops] if isinstance(stops, str) else list(stops)
        if rec is None:
            pad = s["pad_token_id"] if s["pad_token_id"] is not None else 0
            rows = [(p, r.tolist()) for p, r in zip(prompts, new_np, strict=True)]
            forced = forced_pass(self.model, rows, int(pad), s["stop_ids"], s["tau"], self.top_logprobs)
            recorded = [(f.surprisal, f.entropy, f.topk_ids, f.topk_logprobs) for f in forced]
        else:
            S, H, TI, TL = rec.finish(new)
            recorded = [
                (S[b], H[b], None if TI is None else TI[b], None if TL is None else TL[b]) for b in range(len(S))
            ]
        decoding, out = self._decoding(s), []
        for b, (p, r) in enumerate(zip(prompts, new_np, strict=True)):
            kept = None if hook is None or hook.kept[b] < 0 else int(hook.kept[b])
            t = generated_trace(self.tokenizer, s["stop_ids"], p, r, recorded[b], stops, self.model_id, decoding, kept)
            t.id = str(len(self.traces) + b)
            out.append(t)
        return out

    def _decoding(self, s: dict[str, Any]) -> dict[str, Any]:
        strategy = ("sample" if s["do_sample"] else "greedy") if s["num_beams"] == 1 else "beam_search"
        what = (
            "teacher-forced pass over the returned sequences: raw logits / temperature"
            if not s["stepwise"]
            else "after transformers' logits processors and every sampling warper (the sampled distribution)"
            if self.distribution == "sampled" and s["do_sample"]
            else "after transformers' logits processors and temperature, before top-k/top-p"
        )
        keys = ("temperature", "top_k", "top_p", "min_p", "num_beams", "num_return_sequences", "max_new_tokens")
        return {
            "strategy": strategy,
            **{k: s[k] for k in keys},
            "distribution": self.distribution,
            "recorded_logits": what,
            "source": "model.generate (tracecal.backends.user_generate)",
            "dtype": str(self.model.dtype).replace("torch.", ""),
            "device": str(next(self.model.parameters()).device),
        }


def record(model: Any, tokenizer: Any, **options: Any) -> Recording:
    """A `Recording` of ``model`` (``with record(model, tokenizer) as rec: model.generate(...)``; the keywords of
    `Recording`: ``distribution``, ``top_logprobs``, ``on_step``, ``model_id``)."""
    return Recording(model, tokenizer, **options)
