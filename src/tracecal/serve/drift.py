"""Drift alarm: the Page-Hinkley detector (`tracecal.stats.drift.PageHinkley`) on the stream of answers.

Each finished, non-empty answer contributes one statistic x (``mean_entropy``: the mean H_t of the answer in
nats, the default; ``c_trace``: its c_TRACE). The detector standardises x on its first ``min_samples``
answers (the reference traffic) and alarms when the Page-Hinkley statistic of the z-scores exceeds
``threshold`` (sd units), tolerating drifts of ``delta``; after an alarm it restarts on the new traffic.
An alarm raises the ``alarm`` flag of ``GET /health`` (it stays raised; ``alarms`` counts them) and the
``tracecal_drift_alarms_total`` counter of ``GET /metrics``.
"""

from __future__ import annotations

import math
import threading
from dataclasses import asdict
from typing import Any

import numpy as np

from tracecal._validation import Options, check_param
from tracecal.serve.config import DRIFT_STATISTICS, ServeConfig
from tracecal.stats.drift import PageHinkley, PageHinkleySettings

__all__ = ["DriftMonitor"]


class DriftMonitor:
    """Thread-safe Page-Hinkley drift alarm over one per-answer statistic (see the module docstring).

    ``settings``: the detector's (default: `ServeConfig`'s ``drift_*`` defaults, ``ServeConfig().page_hinkley()``).
    """

    def __init__(self, statistic: str = "mean_entropy", settings: PageHinkleySettings | None = None) -> None:
        self.statistic = check_param("statistic", statistic, Options(*DRIFT_STATISTICS))
        settings = settings or ServeConfig().page_hinkley()
        self.detector = PageHinkley(**asdict(settings))
        self._lock = threading.Lock()
        self.answers = 0
        self.alarm_answers: list[int] = []

    @staticmethod
    def value(statistic: str, entropy: np.ndarray, c_trace: float | None) -> float:
        """The statistic of one answer (NaN for an empty answer: the detector skips it)."""
        if statistic == "c_trace":
            return float("nan") if c_trace is None else float(c_trace)
        return float(np.mean(entropy)) if len(entropy) else float("nan")

    def observe(self, entropy: np.ndarray, c_trace: float | None) -> bool:
        """Feed one finished answer; True when it raised an alarm."""
        x = self.value(self.statistic, entropy, c_trace)
        if not math.isfinite(x):
            return False
        with self._lock:
            self.answers += 1
            alarm = self.detector.update(x)
            if alarm:
                self.alarm_answers.append(self.answers)
            return alarm

    def state(self) -> dict[str, Any]:
        """For /health: the flag, the alarm count, the answers seen, the 1-based answers that alarmed, the settings."""
        with self._lock:
            d = self.detector
            return {
                "alarm": bool(self.alarm_answers),
                "alarms": len(self.alarm_answers),
                "answers": self.answers,
                "alarm_at_answers": list(self.alarm_answers[-20:]),
                "statistic": self.statistic,
                "detector": {
                    "kind": "page_hinkley",
                    "delta": d.delta,
                    "threshold": d.threshold,
                    "min_samples": d.min_samples,
                    "direction": d.direction,
                },
            }
