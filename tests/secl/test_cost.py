"""`tracecal.secl.cost`: the token-cost meter."""

from __future__ import annotations

from tracecal.secl import (
    CostMeter,
)


def test_cost_meter() -> None:
    c = CostMeter()
    c.add("tau", 100, passes=2)
    c.add("train", 0, backward_tokens=10)
    assert c.cost("tau") == 100 and c.cost("train") == 20 and c.cost() == 120
    assert CostMeter.from_dict(c.to_dict()).to_dict() == c.to_dict()
