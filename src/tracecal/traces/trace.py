"""Decoding traces: one answer (`Trace`) and a batch over ragged arrays (`TraceBatch`).

A trace holds O(T) numbers per answer, recorded during the single decoding pass that produced it
(docs/method.md §1):

* ``surprisal[t] = -log p_t`` in nats, where ``p_t`` is the probability of the chosen token;
* ``entropy[t] = -sum_v P_t(v) log P_t(v)`` in nats over the full vocabulary (``entropy_kind="exact"``),
  or the truncated top-k estimate with a uniform tail (``entropy_kind="topk"``, HTTP backends).

Stop tokens (EOS / end-of-turn) are never part of the answer. Traces persist losslessly as Parquet
(one row per answer) and export to JSONL: `tracecal.traces.io`.

>>> from tracecal.traces.trace import Trace, TraceBatch
>>> t = Trace(text="Paris", token_ids=[42], surprisal=[0.1], entropy=[0.5])
>>> len(t), t.is_empty, t.entropy_kind
(1, False, 'exact')
>>> b = TraceBatch.from_lists([[0.1, 0.2], []], [[0.5, 0.4], []])  # two answers, the second empty
>>> b.offsets.tolist(), b.lengths.tolist()
([0, 2, 2], [2, 0])
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from tracecal._validation import float_array, int_array
from tracecal.errors import ValidationError
from tracecal.traces.segments import MAX_TOKEN_NATS, NEGATIVE_TOLERANCE, Segments, check_token_values

__all__ = [
    "Trace",
    "TraceBatch",
    "check_token_values",
    "describe_trace",
    "offsets_of",
    "MAX_TOKEN_NATS",
    "NEGATIVE_TOLERANCE",
    "check_traces",
    "ENTROPY_KINDS",
    "STOP_REASONS",
]

ENTROPY_KINDS = ("exact", "topk")
STOP_REASONS = ("eos", "length", "stop_string", "unknown")


def _strings(x: Any, name: str) -> list[str]:
    """``x`` as a list of str, or `ValidationError` naming ``name``."""
    if isinstance(x, str) or not isinstance(x, list | tuple) or not all(isinstance(v, str) for v in x):
        raise ValidationError(f"{name} must be a list of strings (one per token), got {x!r:.60}")
    return list(x)


@dataclass(eq=False)
class Trace:
    """One generated answer and its per-token decoding statistics.

    Attributes:
        text: the answer text (stop tokens excluded).
        token_ids: answer token ids, shape ``(T,)``, int64.
        surprisal: ``s_t = -log p_t`` per answer token, nats, float64, shape ``(T,)``.
        entropy: ``H_t`` per answer token, nats, float64, shape ``(T,)``.
        token_strings: the text of each token as it appears in ``text`` (may be ``""`` for a token that
            only completes a multi-byte character).
        offsets: start character offset of each token in ``text``, int64, shape ``(T,)``.
        prompt: the prompt as the user gave it (before any chat template).
        prompt_ids: exactly the ids fed to the model (after the chat template).
        entropy_kind: ``"exact"`` (full vocabulary) or ``"topk"`` (truncated estimate, docs/method.md §1).
        stop_reason: ``"eos"`` (a stop token ended the answer), ``"length"`` (max_new_tokens reached).
        model_id: the model that produced the answer.
        decoding: decoding settings (greedy / temperature / top-p ..., and which logits were recorded).
        topk_ids, topk_logprobs: optional top-k alternatives per step, shape ``(T, k)``.
        id: a caller-chosen identifier (e.g. the task row id).
        meta: free-form JSON-serialisable metadata.
        hidden: optional hidden-state summary recorded with the answer (float32, shape (2, layers, d):
            `tracecal.backends.hidden`); kept in memory only (trace files do not store it).
        hidden_layers: the 1-based decoder layers ``hidden`` holds, in its order (set with ``hidden``).

    The constructor checks shapes, not values; every boundary checks the values with one rule
    (`check_token_values`: finite, in [0, `MAX_TOKEN_NATS`] nats): `TraceBatch.from_traces`, every operator, and
    `tracecal.traces.io.save_traces` before it writes, so that no file is written that cannot be read back.
    """

    text: str
    token_ids: np.ndarray
    surprisal: np.ndarray
    entropy: np.ndarray
    token_strings: list[str] = field(default_factory=list)
    offsets: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    prompt: str = ""
    prompt_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    entropy_kind: str = "exact"
    stop_reason: str = "unknown"
    model_id: str = ""
    decoding: dict[str, Any] = field(default_factory=dict)
    topk_ids: np.ndarray | None = None
    topk_logprobs: np.ndarray | None = None
    id: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    hidden: np.ndarray | None = field(default=None, repr=False)
    hidden_layers: tuple[int, ...] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.token_ids = int_array(self.token_ids, "Trace.token_ids")
        self.surprisal = float_array(self.surprisal, "Trace.surprisal")
        self.entropy = float_array(self.entropy, "Trace.entropy")
        self.prompt_ids = int_array(self.prompt_ids, "Trace.prompt_ids")
        offsets = int_array(self.offsets, "Trace.offsets")
        n = len(self.token_ids)
        self.offsets = offsets if len(offsets) else np.zeros(n, np.int64)
        self.token_strings = _strings(self.token_strings, "Trace.token_strings") or [""] * n
        for name, arr in (("surprisal", self.surprisal), ("entropy", self.entropy), ("offsets", self.offsets)):
            if len(arr) != n:
                raise ValidationError(f"Trace.{name} has {len(arr)} values but Trace.token_ids has {n} tokens")
        if len(self.token_strings) != n:
            raise ValidationError(
                f"Trace.token_strings has {len(self.token_strings)} items but Trace.token_ids has {n} tokens"
            )
        if self.entropy_kind not in ENTROPY_KINDS:
            raise ValidationError(f"entropy_kind must be one of {ENTROPY_KINDS}, got {self.entropy_kind!r}")
        if (self.topk_ids is None) != (self.topk_logprobs is None):
            raise ValidationError("Trace.topk_ids and Trace.topk_logprobs are given together or not at all")
        if self.topk_ids is not None:
            self.topk_ids = self._topk(self.topk_ids, "Trace.topk_ids", int_array, n)
            self.topk_logprobs = self._topk(self.topk_logprobs, "Trace.topk_logprobs", float_array, n)
            if self.topk_ids.shape != self.topk_logprobs.shape:
                raise ValidationError(
                    f"Trace.topk_ids has shape {self.topk_ids.shape}, Trace.topk_logprobs {self.topk_logprobs.shape}"
                )

    @staticmethod
    def _topk(value: Any, name: str, convert: Any, n: int) -> np.ndarray:
        """``value`` as a (T, k) array (``convert``: `int_array` or `float_array`), `ValidationError` naming ``name``
        when its size is not a multiple of T = ``n`` (no token: no alternatives)."""
        flat = convert(value, name)
        if (n == 0 and flat.size) or (n and flat.size % n):
            raise ValidationError(f"{name} must have shape (T, k) with T = {n} tokens, got {flat.size} values")
        return flat.reshape(0, 0) if n == 0 else flat.reshape(n, -1)

    # ------------------------------------------------------------------ derived views
    @property
    def length(self) -> int:
        """T, the number of answer tokens (0 for an empty answer)."""
        return int(len(self.token_ids))

    @property
    def is_empty(self) -> bool:
        """True when the model emitted a stop token first (T = 0): TRACE is undefined (NaN)."""
        return self.length == 0

    @property
    def probs(self) -> np.ndarray:
        """p_t = exp(-s_t)."""
        return np.exp(-self.surprisal)

    def __len__(self) -> int:
        return self.length

    def __repr__(self) -> str:
        return f"Trace(T={self.length}, text={self.text[:40]!r}, stop={self.stop_reason}, model={self.model_id!r})"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (floats kept exactly: JSON floats round-trip via repr)."""
        return {
            "id": self.id,
            "text": self.text,
            "prompt": self.prompt,
            "prompt_ids": self.prompt_ids.tolist(),
            "token_ids": self.token_ids.tolist(),
            "token_strings": list(self.token_strings),
            "offsets": self.offsets.tolist(),
            "surprisal": self.surprisal.tolist(),
            "entropy": self.entropy.tolist(),
            "entropy_kind": self.entropy_kind,
            "stop_reason": self.stop_reason,
            "model_id": self.model_id,
            "decoding": self.decoding,
            "topk_ids": None if self.topk_ids is None else self.topk_ids.tolist(),
            "topk_logprobs": None if self.topk_logprobs is None else self.topk_logprobs.tolist(),
            "meta": self.meta,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trace:
        n = len(d["token_ids"])
        tk_ids = d.get("topk_ids")
        tk_lp = d.get("topk_logprobs")
        return cls(
            text=d["text"],
            token_ids=np.asarray(d["token_ids"], dtype=np.int64),
            surprisal=np.asarray(d["surprisal"], dtype=np.float64),
            entropy=np.asarray(d["entropy"], dtype=np.float64),
            token_strings=list(d.get("token_strings") or [""] * n),
            offsets=np.asarray(d.get("offsets") or np.zeros(n), dtype=np.int64),
            prompt=d.get("prompt", ""),
            prompt_ids=np.asarray(d.get("prompt_ids") or [], dtype=np.int64),
            entropy_kind=d.get("entropy_kind", "exact"),
            stop_reason=d.get("stop_reason", "unknown"),
            model_id=d.get("model_id", ""),
            decoding=dict(d.get("decoding") or {}),
            topk_ids=None if tk_ids is None else np.asarray(tk_ids, dtype=np.int64).reshape(n, -1),
            topk_logprobs=None if tk_lp is None else np.asarray(tk_lp, dtype=np.float64).reshape(n, -1),
            id=str(d.get("id", "")),
            meta=dict(d.get("meta") or {}),
        )


@dataclass(eq=False)
class TraceBatch:
    """Many traces as ragged arrays: values of answer ``i`` are ``x[offsets[i]:offsets[i+1]]``.

    Attributes:
        surprisal, entropy: concatenated per-token values, float64, shape ``(N,)``, nats.
        offsets: int64, shape ``(B+1,)``, ``offsets[0] = 0``, ``offsets[-1] = N``.
        token_ids: concatenated token ids (optional, int64).
    """

    surprisal: np.ndarray
    entropy: np.ndarray
    offsets: np.ndarray
    token_ids: np.ndarray | None = None
    values_checked: bool = field(default=False, repr=False)
    """True once `checked` validated the values (set by the boundary constructors; never by hand)."""

    def __post_init__(self) -> None:
        self.surprisal = float_array(self.surprisal, "TraceBatch.surprisal")
        self.entropy = float_array(self.entropy, "TraceBatch.entropy")
        self.offsets = int_array(self.offsets, "TraceBatch.offsets")
        if len(self.offsets) == 0 or self.offsets[0] != 0:
            raise ValidationError("offsets must start at 0")
        if np.any(np.diff(self.offsets) < 0):
            raise ValidationError("offsets must be non-decreasing")
        n = int(self.offsets[-1])
        if len(self.surprisal) != n or len(self.entropy) != n:
            raise ValidationError(
                f"offsets end at {n} but surprisal has {len(self.surprisal)} and entropy {len(self.entropy)} values"
            )

    @property
    def lengths(self) -> np.ndarray:
        """T per answer, int64, shape ``(B,)``."""
        return np.diff(self.offsets)

    @cached_property
    def segments(self) -> Segments:
        """The ragged layout with cached per-token index arrays (shared by all operators)."""
        return Segments(self.offsets)

    def checked(self) -> TraceBatch:
        """This batch with surprisal and entropy checked in [0, `MAX_TOKEN_NATS`] nats (`check_token_values`):
        ``self``, or a copy with float round-off clipped to 0; ``ValueError`` naming the answer and the bad value
        otherwise. One vectorised check per batch, remembered in ``values_checked`` (inherited by `chunks` and
        `select`)."""
        if self.values_checked:
            return self
        s, h = check_token_values(self.surprisal, self.entropy, self.offsets)
        if s is self.surprisal and h is self.entropy:
            self.values_checked = True
            return self
        return TraceBatch(s, h, self.offsets, self.token_ids, values_checked=True)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @classmethod
    def from_traces(cls, traces: Sequence[Trace] | TraceBatch) -> TraceBatch:
        """Concatenate traces, validating the values (`check_token_values`; a `TraceBatch` goes to `checked`):
        ``ValueError`` naming the answer index and id for a negative, non-finite or absurd (> `MAX_TOKEN_NATS`)
        value (traces unmodified)."""
        if isinstance(traces, TraceBatch):
            return traces.checked()
        traces = check_traces(traces)
        offsets = offsets_of(traces)
        if traces:
            s = np.concatenate([t.surprisal for t in traces])
            h = np.concatenate([t.entropy for t in traces])
            ids = np.concatenate([t.token_ids for t in traces])
        else:
            s = h = np.zeros(0)
            ids = np.zeros(0, np.int64)
        s, h = check_token_values(s, h, offsets, lambda i: describe_trace(traces[i], f"answer {i}"))
        return cls(surprisal=s, entropy=h, offsets=offsets, token_ids=ids, values_checked=True)

    @classmethod
    def from_lists(
        cls, surprisal: Sequence[np.ndarray | Sequence[float]], entropy: Sequence[np.ndarray | Sequence[float]]
    ) -> TraceBatch:
        """Build from per-answer lists of s_t and H_t in nats (handy in tests and for users with their own
        logprobs); the values are validated like `from_traces` (in [0, `MAX_TOKEN_NATS`]), errors name the answer."""
        if len(surprisal) != len(entropy):
            raise ValidationError("surprisal and entropy must hold the same number of answers")
        lengths = np.array([len(x) for x in surprisal], dtype=np.int64)
        if not np.array_equal(lengths, [len(x) for x in entropy]):
            raise ValidationError("each answer needs as many entropy values as surprisal values")
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        cat = lambda xs: np.concatenate([np.asarray(x, float) for x in xs]) if len(xs) else np.zeros(0)  # noqa: E731
        return cls(surprisal=cat(surprisal), entropy=cat(entropy), offsets=offsets).checked()

    def chunks(self, max_tokens: int = 1 << 18) -> Iterator[tuple[int, int, TraceBatch]]:
        """Contiguous zero-copy sub-batches ``(i0, i1, batch[i0:i1])`` of about ``max_tokens`` tokens each.

        Operators run chunk by chunk so that their temporaries stay in cache (several times faster on large
        batches than one pass over the whole batch).
        """
        B = len(self)
        if B == 0:
            return
        cuts = np.searchsorted(self.offsets, np.arange(max_tokens, int(self.offsets[-1]), max_tokens), side="right") - 1
        bounds = np.unique(np.concatenate([[0], np.clip(cuts, 1, B), [B]]))
        for i0, i1 in zip(bounds[:-1], bounds[1:], strict=True):
            a, z = int(self.offsets[i0]), int(self.offsets[i1])
            ids = None if self.token_ids is None else self.token_ids[a:z]
            sub = TraceBatch(self.surprisal[a:z], self.entropy[a:z], self.offsets[i0 : i1 + 1] - a, ids)
            sub.values_checked = self.values_checked
            yield int(i0), int(i1), sub

    def select(self, idx: np.ndarray | Sequence[int]) -> TraceBatch:
        """A new batch holding answers ``idx`` in that order (vectorised gather)."""
        idx = np.asarray(idx, dtype=np.int64)
        lengths = self.lengths[idx]
        new_off = np.zeros(len(idx) + 1, dtype=np.int64)
        np.cumsum(lengths, out=new_off[1:])
        starts = self.offsets[:-1][idx]
        gather = np.repeat(starts - new_off[:-1], lengths) + np.arange(new_off[-1])
        ids = None if self.token_ids is None else self.token_ids[gather]
        return TraceBatch(self.surprisal[gather], self.entropy[gather], new_off, ids, self.values_checked)


def check_traces(traces: Any, name: str = "traces") -> list[Trace]:
    """``traces`` as a list of `Trace` (one `Trace` alone is a list of one), or `ValidationError` naming ``name``
    and the first item that is not one: the one check of every function that takes traces (the operators through
    `TraceBatch.from_traces`, the writers of `tracecal.traces.io`)."""
    if isinstance(traces, Trace):
        return [traces]
    if traces is None or isinstance(traces, str | bytes | Mapping) or not isinstance(traces, Iterable):
        raise ValidationError(f"{name} must be a list of Trace objects, got {type(traces).__name__}")
    out = list(traces)
    for i, t in enumerate(out):
        if not isinstance(t, Trace):
            raise ValidationError(f"{name}[{i}] must be a Trace, got {type(t).__name__} {t!r:.40}")
    return out


def offsets_of(traces: Sequence[Trace]) -> np.ndarray:
    """The ragged layout of ``traces``: int64, shape ``(B+1,)``, ``offsets[i+1] − offsets[i] = T_i``."""
    lengths = np.fromiter((t.length for t in traces), dtype=np.int64, count=len(traces))
    offsets = np.zeros(len(traces) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def describe_trace(t: Trace, where: str) -> str:
    """``where`` (e.g. ``"answer 3"``) followed by the trace's id when it has one, for error messages."""
    return f"{where} (id {t.id!r})" if t.id else where
