"""Members added from outside the library, registered at test time: a calibrator and a backend that the commands, the
gateway, the API and the harness must take without any of them being touched."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
from scipy.special import expit
from sklearn.linear_model import LogisticRegression

from tracecal._validation import Interval
from tracecal.calibrators import Calibrator
from tracecal.calibrators.base import json_float
from tracecal.errors import ValidationError
from tracecal.stats.metrics import check_labels
from tracecal.traces.trace import Trace, TraceBatch

__all__ = ["MeanEntropyCalibrator", "ToyBackend", "synthetic_traces"]


def synthetic_traces(n: int = 48, seed: int = 0, model_id: str = "synthetic-model") -> tuple[list[Trace], np.ndarray]:
    """``n`` traces (the last one a zero-token answer) and labels in which a long, uncertain answer is more often
    wrong; both classes present."""
    rng = np.random.default_rng(seed)
    hard = rng.random(n)
    traces = []
    for i, h in enumerate(hard):
        T = 0 if i == n - 1 else int(rng.integers(2, 9))
        s, e = rng.gamma(1.0, 0.2 + h, T), rng.gamma(1.0, 0.3 + 2 * h, T)
        traces.append(
            Trace(text="ab"[:T], token_ids=np.arange(T), surprisal=s, entropy=e, id=f"q{i}", model_id=model_id)
        )
    y = (rng.random(n) > hard).astype(np.int64)
    y[:2] = (0, 1)
    return traces, y


def mean_entropy(X: Sequence[Trace] | TraceBatch) -> np.ndarray:
    """Mean H_t per answer (NaN for a zero-token answer), validated by `TraceBatch.from_traces`."""
    b = TraceBatch.from_traces(X)
    sums = np.bincount(np.repeat(np.arange(len(b)), b.lengths), weights=b.entropy, minlength=len(b))
    with np.errstate(invalid="ignore", divide="ignore"):
        return sums / b.lengths


class MeanEntropyCalibrator(Calibrator):
    """A toy calibrator on the traces: P(correct) = σ(b + w·(m − mean_) / scale_), m the mean entropy."""

    reads: ClassVar[str] = "traces"
    _parameter_constraints: ClassVar[dict[str, Any]] = {"C": Interval(float, 0, None, closed="neither")}

    def __init__(self, C: float = 1.0) -> None:
        self.C = C

    def fit(self, X: Any, y: Any) -> MeanEntropyCalibrator:
        self._check_params()
        m, yy = mean_entropy(X), check_labels(y)
        if yy.shape != m.shape:
            raise ValidationError(f"labels y must have shape {m.shape}, got {yy.shape}")
        ok = np.isfinite(m)
        self.mean_, self.scale_ = float(m[ok].mean()), float(m[ok].std() or 1.0)
        lr = LogisticRegression(C=float(self.C)).fit(((m[ok] - self.mean_) / self.scale_)[:, None], yy[ok])
        self.coef_, self.intercept_ = float(lr.coef_[0, 0]), float(lr.intercept_[0])
        return self

    def predict_proba(self, X: Any) -> np.ndarray:
        self._check_fitted()
        return np.asarray(expit(self.intercept_ + self.coef_ * (mean_entropy(X) - self.mean_) / self.scale_))

    def _get_state(self) -> dict[str, Any]:
        return {"mean": self.mean_, "scale": self.scale_, "coef": self.coef_, "intercept": self.intercept_}

    def _set_state(self, state: Mapping[str, Any]) -> None:
        self.mean_, self.coef_ = json_float(state["mean"], "state.mean"), json_float(state["coef"], "state.coef")
        self.scale_ = json_float(state["scale"], "state.scale", 0.0, open_lo=True)
        self.intercept_ = json_float(state["intercept"], "state.intercept")


class ToyBackend:
    """A backend from outside the library: a fixed, prompt-seeded trace per prompt (no model), answers from a word
    list; it declares no capability but batching."""

    backend_name: ClassVar[str] = "toy"
    WORDS = ("Paris", "seven", "the river", "1942", "blue")

    def __init__(self, model_id: str, batch_size: int = 4) -> None:
        self.model_id, self.batch_size, self.chat = model_id, batch_size, False
        self.vocab_size, self.context_length = 100, None
        self.calls = 0

    def generate(self, prompts: Sequence[Any], max_new_tokens: int = 32, **options: Any) -> list[Trace]:
        self.calls += 1
        ids = options.get("ids") or [str(i) for i in range(len(prompts))]
        out = []
        for p, i in zip(prompts, ids, strict=True):
            seed = int.from_bytes(hashlib.sha256(str(p).encode()).digest()[:4], "little")
            rng = np.random.default_rng(seed)
            text = self.WORDS[seed % len(self.WORDS)]
            T = min(len(text.split()) + 1, max_new_tokens)
            s, h = rng.gamma(1.0, 0.5, T), rng.gamma(1.0, 1.0, T)
            out.append(Trace(text=text, token_ids=np.arange(T), surprisal=s, entropy=h, id=i, model_id=self.model_id))
        return out
