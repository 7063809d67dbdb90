"""Change detection on a stream of per-answer statistics: the Page-Hinkley test (docs/method.md §6 "Gate"), used
by SECL's adaptation gate (`tracecal.secl.gate`) and the gateway's drift alarm (`tracecal.serve.drift`).

Page-Hinkley test (two-sided by default) on a per-question statistic x_t (default: the answer's mean token
entropy). After a (re)start, the first ``min_samples`` observations give a reference mean μ and sd σ; with
``standardize`` the test runs on z_t = clip((x_t − μ)/σ, ±clip) so that δ and λ are in sd units. With
z̄_t the running mean of z since the (re)start:

    increase:  m_t = Σ_{i≤t} (z_i − z̄_i − δ),   alarm when m_t − min_{i≤t} m_i > λ
    decrease:  m'_t = Σ_{i≤t} (z_i − z̄_i + δ),  alarm when max_{i≤t} m'_i − m'_t > λ

No alarm fires before ``min_samples`` observations; after an alarm the test restarts (new reference).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from tracecal._validation import Constraint, Interval, Options, check_params

__all__ = [
    "DIRECTIONS",
    "PAGE_HINKLEY_DEFAULTS",
    "PageHinkleySettings",
    "page_hinkley_constraints",
    "PageHinkley",
    "false_alarm_rate",
]

DIRECTIONS = ("both", "up", "down")
"""Which changes a Page-Hinkley detector alarms on: both, increases only, decreases only."""


@dataclass
class PageHinkleySettings:
    """The settings of a Page-Hinkley detector, declared (defaults and constraints) in this one place.

    SECL's gate holds them as `SECLConfig`'s ``ph_*`` fields and the gateway's drift alarm as `ServeConfig`'s
    ``drift_*`` fields; each config takes its defaults from `PAGE_HINKLEY_DEFAULTS`, its constraints from
    `page_hinkley_constraints` and builds a `PageHinkley` from ``page_hinkley()``.

    Args:
        delta: tolerated drift δ ≥ 0 (sd units when ``standardize``).
        threshold: alarm threshold λ > 0 (sd units when ``standardize``).
        min_samples: observations after a restart before an alarm may fire (and the reference window), ≥ 1.
        direction: ``"both"``, ``"up"`` (increases only) or ``"down"``.
        standardize: run on z-scores of the reference window (scale-free δ, λ).
    """

    delta: float = 0.25
    threshold: float = 10.0
    min_samples: int = 20
    direction: str = "both"
    standardize: bool = True

    constraints: ClassVar[dict[str, Constraint]] = {
        "delta": Interval(float, 0, None),
        "threshold": Interval(float, 0, None, closed="neither"),
        "min_samples": Interval(int, 1, None),
        "direction": Options(*DIRECTIONS),
    }

    def __post_init__(self) -> None:
        check_params(vars(self), self.constraints)


PAGE_HINKLEY_DEFAULTS = PageHinkleySettings()
"""The defaults the configs start from (SECL's λ = 10; the gateway chooses its own λ = 8)."""


def page_hinkley_constraints(**names: str) -> dict[str, Constraint]:
    """`PageHinkleySettings.constraints` under the names a config gives the settings (``delta="ph_delta"``, …:
    one name for each constrained setting), so that a bad value is refused under the name the user gave."""
    return {names[key]: constraint for key, constraint in PageHinkleySettings.constraints.items()}


@dataclass
class PageHinkley(PageHinkleySettings):
    """Page-Hinkley change detector (see the module docstring for the statistic).

    Args:
        delta, threshold, min_samples, direction, standardize: see `PageHinkleySettings`.
        clip: clip |z| at this value (robustness to heavy tails; 0 = off).
    """

    clip: float = 3.0
    n: int = field(default=0, init=False)
    n_seen: int = field(default=0, init=False)
    alarms: list[int] = field(default_factory=list, init=False)
    alarm_directions: list[str] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.reset()

    def reset(self) -> None:
        """Restart the test (the next ``min_samples`` observations form the new reference)."""
        self.n = 0
        self._buf: list[float] = []
        self._mu, self._sd = 0.0, 1.0
        self._mean = 0.0
        self._k = 0  # observations fed to the PH sums
        self._m_up = self._min_up = 0.0
        self._m_dn = self._max_dn = 0.0
        self.last_stat = 0.0

    def _z(self, x: float) -> float:
        if not self.standardize:
            return x
        z = (x - self._mu) / self._sd
        return float(np.clip(z, -self.clip, self.clip)) if self.clip > 0 else z

    def _feed(self, z: float) -> str | None:
        self._k += 1
        self._mean += (z - self._mean) / self._k
        self._m_up += z - self._mean - self.delta
        self._min_up = min(self._min_up, self._m_up)
        self._m_dn += z - self._mean + self.delta
        self._max_dn = max(self._max_dn, self._m_dn)
        up, dn = self._m_up - self._min_up, self._max_dn - self._m_dn
        self.last_stat = max(up if self.direction != "down" else 0.0, dn if self.direction != "up" else 0.0)
        if self.n < self.min_samples:
            return None
        if self.direction != "down" and up > self.threshold:
            return "up"
        if self.direction != "up" and dn > self.threshold:
            return "down"
        return None

    def update(self, x: float) -> bool:
        """Observe x; True when a change is detected (the detector then restarts)."""
        x = float(x)
        if not math.isfinite(x):
            return False  # an empty answer has no statistic: skip it
        self.n += 1
        self.n_seen += 1
        hit: str | None = None
        if self.standardize and self.n <= self.min_samples:
            self._buf.append(x)
            if self.n == self.min_samples:
                arr = np.asarray(self._buf)
                self._mu = float(arr.mean())
                self._sd = float(max(arr.std(ddof=1) if len(arr) > 1 else 0.0, 1e-6))
                for b in self._buf:
                    hit = self._feed(self._z(b))
                    if hit is not None:
                        break
        elif not self.standardize or self.n > self.min_samples:
            hit = self._feed(self._z(x))
        if hit is not None:
            self.alarms.append(self.n_seen - 1)
            self.alarm_directions.append(hit)
            self.reset()
            return True
        return False


def false_alarm_rate(
    detector_factory: type[PageHinkley] | None = None,
    n_streams: int = 200,
    length: int = 600,
    seed: int = 0,
    dist: str = "normal",
    **kwargs: float | int | str | bool,
) -> float:
    """Alarms per 1000 observations on stationary i.i.d. streams (``normal`` or skewed ``gamma``)."""
    rng = np.random.default_rng(seed)
    factory = detector_factory or PageHinkley
    total = 0
    for _ in range(n_streams):
        det = factory(**kwargs)  # type: ignore[arg-type]
        xs = rng.normal(size=length) if dist == "normal" else rng.gamma(2.0, 1.0, size=length)
        total += sum(det.update(float(x)) for x in xs)
    return 1000.0 * total / (n_streams * length)
