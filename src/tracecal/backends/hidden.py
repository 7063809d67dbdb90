"""Hidden-state summaries of an answer, recorded in the one decoding pass (`HiddenRecorder`) or by teacher forcing
(`forced_summaries`), O(layers × d) numbers per answer: the full per-step states are never kept.

For an answer of T tokens after a prompt of L tokens, let h^ℓ_i be the output of decoder layer ℓ (the residual
stream after ℓ blocks, ``output_hidden_states[ℓ]`` of transformers for ℓ < the number of layers; for the last layer
it is taken before the final norm) at position i. The state that decodes answer token t is h^ℓ_{L−1+t}. Per layer ℓ
of ``layers`` the summary holds

    mean^ℓ  = (1/T) · Σ_{t<T} h^ℓ_{L−1+t}     (the mean over the states that decoded the answer's tokens)
    first^ℓ = h^ℓ_{L−1}                        (the state before the first answer token: the prompt's last position)

as a float32 array of shape (2, len(layers), d): ``[0]`` the means, ``[1]`` the first states (for T = 0 the mean is
the first state). During generation the state of step k is settled when its token is known (the next step, or the
end): it counts while the answer goes on (not a stop id, not completing a stop string: the rule of
`tracecal.backends.recorder.generated_trace`), so the mean is over exactly the T tokens the trace keeps.

`resolve_layers` turns ``"auto"`` into `DEFAULT_FRACTIONS` of the depth: round(n/4), round(n/2), round(3n/4) (SmolLM2
30 layers: 8, 15, 22; Qwen2.5-1.5B 28 layers: 7, 14, 21, the layer issue 39's first probe read).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from transformers import LogitsProcessor

from tracecal.backends.base import stop_string_hit
from tracecal.errors import ValidationError

__all__ = ["DEFAULT_FRACTIONS", "HiddenRecorder", "LayerTap", "decoder_layers", "forced_summaries", "resolve_layers"]

DEFAULT_FRACTIONS = (0.25, 0.5, 0.75)
"""The depths ``layers="auto"`` reads (fractions of the number of decoder layers, rounded, at least 1)."""


def decoder_layers(model: Any) -> Any:
    """The decoder blocks of a transformers causal LM (``model.get_decoder().layers``); `ValidationError` if none."""
    get = getattr(model, "get_decoder", None)
    layers = getattr(get() if callable(get) else getattr(model, "model", None), "layers", None)
    if layers is None:
        raise ValidationError(f"{type(model).__name__} exposes no decoder layers: hidden states cannot be recorded")
    return layers


def resolve_layers(layers: str | Sequence[int], n_layers: int) -> tuple[int, ...]:
    """The 1-based layer indices ``layers`` names (``"auto"``: `DEFAULT_FRACTIONS`), each in 1 … ``n_layers``."""
    if isinstance(layers, str):
        if layers != "auto":
            raise ValidationError(f"hidden_layers must be 'auto' or a list of layer indices, got {layers!r}")
        return tuple(sorted({max(1, round(f * n_layers)) for f in DEFAULT_FRACTIONS}))
    out = tuple(int(x) for x in layers)
    if not out or any(not 1 <= x <= n_layers for x in out) or len(set(out)) != len(out):
        raise ValidationError(f"hidden_layers must be distinct indices in 1…{n_layers}, got {list(layers)!r}")
    return out


class LayerTap:
    """Forward hooks on the chosen decoder layers: after each forward pass ``states[j]`` holds the float32 output of
    layer ``layers[j]``, shape (B, positions, d) (the last pass only); `close` removes the hooks."""

    def __init__(self, model: Any, layers: str | Sequence[int], last_only: bool) -> None:
        blocks = decoder_layers(model)
        self.layers = resolve_layers(layers, len(blocks))
        self.last_only = last_only
        self.states: list[torch.Tensor | None] = [None] * len(self.layers)
        self._handles = [blocks[ell - 1].register_forward_hook(self._hook(j)) for j, ell in enumerate(self.layers)]

    def _hook(self, j: int) -> Any:
        def keep(module: Any, args: Any, out: Any) -> None:
            h = out[0] if isinstance(out, tuple) else out
            self.states[j] = (h[:, -1] if self.last_only else h).detach().float()

        return keep

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()


class HiddenRecorder(LogitsProcessor):
    """Accumulates the summaries (module docstring) during ``model.generate``, appended after the trace recorder:
    each call settles the previous step's states with the token chosen from them (``input_ids[:, -1]``).
    ``kept``: a `tracecal.backends.recorder.StepHook`'s ``kept`` array (updated in place as its callback ends answers:
    the number of tokens row b keeps, −1 while it goes on), so an answer ended that way is summarised over its kept
    tokens only; None without a step hook."""

    def __init__(
        self,
        tap: LayerTap,
        tokenizer: Any,
        stop_ids: Sequence[int],
        stop_strings: Sequence[str],
        kept: np.ndarray | None = None,
    ) -> None:
        self.tap, self.tokenizer, self.stop_strings, self.kept = tap, tokenizer, tuple(stop_strings), kept
        self.stop_ids = set(int(i) for i in stop_ids)
        self.sum: torch.Tensor | None = None  # (k, B, d)
        self.first: torch.Tensor | None = None
        self.count = np.zeros(0, dtype=np.int64)
        self.alive = np.zeros(0, dtype=bool)
        self.ids: list[list[int]] = []
        self._pending: torch.Tensor | None = None

    def _settle(self, tokens: torch.Tensor) -> None:
        """Add the pending states of the rows whose answer goes on with ``tokens``."""
        assert self._pending is not None and self.sum is not None
        keep = np.zeros(len(self.alive), dtype=bool)
        for b, tok in enumerate(tokens.tolist()):
            if not self.alive[b]:
                continue
            self.ids[b].append(int(tok))
            cut = self.kept is not None and 0 <= self.kept[b] <= self.count[b]  # the step hook ended it before
            end = (
                cut
                or tok in self.stop_ids
                or (bool(self.stop_strings) and stop_string_hit(self.tokenizer.decode(self.ids[b]), self.stop_strings))
            )
            self.alive[b], keep[b] = not end, not end
        if keep.any():
            rows = torch.as_tensor(np.flatnonzero(keep), device=self.sum.device)
            self.sum[:, rows] += self._pending[:, rows]
            self.count[keep] += 1
        self._pending = None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self._pending is not None:
            self._settle(input_ids[:, -1])
        now = torch.stack([s for s in self.tap.states if s is not None])  # (k, B, d)
        if self.sum is None:
            self.sum, self.first = torch.zeros_like(now), now.clone()
            self.count, self.alive = np.zeros(now.shape[1], np.int64), np.ones(now.shape[1], bool)
            self.ids = [[] for _ in range(now.shape[1])]
        self._pending = now
        return scores

    def finish(self, sequences: torch.Tensor, lengths: Sequence[int]) -> list[np.ndarray]:
        """The (2, k, d) summary of each row, after settling the last step; ``lengths``: the T of each row's trace
        (checked against the tokens counted)."""
        self.tap.close()
        if self.sum is None or self.first is None:
            raise RuntimeError("the hidden-state recorder saw no decoding step")
        if self._pending is not None:
            self._settle(sequences[:, -1])
        if not np.array_equal(self.count, np.asarray(lengths)):
            raise RuntimeError(f"hidden states counted {self.count.tolist()} tokens, the traces {list(lengths)}")
        return [self._summary(self.sum[:, b], self.first[:, b], int(self.count[b])) for b in range(len(self.count))]

    @staticmethod
    def _summary(total: torch.Tensor, first: torch.Tensor, n: int) -> np.ndarray:
        mean = total / n if n else first
        return torch.stack([mean, first]).cpu().numpy().astype(np.float32)


def forced_summaries(tap: LayerTap, lengths: Sequence[int]) -> list[np.ndarray]:
    """The (2, k, d) summaries of a teacher-forced batch from the tapped states of its one forward pass over the
    left-padded prompt + answer rows (row b's answer is its last ``lengths[b]`` positions)."""
    states = torch.stack([s for s in tap.states if s is not None])  # (k, B, N, d)
    n = states.shape[2]
    out = []
    for b, T in enumerate(lengths):
        first = states[:, b, n - 1 - T]
        mean = states[:, b, n - 1 - T : n - 1].mean(1) if T else first
        out.append(torch.stack([mean, first]).cpu().numpy().astype(np.float32))
    return out
