"""The numbers behind the report's figures, computed once and drawn by `tracecal.report.svg`.

All figures use the seed-0 evaluation split stored in the run's predictions table: reliability diagrams and
histograms the calibrated probabilities (``prob:``), risk–coverage curves the raw scores (``raw:``),
as the metrics do (`tracecal.stats.metrics.reliability_bins`, `tracecal.stats.metrics.risk_coverage_curve`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from tracecal.stats.metrics import ReliabilityBins, reliability_bins, risk_coverage_curve

if TYPE_CHECKING:
    from tracecal.report.data import RunData

__all__ = ["Curve", "Hist", "Reliability", "TaskPlots", "task_plots", "HIST_BINS", "MAX_CURVE_POINTS"]

HIST_BINS = 20
MAX_CURVE_POINTS = 400


@dataclass
class Reliability:
    """One reliability diagram: ``bins`` is None when the split has no answers for the estimator."""

    estimator: str
    bins: ReliabilityBins | None

    @property
    def ece(self) -> float:
        return self.bins.ece() if self.bins is not None else float("nan")

    @property
    def n(self) -> int:
        return self.bins.n if self.bins is not None else 0


@dataclass
class Hist:
    """Confidence histogram of correct and incorrect answers on ``edges`` (``HIST_BINS`` equal bins)."""

    estimator: str
    edges: np.ndarray
    correct: np.ndarray
    wrong: np.ndarray


@dataclass
class Curve:
    """A risk–coverage curve, downsampled to at most ``MAX_CURVE_POINTS`` points; ``aurc`` from all points."""

    label: str
    coverage: np.ndarray
    risk: np.ndarray
    aurc: float
    kind: str = "estimator"  # "estimator" | "oracle" | "random"


@dataclass
class TaskPlots:
    """Everything drawn for one task."""

    task: str
    n_bins: int
    reliability: list[Reliability] = field(default_factory=list)
    hists: list[Hist] = field(default_factory=list)
    curves: list[Curve] = field(default_factory=list)
    references: list[Curve] = field(default_factory=list)


def _downsample(n: int, k: int = MAX_CURVE_POINTS) -> np.ndarray:
    if n <= k:
        return np.arange(n)
    return np.unique(np.linspace(0, n - 1, k).round().astype(np.int64))


def task_plots(run: RunData, task: str, estimators: list[str], curve_estimators: list[str], n_bins: int) -> TaskPlots:
    """Reliability bins and histograms for ``estimators``, risk–coverage curves for ``curve_estimators``."""
    tp = TaskPlots(task, n_bins)
    edges = np.linspace(0.0, 1.0, HIST_BINS + 1)
    for est in estimators:
        idx = run.eval_mask(task, est)
        y = run.correct[idx]
        p = np.clip(run.prob[est][idx], 0.0, 1.0)
        tp.reliability.append(Reliability(est, reliability_bins(y, p, n_bins) if idx.size else None))
        tp.hists.append(
            Hist(est, edges, np.histogram(p[y == 1], bins=edges)[0], np.histogram(p[y == 0], bins=edges)[0])
        )
    y_ref = np.zeros(0, dtype=np.int64)
    for est in curve_estimators:
        idx = run.eval_mask(task, est)
        if idx.size == 0:
            continue
        y = run.correct[idx]
        cov, risk = risk_coverage_curve(y, run.raw[est][idx])
        keep = _downsample(cov.size)
        tp.curves.append(Curve(est, cov[keep], risk[keep], float(np.mean(risk))))
        if idx.size > y_ref.size:
            y_ref = y
    if y_ref.size:
        n = y_ref.size
        k = np.arange(1, n + 1, dtype=np.float64)
        oracle = np.maximum(0.0, k - float(y_ref.sum())) / k
        keep = _downsample(n)
        err = 1.0 - float(y_ref.mean())
        tp.references = [
            Curve("oracle", k[keep] / n, oracle[keep], float(np.mean(oracle)), "oracle"),
            Curve(f"random (error rate {err:.3f})", np.array([0.0, 1.0]), np.array([err, err]), err, "random"),
        ]
    return tp
