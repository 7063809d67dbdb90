"""The adaptation gate of SECL (docs/method.md §6 "Gate"): which questions may train, from a change detector's alarms.

The gate turns alarms of a Page-Hinkley detector (`tracecal.stats.drift.PageHinkley`) into adaptation bursts: an
alarm (or the stream start, with ``start_burst``) opens a burst covering the next ``burst_size`` questions (that
question included); an alarm inside a burst restarts it. With ``patience`` > 0 a burst closes early after that many
consecutive questions that needed no update. `AlwaysGate` and `NeverGate` are the ablation gates (every question /
no question may train).
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field
from typing import ClassVar, Protocol

from tracecal.stats.drift import PageHinkley, PageHinkleySettings

__all__ = ["Gate", "GateConfig", "GateStep", "DetectorGate", "AlwaysGate", "NeverGate", "make_gate"]


@dataclass
class GateStep:
    """The gate's decision for one question."""

    open: bool
    alarm: bool
    burst: int  # id of the burst the question is in (−1 outside bursts)


class Gate(Protocol):
    """What the SECL loop needs from a gate (it never checks a gate's type).

    ``in_burst``: the next question will be let through whatever its statistic (inside a burst, or a gate
    that is always open) — the loop then answers it alone rather than in a batch, since the question before
    it may train. ``observe``: the decision for one question from its statistic. ``feedback``: whether the
    question just let through was trained on.
    """

    @property
    def in_burst(self) -> bool: ...

    def observe(self, x: float) -> GateStep: ...

    def feedback(self, updated: bool) -> None: ...


class _ConstantGate:
    """A gate whose decision never changes: open (every question may train) or closed (none does)."""

    name: ClassVar[str]
    _open: ClassVar[bool]

    @property
    def in_burst(self) -> bool:
        return self._open

    def observe(self, x: float) -> GateStep:
        return GateStep(self._open, False, 0 if self._open else -1)

    def feedback(self, updated: bool) -> None:
        pass


class AlwaysGate(_ConstantGate):
    """Every question may train (ablation ``gate=always``)."""

    name = "always"
    _open = True


class NeverGate(_ConstantGate):
    """No question trains (ablation ``gate=never``: SECL's confidence is the frozen model's)."""

    name = "never"
    _open = False


@dataclass
class DetectorGate:
    """Bursts of at most ``burst_size`` questions opened by a change detector's alarms."""

    detector: PageHinkley
    burst_size: int = 32
    start_burst: bool = True
    patience: int = 0
    name: str = "detector"
    remaining: int = field(default=0, init=False)
    n_bursts: int = field(default=0, init=False)
    _quiet: int = field(default=0, init=False)
    _started: bool = field(default=False, init=False)

    @property
    def in_burst(self) -> bool:
        """The next question is inside the current burst (an alarm on it would restart the burst, still open)."""
        return self.remaining > 0

    def observe(self, x: float) -> GateStep:
        alarm = self.detector.update(x)
        opened = alarm or (self.start_burst and not self._started)
        self._started = True
        if opened:
            self.remaining = self.burst_size
            self.n_bursts += 1
            self._quiet = 0
        if self.remaining > 0:
            self.remaining -= 1
            return GateStep(True, alarm, self.n_bursts - 1)
        return GateStep(False, alarm, -1)

    def feedback(self, updated: bool) -> None:
        """Tell the gate whether the question it let through was trained on (for ``patience``)."""
        if updated:
            self._quiet = 0
            return
        self._quiet += 1
        if self.patience and self._quiet >= self.patience:
            self.remaining = 0

    def copy(self) -> DetectorGate:
        return copy.deepcopy(self)


class GateConfig(Protocol):
    """What `make_gate` reads from a config (`tracecal.secl.config.SECLConfig` has it)."""

    gate: str
    burst_size: int
    start_burst: bool
    burst_patience: int

    def page_hinkley(self) -> PageHinkleySettings: ...


def make_gate(cfg: GateConfig) -> Gate:
    """The gate named by ``cfg.gate``: `AlwaysGate`, `NeverGate` or a `DetectorGate` on ``cfg.page_hinkley()``."""
    if cfg.gate == "always":
        return AlwaysGate()
    if cfg.gate == "never":
        return NeverGate()
    detector = PageHinkley(**asdict(cfg.page_hinkley()))
    return DetectorGate(detector, cfg.burst_size, cfg.start_burst, cfg.burst_patience)
