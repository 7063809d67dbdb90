"""SECL: test-time self-calibration of verbalised confidence (METHOD §6).

A stream of questions (domain after domain); per question the model's answer (with its decoding trace), its
verbalised confidence v and the label-free target NormPTrue τ. A Page-Hinkley detector on the answers' mean
token entropy opens adaptation bursts on distribution shift; inside a burst, when |v − τ| exceeds one
confidence bin, one bounded LoRA step moves v toward τ. LoRA weights accumulate across the stream.

    from tracecal.secl import SECLConfig, build_stream, frozen_pass, run_secl
    items = build_stream("triviaqa,svamp,arc_easy,truthfulqa", per_domain=150)
    frozen = frozen_pass(lm, items)                 # baselines (a) frozen v, (b) τ; reusable across runs
    result = run_secl(lm, items, SECLConfig(), frozen=frozen, save_adapter="secl-adapter/")
    result.summary(); result.metrics(); result.to_json("secl.json")
    SECLAdapter.load(lm, "secl-adapter/")          # reattach the adapted confidence head

CLI: ``tracecal secl --stream triviaqa,svamp,arc_easy,truthfulqa --per-domain 150`` (`tracecal.secl.cli`).
"""

from tracecal.secl.adapter import SECLAdapter, UpdateInfo, directional_loss, expected_confidence, mse_loss, target_bins
from tracecal.secl.config import SECLConfig
from tracecal.secl.cost import CostMeter
from tracecal.secl.detector import AlwaysGate, DetectorGate, NeverGate, PageHinkley, false_alarm_rate, make_gate
from tracecal.secl.stream import (
    FrozenPass,
    SECLResult,
    StreamItem,
    answer_statistic,
    build_stream,
    frozen_pass,
    question_text,
    run_secl,
)

__all__ = [
    "AlwaysGate",
    "CostMeter",
    "DetectorGate",
    "FrozenPass",
    "NeverGate",
    "PageHinkley",
    "SECLAdapter",
    "SECLConfig",
    "SECLResult",
    "StreamItem",
    "UpdateInfo",
    "answer_statistic",
    "build_stream",
    "directional_loss",
    "expected_confidence",
    "false_alarm_rate",
    "frozen_pass",
    "make_gate",
    "mse_loss",
    "question_text",
    "run_secl",
    "target_bins",
]
