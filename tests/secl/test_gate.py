"""`tracecal.secl.gate`: SECL's adaptation gate — bursts opened by a detector's alarms, patience, the ablation gates,
and the gate a `SECLConfig` names."""

from __future__ import annotations

from tracecal.secl import SECLConfig
from tracecal.secl.gate import AlwaysGate, DetectorGate, NeverGate, make_gate


class _Scripted:
    """A detector that alarms at given positions (to test the gate alone)."""

    def __init__(self, alarms: set[int]) -> None:
        self.alarms, self.t = alarms, -1

    def update(self, x: float) -> bool:
        self.t += 1
        return self.t in self.alarms

    def reset(self) -> None:
        pass


def test_gate_bursts_start_alarm_patience() -> None:
    g = DetectorGate(_Scripted({10}), burst_size=3, start_burst=True)  # type: ignore[arg-type]
    opened = [g.observe(0.0).open for _ in range(16)]
    assert opened == [True] * 3 + [False] * 7 + [True] * 3 + [False] * 3
    g = DetectorGate(_Scripted(set()), burst_size=5, start_burst=False)  # type: ignore[arg-type]
    assert not any(g.observe(0.0).open for _ in range(10))  # no shift, no training
    g = DetectorGate(_Scripted(set()), burst_size=10, patience=2)  # type: ignore[arg-type]
    seq = []
    for updated in (True, False, False, True, True):
        seq.append(g.observe(0.0).open)
        g.feedback(updated)
    assert seq == [True, True, True, False, False]  # closed after 2 quiet questions
    assert all(AlwaysGate().observe(1.0).open for _ in range(5))
    assert not any(NeverGate().observe(1.0).open for _ in range(5))
    assert isinstance(make_gate(SECLConfig(gate="never")), NeverGate)
    assert isinstance(make_gate(SECLConfig()), DetectorGate)


def test_gate_in_burst_tells_whether_the_next_question_is_let_through() -> None:
    assert AlwaysGate().in_burst and not NeverGate().in_burst
    g = DetectorGate(_Scripted({6}), burst_size=2, start_burst=True, patience=3)  # type: ignore[arg-type]
    assert not g.in_burst  # before the stream starts: the start burst is not open yet
    for t in range(10):
        step = g.observe(0.0)
        assert step.open == (t in (0, 1, 6, 7))
        assert g.in_burst == (t in (0, 6))  # the next question is inside the burst
    g = DetectorGate(_Scripted(set()), burst_size=5, patience=1)  # type: ignore[arg-type]
    g.observe(0.0)
    assert g.in_burst
    g.feedback(False)  # patience: a quiet question closes the burst
    assert not g.in_burst


def test_make_gate_builds_the_detector_of_the_config() -> None:
    gate = make_gate(SECLConfig(ph_lambda=7.0, ph_min_samples=5))
    assert isinstance(gate, DetectorGate) and (gate.detector.threshold, gate.detector.min_samples) == (7.0, 5)
