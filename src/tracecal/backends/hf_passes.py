"""The forward passes of the Hugging Face backend besides generation: teacher forcing (one answer, or batches of
given answers: ``trace_answers``, `tracecal.backends.answers`), next-token log-probs, beam scores (the estimators
that need the weights: P(True), verbalised confidence, beam baselines).

:class:`HFForwardPasses` is a mixin of :class:`~tracecal.backends.hf.HFModel`: it reads the weights
(``model``), the tokenizer and the padding / stop ids that ``HFModel`` sets up. All log-probabilities are in
nats, from a full-vocabulary log-softmax of float32 logits.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from tracecal.backends.answers import Answer, Forced, check_answer_args, forced_decoding, trace_answers_local
from tracecal.backends.arguments import (
    NUM_BEAMS,
    Prompt,
    check_batch_size,
    check_count,
    check_id_lists,
    check_positive_int,
    check_prompt_lengths,
    check_prompts,
    check_token_ids,
)
from tracecal.backends.hidden import LayerTap, forced_summaries
from tracecal.backends.prefill import last_logits_only, length_batches
from tracecal.backends.prompting import TokenizerBackend
from tracecal.backends.recorder import logit_stats, output_cache
from tracecal.traces.trace import Trace

__all__ = ["HFForwardPasses", "forced_pass", "left_pad"]


def left_pad(seqs: Sequence[Sequence[int]], pad_id: int, device: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask) of token-id lists, left padded with ``pad_id`` to the longest, on ``device``."""
    n = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), n), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), n), dtype=torch.long)
    for i, s in enumerate(seqs):
        if len(s):
            ids[i, n - len(s) :] = torch.tensor(list(s), dtype=torch.long)
            mask[i, n - len(s) :] = 1
    return ids.to(device), mask.to(device)


@torch.no_grad()
def forced_pass(
    model: Any,
    rows: Sequence[tuple[Sequence[int], Sequence[int]]],
    pad_id: int,
    stop_ids: Sequence[int],
    temperature: float = 1.0,
    top_logprobs: int = 0,
    hidden_layers: str | Sequence[int] | None = None,
) -> list[Forced]:
    """Teacher forcing of a batch of (prompt ids, answer ids): one forward pass over the left-padded
    prompt + answer sequences (positions from the mask), logits kept only at the last max T + 1 positions.

    For answer token t of row b, x = logits / ``temperature`` at the position before it; s_t = lse − x[a_t],
    H_t = lse − Σ softmax(x)·x (`logit_stats`, float32 as the recorder computes them, returned as float64), the
    greedy next token after the answer and Σ_{stop ids} P(v) there (`tracecal.backends.answers.Forced`), and with
    ``hidden_layers`` each answer's hidden-state summary from the same pass (`tracecal.backends.hidden`).
    """
    device = next(model.parameters()).device
    ids, mask = left_pad([[*p, *a] for p, a in rows], pad_id, device)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    K = max(len(a) for _, a in rows) + 1
    keep = {"logits_to_keep": K} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}
    tap = None if hidden_layers is None else LayerTap(model, hidden_layers, last_only=False)
    try:
        out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False, **keep)
    finally:
        if tap is not None:
            tap.close()
    summaries = [None] * len(rows) if tap is None else forced_summaries(tap, [len(a) for _, a in rows])
    layers = None if tap is None else tap.layers
    x = out.logits[:, -K:].float()
    if temperature != 1.0:
        x = x / temperature
    lse, h = logit_stats(x)
    stops = torch.tensor(list(stop_ids), dtype=torch.long, device=device)
    result = []
    for b, (_, a) in enumerate(rows):
        T = len(a)
        xb, lb = x[b, K - 1 - T :], lse[b, K - 1 - T :]
        tok = torch.tensor(list(a), dtype=torch.long, device=device)
        s = lb[:T] - xb[:T].gather(1, tok[:, None]).squeeze(1)
        top: tuple[Any, Any] = (None, None)
        if top_logprobs:
            v, i = torch.topk(xb[:T], min(top_logprobs, xb.shape[-1]), dim=-1)
            top = (i.cpu().numpy().astype(np.int64), (v - lb[:T, None]).double().cpu().numpy())
        end = float(torch.exp(xb[T, stops] - lb[T]).sum()) if len(stops) else 0.0
        s_np, h_np = s.double().cpu().numpy(), h[b, K - 1 - T : K - 1].double().cpu().numpy()
        result.append(Forced(s_np, h_np, top[0], top[1], int(xb[T].argmax()), end, summaries[b], layers))
    return result


