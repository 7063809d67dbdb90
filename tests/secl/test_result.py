"""`tracecal.secl.result`: scoring (per domain and overall), the summary and the JSON document."""

from __future__ import annotations

import json
from pathlib import Path


def test_result_scoring_and_json(always_run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    m = always_run.metrics()
    assert set(m) == {"triviaqa", "arc_easy", "overall"}
    assert set(m["overall"]) == {"frozen_v", "tau", "secl_v"}
    assert m["overall"]["secl_v"]["n"] == 8
    s = always_run.summary()
    assert 0 < s["trained_share"] <= 1 and s["gated_share"] == 1.0
    assert s["overhead_vs_tau_all"] > 0
    d = json.loads(always_run.to_json(tmp_path / "r.json"))
    assert len(d["questions"]) == 8 and d["config"]["gate"] == "always"
    assert list(d["questions"][0])[6:] == list(always_run.records.as_dict())  # every record field, in order
    assert len(always_run.to_frame()) == 8
