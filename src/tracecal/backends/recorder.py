"""`TraceRecorder`: the logits processor that records a trace during ``model.generate``.

`HFModel.generate` (:mod:`tracecal.backends.hf`) calls ``model.generate`` (left padding, KV cache, any
decoding strategy transformers supports) with one extra logits processor, `TraceRecorder`, appended after
transformers' own processors (repetition penalty, suppressed tokens, ...). At every step, on the model's
device, it computes from the logits the decoder uses

    lse_t = logsumexp(x_t),  H_t = lse_t − Σ_v softmax(x_t)_v · x_t,v   (entropy, nats)
    s_t   = lse_t − x_t[ŷ_t]                                           (surprisal, nats)

where x_t are the processed logits divided by the sampling temperature (so the distribution is the one
sampled from, before top-k/top-p truncation). Only O(B) numbers per step are kept (plus the current
step's logits, needed for s_t of the token chosen from them); the T×|V| logits are never stored.

`StepHook` (a stopping criterion) settles s_t as soon as the token is chosen and hands each step's new answer
tokens with their (s_t, H_t) to a callback, the same numbers that end up in the traces (streaming, early stop).
`generated_trace` turns one row of what was recorded into a `Trace` (the HF backend's and a user's own
``model.generate``'s: `tracecal.backends.user_generate`); `logit_stats` is the one formula of (lse_t, H_t), also
used by the teacher-forced passes (`tracecal.backends.hf_passes`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from transformers import LogitsProcessor, StoppingCriteria, StoppingCriteriaList

from tracecal.backends.base import decoded_prefixes, local_trace, stop_string_hit
from tracecal.traces.trace import Trace

__all__ = ["StepCallback", "StepHook", "TraceRecorder", "generated_trace", "logit_stats", "output_cache"]


def output_cache(out: Any) -> Any:
    """The KV cache of a model output: ``out.cache`` in transformers ≥ 5.2x, ``out.past_key_values`` before."""
    return out["cache"] if "cache" in out else out.past_key_values


def logit_stats(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(lse, H) over the last axis of logits ``x``: lse = logsumexp(x), H = lse − Σ_v softmax(x)_v · x_v (nats).

    Tokens masked to −inf have p = 0 and contribute 0 (``nansum``: 0·−inf would be NaN).
    """
    lse = torch.logsumexp(x, dim=-1)
    p = torch.exp(x - lse[..., None])
    return lse, lse - torch.nansum(p * x, dim=-1)


