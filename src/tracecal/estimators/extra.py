"""Estimators that read one value per answer from an extra inference (docs/method.md §4): P(True) and verbalised
confidence, computed by `tracecal.passes.selfeval`."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from tracecal.estimators.base import Estimator, Inputs, register

__all__ = ["ExtraInference", "PTrue", "Verbalized"]


class ExtraInference(Estimator):
    """Reads one per-answer value computed by the extra-inference pass (`tracecal.passes.selfeval`): the stat named
    ``field`` (its only stat, set from ``field``)."""

    family = "extra inference"
    field: ClassVar[str] = ""

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        cls.stats = frozenset({cls.field})

    def score(self, inputs: Inputs) -> np.ndarray:
        return np.asarray(inputs.stat(self.field), dtype=np.float64)


@register
class PTrue(ExtraInference):
    """P(True) = P(yes)/(P(yes)+P(no)) on the model's own answer (one extra forward pass)."""

    name, field = "p_true", "p_true"
    description = "P(True): P(yes)/(P(yes)+P(no)) asked about its own answer"


@register
class Verbalized(ExtraInference):
    """Verbalised confidence: probability-weighted mean of the 0–100 number the model would state."""

    name, field = "verbalized", "verbalized"
    description = "verbalised 0–100 confidence, expectation over the number tokens"