class HFForwardPasses(TokenizerBackend):
    """Forward passes over a loaded causal LM (a mixin: ``HFModel`` provides the attributes below)."""

    model: Any
    """The ``transformers`` causal LM."""
    tokenizer: Any
    """Its tokenizer."""
    chat: bool
    """Format plain-string prompts with the chat template."""
    system_prompt: str | None
    """Optional system message for chat prompts."""
    batch_size: int
    """Default prompts per batch."""
    pad_id: int
    """The id left padding uses."""
    stop_ids: list[int]
    """Token ids that end an answer."""

    @property
    def device(self) -> torch.device:
        """The device of the weights (inputs are moved there)."""
        return next(self.model.parameters()).device

    @property
    def vocab_size(self) -> int:
        """Rows of the output embedding (the size of the distribution H_t is computed over)."""
        return int(self.model.get_output_embeddings().weight.shape[0])

    @property
    def context_length(self) -> int:
        """``max_position_embeddings`` (or ``n_positions``) of the model config; 2048 if neither is set."""
        cfg = self.model.config
        return int(getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None) or 2048)

    def left_pad(self, seqs: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """(input_ids, attention_mask) of token-id lists, left padded with ``pad_id`` to the longest, on ``device``."""
        return left_pad(seqs, self.pad_id, self.device)

    def _check_length(self, prompt_ids: list[list[int]], max_new_tokens: int) -> None:
        ctx = self.context_length
        where, remedy = "the model's context", "Shorten it or lower max_new_tokens."
        check_prompt_lengths(prompt_ids, max_new_tokens, ctx, where, remedy)

    @torch.no_grad()
    def teacher_forced(self, prompt_ids: Sequence[int], answer_ids: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """s_t and H_t of ``answer_ids`` given ``prompt_ids`` from one forward pass (no padding), nats."""
        prompt_ids = check_token_ids(prompt_ids, "prompt_ids", self.vocab_size, min_len=1)
        answer_ids = check_token_ids(answer_ids, "answer_ids", self.vocab_size)
        ids = torch.tensor([prompt_ids + answer_ids], dtype=torch.long, device=self.device)
        logits = self.model(ids).logits[0, len(prompt_ids) - 1 : -1].float()
        logp = torch.log_softmax(logits, -1)
        ans = torch.tensor(list(answer_ids), device=self.device)
        s = -logp.gather(1, ans[:, None]).squeeze(1)
        h = -(logp.exp() * logp).sum(-1)
        return s.double().cpu().numpy(), h.double().cpu().numpy()

    def trace_answers(self, prompts: Sequence[Prompt], answers: Sequence[Answer], **options: Any) -> list[Trace]:
        """The trace of each given answer after its prompt, as if this model had generated it greedily: batched
        teacher forcing (left-padded batches of similar lengths, one forward pass each; `forced_pass`).

        Args:
            prompts: as for ``generate`` (text, chat messages, dicts with ``prompt``/``messages``/``prompt_ids``).
            answers: one per prompt: text (tokenized without special tokens) or token ids.
            **options: ``batch_size`` (default: the model's), ``ids``, ``progress``, ``top_logprobs`` (0),
                ``temperature`` (1.0: the greedy view; τ: the distribution answers sampled at τ were drawn from,
                before truncation), ``max_new_tokens`` and ``stop_strings`` (for the stop reason only),
                ``hidden_layers`` (``"auto"`` or layer indices: each trace's ``hidden`` summary from the same pass,
                equal to what ``generate(hidden_layers=...)`` records for the same tokens; `tracecal.backends.hidden`).

        What the numbers mean for answers the model did not generate, and the stop reason: `tracecal.backends.answers`.
        """
        args = check_answer_args(
            prompts, answers, options, self.batch_size, vocab_size=getattr(self, "vocab_size", None)
        )
        hidden_layers = options.get("hidden_layers")
        extra = {
            "recorded_logits": "one forward pass over prompt + answer (teacher forcing): raw logits / temperature",
            "dtype": str(self.model.dtype).replace("torch.", ""),
            "device": str(self.device),
        }

        def forced(rows: list[tuple[list[int], list[int]]]) -> list[Forced]:
            return forced_pass(
                self.model, rows, self.pad_id, self.stop_ids, args.temperature, args.top_logprobs, hidden_layers
            )

        decoding = forced_decoding(args, self.chat, extra)
        return trace_answers_local(self, args, forced, decoding, options.get("ids"), options.get("progress"))

    @torch.no_grad()
    def next_token_logprobs(
        self, prompt_ids: Sequence[Sequence[int]], token_ids: Sequence[int], batch_size: int | None = None
    ) -> np.ndarray:
        """log P(v | prompt) at the position after each prompt, for the given ``token_ids``: shape (B, K).

        The log-softmax is over the full vocabulary (one forward pass per batch, left padded, logits at the last
        position only; `length_batches`: prompts of similar length share a batch, so little of it is padding, and a
        batch holds at most ``batch_size`` rows and `PREFILL_TOKENS` tokens).
        """
        bs = check_batch_size(batch_size, self.batch_size)
        prompt_ids = check_id_lists(prompt_ids, "prompt_ids", self.vocab_size)
        token_ids = check_token_ids(token_ids, "token_ids", self.vocab_size, min_len=1)
        tok = torch.tensor(token_ids, dtype=torch.long, device=self.device)
        out = np.zeros((len(prompt_ids), len(token_ids)))
        for idx in length_batches([len(p) for p in prompt_ids], bs):
            ids, mask = self.left_pad([prompt_ids[i] for i in idx])
            pos = (mask.cumsum(-1) - 1).clamp(min=0)
            out_ = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, **last_logits_only(self.model))
            logits = out_.logits[:, -1].float()
            out[idx] = torch.log_softmax(logits, -1)[:, tok].double().cpu().numpy()
        return out

    def cache_kw(self) -> str:
        """transformers ≥ 5.2x names the KV-cache argument ``cache``; older releases ``past_key_values``."""
        return "cache" if "cache" in inspect.signature(self.model.forward).parameters else "past_key_values"

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
    def _beam_batch(
        self, batch: list[list[int]], num_beams: int, max_new_tokens: int, shared_prefill: bool
    ) -> np.ndarray:
        """The ``num_beams`` final beam scores of each prompt of one batch, best first: (len(batch), num_beams)."""
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
        scores = res.sequences_scores.float().cpu().numpy().reshape(len(batch), num_beams)
        del res
        return np.asarray(-np.sort(-scores, axis=1))

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
        num_beams = check_count(num_beams, "num_beams", NUM_BEAMS)
        max_new_tokens = check_positive_int(max_new_tokens, "max_new_tokens")
        bs = max(1, check_batch_size(batch_size, self.batch_size) // 2)
        prompt_ids = [self.encode_prompt(p) for p in prompts]
        self._check_length(prompt_ids, max_new_tokens)
        out = np.full((len(prompts), num_beams), np.nan)
        order = np.argsort([-len(p) for p in prompt_ids], kind="stable")
        for start in range(0, len(order), bs):
            idx = order[start : start + bs]
            out[idx] = self._beam_batch([prompt_ids[i] for i in idx], num_beams, max_new_tokens, shared_prefill)
        return out
