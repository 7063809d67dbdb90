"""SECL: test-time self-calibration of verbalised confidence (docs/method.md §6).

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

Modules: `stream` (the questions and what is read off each), `frozen` (the base model's pass), `run` (`SECLRun`,
the SECL pass as an object with explicit state: observe / update / flush), `result` (`SECLResult`, scoring),
`detector` (Page-Hinkley and the `Gate` protocol), `adapter` (LoRA step, reset, save/load), `cost`, `config`.

CLI: ``tracecal secl --stream triviaqa,svamp,arc_easy,truthfulqa --per-domain 150`` (`tracecal.cli.secl`).
"""

from tracecal.secl.adapter import SECLAdapter, UpdateInfo, directional_loss, expected_confidence, mse_loss, target_bins
from tracecal.secl.config import SECLConfig
from tracecal.secl.cost import CostMeter
from tracecal.secl.frozen import FrozenPass, frozen_pass
from tracecal.secl.gate import AlwaysGate, DetectorGate, Gate, GateStep, NeverGate, make_gate
from tracecal.secl.result import SECLRecord, SECLResult
from tracecal.secl.run import SECLRun, run_secl
from tracecal.secl.stream import StreamItem, answer_statistic, build_stream
from tracecal.stats.drift import PageHinkley, PageHinkleySettings, false_alarm_rate

__all__ = [
    "AlwaysGate",
    "CostMeter",
    "DetectorGate",
    "FrozenPass",
    "Gate",
    "GateStep",
    "NeverGate",
    "PageHinkley",
    "PageHinkleySettings",
    "SECLAdapter",
    "SECLConfig",
    "SECLRecord",
    "SECLResult",
    "SECLRun",
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
    "run_secl",
    "target_bins",
]