class TraceRecorder(LogitsProcessor):
    """Records H_t and s_t on device, step by step, without changing the scores.

    Args:
        temperature: the sampling temperature (1.0 for greedy); the recorded distribution is
            softmax(scores / temperature).
        top_logprobs: also keep the top-k alternatives (id, log-prob) per step (0 = off).
        warpers: instead of dividing by ``temperature``, record softmax(warpers(scores)): e.g. transformers'
            temperature, top-k and top-p warpers, so that the recorded distribution is the truncated one tokens
            are drawn from (`tracecal.backends.user_generate`, ``distribution="sampled"``).
    """

    def __init__(self, temperature: float = 1.0, top_logprobs: int = 0, warpers: Any = None) -> None:
        self.temperature = float(temperature)
        self.top_logprobs = int(top_logprobs)
        self.warpers = warpers
        self.entropy: list[torch.Tensor] = []
        self.chosen: list[torch.Tensor] = []
        self.topk_ids: list[torch.Tensor] = []
        self.topk_lp: list[torch.Tensor] = []
        self._x: torch.Tensor | None = None
        self._lse: torch.Tensor | None = None

    def settle(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(s_t, H_t) of the tokens just chosen from the latest step's distribution, shape (B,) each.

        s_t is computed once per step (here, by a `StepHook` right after the choice, or at the next step).
        """
        assert self._x is not None and self._lse is not None
        if len(self.chosen) < len(self.entropy):
            self.chosen.append(self._lse - self._x.gather(1, tokens[:, None]).squeeze(1))
        return self.chosen[-1], self.entropy[-1]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self._x is not None:
            self.settle(input_ids[:, -1])
        with torch.no_grad():
            x = scores.float()
            if self.warpers is not None:
                x = self.warpers(input_ids, x.clone())
            elif self.temperature != 1.0:
                x = x / self.temperature
            lse, h = logit_stats(x)
            self.entropy.append(h)
            if self.top_logprobs:
                v, i = torch.topk(x, self.top_logprobs, dim=-1)
                self.topk_ids.append(i)
                self.topk_lp.append(v - lse[:, None])
        self._x, self._lse = x, lse
        return scores

    def finish(self, sequences: torch.Tensor) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
        """After generation: settle the last step and move everything to the CPU once, shape (B, steps)."""
        steps = len(self.entropy)
        if steps and len(self.chosen) < steps:
            self.settle(sequences[:, -1])
        self._x = self._lse = None
        H = torch.stack(self.entropy, 1).double().cpu().numpy()
        S = torch.stack(self.chosen, 1).double().cpu().numpy()
        if self.top_logprobs:
            ti = torch.stack(self.topk_ids, 1).cpu().numpy().astype(np.int64)
            tl = torch.stack(self.topk_lp, 1).double().cpu().numpy()
            return S, H, ti, tl
        return S, H, None, None


StepCallback = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], Any]
"""``on_step(rows, token_ids, surprisal, entropy) -> None | bool array`` (see `StepHook`)."""


class StepHook(StoppingCriteria):
    """A stopping criterion that reports every decoding step to ``on_step`` and ends the answers it asks to end.

    After each step, ``on_step(rows, token_ids, s, h)`` receives the answers that produced an answer token (not a
    stop token, not already finished): their ``rows`` (entries of ``rows`` given here), the token ids and their
    s_t, H_t in nats (float64, from `TraceRecorder.settle`: the values the traces will hold). It may return a
    bool per reported answer: True ends that answer after this token. ``kept[b]`` is then the number of tokens
    answer ``b`` keeps (−1 for answers it never ended).
    """

    def __init__(
        self, recorder: TraceRecorder, on_step: StepCallback, rows: Sequence[int] | np.ndarray, stop_ids: Sequence[int]
    ):
        self.recorder, self.on_step = recorder, on_step
        self.rows = np.asarray(rows, dtype=np.int64)
        self.stop_ids = np.asarray(list(stop_ids), dtype=np.int64)
        self.done = np.zeros(len(self.rows), dtype=bool)
        self.kept = np.full(len(self.rows), -1, dtype=np.int64)
        self.steps = 0

    def kwargs(self) -> dict[str, Any]:
        """The keyword that hands this hook to ``model.generate``."""
        return {"stopping_criteria": StoppingCriteriaList([self])}

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any) -> torch.BoolTensor:
        s, h = self.recorder.settle(input_ids[:, -1])
        tokens = input_ids[:, -1].cpu().numpy()
        self.done |= np.isin(tokens, self.stop_ids)
        self.steps += 1
        live = ~self.done
        if live.any():
            s_np, h_np = s.double().cpu().numpy(), h.double().cpu().numpy()
            end = self.on_step(self.rows[live], tokens[live], s_np[live], h_np[live])
            if end is not None:
                ended = np.zeros(len(live), dtype=bool)
                ended[live] = np.asarray(end, dtype=bool)
                self.kept[ended] = self.steps
                self.done |= ended
        return torch.as_tensor(self.done, device=input_ids.device)  # type: ignore[return-value]


def generated_trace(
    tokenizer: Any,
    stop_ids: Sequence[int],
    prompt_ids: Sequence[int],
    new_ids: np.ndarray,
    recorded: tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None],
    stop_strings: Sequence[str],
    model_id: str,
    decoding: dict[str, Any],
    kept: int | None = None,
) -> Trace:
    """The trace of one generated row: ``new_ids`` (the tokens after the prompt) cut before the first stop id
    (``stop_reason="eos"``), after ``kept`` tokens when a `StepHook` callback ended it (``"stopped"``), or before the
    first token whose text completes one of ``stop_strings`` (`stop_string_hit`; ``"stop_string"``); else
    ``"length"``. ``recorded`` = (s, H, top-k ids, top-k log-probs) of the row, at least T steps each."""
    s, h, ti, tl = recorded
    if kept is not None:  # an on_step callback ended the answer after `kept` tokens
        new_ids = new_ids[:kept]
    is_stop = np.isin(new_ids, np.asarray(list(stop_ids), dtype=np.int64))
    T = int(np.argmax(is_stop)) if is_stop.any() else len(new_ids)
    stop_reason = "eos" if is_stop.any() else ("stopped" if kept is not None else "length")
    ids = new_ids[:T]
    prefixes = decoded_prefixes(tokenizer, ids)
    if stop_strings and T:
        # first token whose text completes a stop string (not inside leading whitespace): cut before it
        for i in range(1, T + 1):
            if stop_string_hit(prefixes[i], stop_strings):
                T, ids, prefixes, stop_reason = i - 1, ids[: i - 1], prefixes[:i], "stop_string"
                break
    topk = (None if ti is None or not T else ti[:T], None if tl is None or not T else tl[:T])  # none for T = 0
    return local_trace(prefixes, ids, s, h, prompt_ids, stop_reason, model_id, decoding, topk)
