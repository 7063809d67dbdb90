"""Hidden-state probes as estimators: `HiddenProbe` (`tracecal.calibrators.probe`) fitted on the calibration split
over the hidden pass's summaries (`tracecal.passes.hidden`), alone and fused with the TRACE+ features.

* ``hidden_probe``: x = [hidden_mean, hidden_first] (2·k·d columns), PCA to ``n_components``, L2 logistic, C by CV;
* ``hidden_probe_trace_plus``: x = [hidden_mean, hidden_first, φ] with φ the 8 TRACE+ features (docs/method.md
  §3), which pass through unreduced (standardised only).

Both output probabilities fitted on the calibration split (self-calibrated, like TRACE+) and are opt-in
(`Estimator.opt_in`): their pass needs a backend with hidden states (HF) and costs a forward pass per answer over a
stored run; ``--estimators hidden`` (the pass's name) selects them.
"""

from __future__ import annotations

import warnings
from typing import ClassVar

import numpy as np

from tracecal._validation import Constraint
from tracecal.calibrators.probe import HiddenProbe
from tracecal.calibrators.traceplus import TracePlus
from tracecal.estimators.base import Estimator, Inputs, register

__all__ = ["HiddenProbeEstimator", "HiddenProbeTracePlus", "probe_features"]


def probe_features(inputs: Inputs, trace_plus: bool) -> np.ndarray:
    """The probe's feature matrix of the answers: their hidden summaries, then (``trace_plus``) TRACE+'s φ."""
    blocks = [inputs.stat("hidden_mean"), inputs.stat("hidden_first")]
    if trace_plus:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # zero-token answers: NaN features, imputed by the probe
            blocks.append(TracePlus().features(inputs.batch))
    return np.hstack(blocks)


@register
class HiddenProbeEstimator(Estimator):
    """A logistic probe on PCA components of the hidden-state summaries, fitted on the calibration split."""

    name = "hidden_probe"
    family = "hidden"
    stats = frozenset({"hidden_mean", "hidden_first"})
    description = "probe: L2 logistic on 64 PCs of the mean and first hidden states at 3 layers, C by 5-fold CV"
    self_calibrated = True
    needs_fit = True
    opt_in = True
    trace_plus: ClassVar[bool] = False
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "n_components": HiddenProbe._parameter_constraints["n_components"],
        "cv": HiddenProbe._parameter_constraints["cv"],
    }

    def __init__(self, n_components: int = 64, cv: int = 5) -> None:
        self.n_components, self.cv = n_components, cv

    def fit(self, inputs: Inputs, y: np.ndarray) -> HiddenProbeEstimator:
        passthrough = 8 if self.trace_plus else 0
        probe = HiddenProbe(self.n_components, passthrough, cv=self.cv, trace_plus=self.trace_plus)
        self.model_ = probe.fit(probe_features(inputs, self.trace_plus), y)
        return self

    def score(self, inputs: Inputs) -> np.ndarray:
        p = self.model_.predict_proba(probe_features(inputs, self.trace_plus))
        return np.where(inputs.batch.lengths == 0, np.nan, p)


@register
class HiddenProbeTracePlus(HiddenProbeEstimator):
    """The probe with TRACE+'s 8 features beside the hidden components."""

    name = "hidden_probe_trace_plus"
    description = "probe + TRACE+: L2 logistic on 64 hidden-state PCs and the 8 TRACE+ features, C by 5-fold CV"
    trace_plus = True
