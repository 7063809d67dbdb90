"""SECL (METHOD §6): detector, gate, losses, LoRA update/reset/save/load, the stream run and the CLI.

Pure unit tests first (no model); then tests on the session's real default model (`model` fixture) over a
tiny stream (TriviaQA + ARC-Easy, 4 questions each) whose frozen pass is computed once per module.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tracecal.secl import (
    AlwaysGate,
    CostMeter,
    DetectorGate,
    NeverGate,
    PageHinkley,
    SECLAdapter,
    SECLConfig,
    build_stream,
    directional_loss,
    expected_confidence,
    false_alarm_rate,
    frozen_pass,
    make_gate,
    mse_loss,
    run_secl,
    target_bins,
)
from tracecal.secl.cli import parse_overrides

# ------------------------------------------------------------------------------------ detector


def _first_alarm_after(det: PageHinkley, xs: np.ndarray, t0: int) -> int | None:
    hits = [i for i, x in enumerate(xs) if det.update(float(x))]
    post = [i for i in hits if i >= t0]
    return post[0] - t0 if post else None


def test_page_hinkley_fires_on_mean_shift() -> None:
    rng = np.random.default_rng(0)
    delays = []
    for _ in range(100):
        xs = np.r_[rng.normal(0.0, 1.0, 150), rng.normal(1.0, 1.0, 150)]  # +1 sd shift at t = 150
        delays.append(_first_alarm_after(PageHinkley(), xs, 150))
    detected = [d for d in delays if d is not None and d <= 32]
    assert len(detected) >= 95  # within one burst length in ≥ 95% of streams (measured: 99%)
    assert np.median(detected) <= 16
    # a downward shift of entropy (e.g. TriviaQA → SVAMP) is caught by the two-sided test
    xs = np.r_[rng.normal(2.0, 0.5, 100), rng.normal(1.0, 0.5, 100)]
    det = PageHinkley()
    d = _first_alarm_after(det, xs, 100)
    assert d is not None and d <= 16 and det.alarm_directions[-1] == "down"


def test_page_hinkley_quiet_on_stationary_stream() -> None:
    # false alarms per 1000 observations, 100 streams × 600 (the length of the 4 × 150 SECL stream)
    fa_normal = false_alarm_rate(n_streams=100, length=600, seed=1)
    fa_skewed = false_alarm_rate(n_streams=100, length=600, seed=2, dist="gamma")
    assert fa_normal < 2.0, fa_normal  # measured ≈ 1 per 1000: ≈ 0.6 spurious bursts per 600-question stream
    assert fa_skewed < 2.0, fa_skewed
    # raising λ trades delay for fewer alarms
    assert false_alarm_rate(n_streams=100, length=600, seed=1, threshold=15.0) <= fa_normal


def test_page_hinkley_min_samples_direction_and_nan() -> None:
    det = PageHinkley(min_samples=20)
    xs = np.r_[np.zeros(4), np.full(15, 50.0)]
    assert not any(det.update(x) for x in xs)  # nothing before min_samples observations
    up = PageHinkley(direction="up")
    rng = np.random.default_rng(3)
    xs = np.r_[rng.normal(0, 1, 60), rng.normal(-3, 1, 60)]
    assert not any(up.update(x) for x in xs)  # a decrease is ignored by the one-sided test
    assert not PageHinkley().update(float("nan"))
    with pytest.raises(ValueError):
        PageHinkley(direction="sideways")


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


# ------------------------------------------------------------------------------------ losses, config, cost


def test_losses_move_confidence_toward_tau() -> None:
    t = target_bins(torch.tensor([0.05, 0.5, 0.95]), 10, 0.1)
    assert torch.allclose(t.sum(-1), torch.ones(3, dtype=t.dtype))
    assert t.argmax(-1).tolist() == [0, 4, 9] or t.argmax(-1).tolist() == [0, 5, 9]
    for loss_name in ("directional", "mse"):
        logits = torch.zeros(1, 101)
        logits[0, 80:] = 4.0  # confident: v ≈ 0.9
        logits.requires_grad_(True)
        opt = torch.optim.SGD([logits], lr=5.0)
        v0 = float(expected_confidence(torch.softmax(logits.detach(), -1)))
        for _ in range(20):
            dist = torch.softmax(logits, -1)
            tau = torch.tensor([0.2])
            loss = directional_loss(dist, tau) if loss_name == "directional" else mse_loss(dist, tau)
            opt.zero_grad()
            loss.backward()
            opt.step()
        v1 = float(expected_confidence(torch.softmax(logits.detach(), -1)))
        assert v1 < v0 - 0.02, (loss_name, v0, v1)  # both losses lower a too-high confidence


def test_config_validation_and_overrides() -> None:
    cfg = SECLConfig(lora_targets="q_proj, k_proj")  # type: ignore[arg-type]
    assert cfg.lora_targets == ("q_proj", "k_proj")
    assert SECLConfig.from_dict(json.loads(cfg.to_json())) == cfg
    for bad in ({"gate": "sometimes"}, {"loss": "l1"}, {"lr": 0.0}, {"burst_size": 0}, {"scope": "x"}):
        with pytest.raises(ValueError):
            SECLConfig(**bad)  # type: ignore[arg-type]
    o = parse_overrides(["ph_lambda=8", "start_burst=false", "lora_targets=q_proj,o_proj", "burst_size=4"])
    assert o == {"ph_lambda": 8.0, "start_burst": False, "lora_targets": ("q_proj", "o_proj"), "burst_size": 4}
    with pytest.raises(ValueError):
        parse_overrides(["nope=1"])


def test_cost_meter() -> None:
    c = CostMeter()
    c.add("tau", 100, passes=2)
    c.add("train", 0, backward_tokens=10)
    assert c.cost("tau") == 100 and c.cost("train") == 20 and c.cost() == 120
    assert CostMeter.from_dict(c.to_dict()).to_dict() == c.to_dict()


# ------------------------------------------------------------------------------------ on the real model


@pytest.fixture(scope="module")
def stream():  # type: ignore[no-untyped-def]
    return build_stream("triviaqa,arc_easy", 4)


@pytest.fixture(scope="module")
def frozen(model, stream):  # type: ignore[no-untyped-def]
    return frozen_pass(model, stream, batch_size=8)


ALWAYS = SECLConfig(gate="always", seed=0)


@pytest.fixture(scope="module")
def always_run(model, stream, frozen):  # type: ignore[no-untyped-def]
    return run_secl(model, stream, ALWAYS, frozen=frozen)


def _vprompts(model, stream, frozen):  # type: ignore[no-untyped-def]
    from tracecal.secl.stream import _vprompts as vp

    return vp(model, stream, frozen.answers)


def _base_dist(model, prompts):  # type: ignore[no-untyped-def]
    from tracecal.selfeval import number_distribution

    return number_distribution(model, prompts)[0]


def test_update_only_when_gap_exceeds_one_bin(model, stream, frozen, always_run) -> None:  # type: ignore[no-untyped-def]
    r = always_run.records
    gap = np.abs(r["v_before"] - r["tau_used"])
    assert r["gate_open"].all()
    np.testing.assert_array_equal(r["updated"], gap > 0.1)  # every decision, both ways
    assert r["updated"].any()
    # directly: a target within one bin never moves the adapter; a far target does, by at most max_step
    p = _vprompts(model, stream, frozen)[0]
    with SECLAdapter(model, SECLConfig(seed=0)) as ad:
        v = ad.confidence([p])[0][0]
        for tau in (v + 0.09, v - 0.09):
            info = ad.update(p, float(tau))
            assert not info.updated and ad.pristine and ad.delta_norm() == 0.0
        info = ad.update(p, max(0.0, v - 0.4))
        assert info.updated and not ad.pristine and ad.delta_norm() > 0
        assert info.v_after < info.v_before  # moved toward τ
        assert abs(info.v_after - info.v_before) <= ad.cfg.max_step * 1.05 + 1e-9  # bounded step


def test_reset_restores_base_weights_exactly(model, stream, frozen) -> None:  # type: ignore[no-untyped-def]
    prompts = _vprompts(model, stream, frozen)[:3]
    state0 = {k: v.clone() for k, v in model.model.state_dict().items()}
    base = _base_dist(model, prompts)
    with SECLAdapter(model, SECLConfig(seed=0)) as ad:
        for p in prompts[:2]:
            ad.update(p, 0.0, force=True)
        assert not torch.equal(_base_dist(model, prompts), base)
        ad.reset()
        assert ad.pristine and ad.delta_norm() == 0.0
        assert torch.equal(_base_dist(model, prompts), base)  # bit for bit
    # closing removes the LoRA layers: the same modules and weights as before
    state1 = model.model.state_dict()
    assert state1.keys() == state0.keys() and all(torch.equal(state0[k], state1[k]) for k in state0)
    assert not getattr(model.model, "peft_config", None)
    # the reset flag in a run: every question starts from the base model
    res = run_secl(model, stream, dataclasses.replace(ALWAYS, accumulate=False), frozen=frozen)
    np.testing.assert_allclose(res.records["v_before"], frozen.v, atol=2e-5)  # batched vs single read


def test_fixed_seed_reproduces_confidences(model, stream, frozen, always_run) -> None:  # type: ignore[no-untyped-def]
    again = run_secl(model, stream, ALWAYS, frozen=frozen)
    np.testing.assert_array_equal(again.v_secl, always_run.v_secl)
    np.testing.assert_array_equal(again.records["updated"], always_run.records["updated"])
    assert not np.array_equal(always_run.v_secl, always_run.v_frozen)  # SECL did change something


def test_labels_are_never_used_for_training(model, stream, always_run) -> None:  # type: ignore[no-untyped-def]
    """Golds shuffled within each domain and every label flipped: SECL's confidences are unchanged."""
    from tracecal.tasks.labels import Labeller

    shuffled = copy.deepcopy(stream)
    for dom in {it.domain for it in shuffled}:
        idx = [i for i, it in enumerate(shuffled) if it.domain == dom]
        golds = [shuffled[i].example.golds for i in idx]
        for k, i in enumerate(idx):  # a rotation: every example gets another one's golds
            shuffled[i].example.golds = golds[(k + 1) % len(idx)]
    for it in shuffled:
        orig = it.task.labeller
        flipped = Labeller(f"not_{orig.name}", "flipped", lambda ex, a, f=orig.fn: 1 - int(f(ex, a)))
        it.task = it.task.with_labeller(flipped)
    fr = frozen_pass(model, shuffled, batch_size=8)  # the frozen pass recomputed on the altered stream
    res = run_secl(model, shuffled, ALWAYS, frozen=fr)
    assert not np.array_equal(res.y_frozen, always_run.y_frozen)  # the labels did change …
    np.testing.assert_array_equal(res.tau, always_run.tau)  # … τ, frozen v and SECL v did not
    np.testing.assert_array_equal(res.v_frozen, always_run.v_frozen)
    np.testing.assert_array_equal(res.v_secl, always_run.v_secl)
    np.testing.assert_array_equal(res.records["updated"], always_run.records["updated"])


def test_adapter_save_and_reload_gives_same_confidences(model, stream, frozen, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    prompts = _vprompts(model, stream, frozen)
    with SECLAdapter(model, SECLConfig(seed=1, lora_layers=2)) as ad:
        for p in prompts[:2]:
            ad.update(p, 0.05, force=True)
        v_adapted, _ = ad.confidence(prompts)
        ad.save(tmp_path / "ad")
    assert (tmp_path / "ad" / "adapter_model.safetensors").is_file()
    assert (tmp_path / "ad" / "adapter_config.json").is_file()
    with SECLAdapter.load(model, tmp_path / "ad") as ad2:
        assert not ad2.pristine and ad2.cfg.lora_layers == 2
        v_loaded, _ = ad2.confidence(prompts)
    np.testing.assert_array_equal(v_loaded, v_adapted)
    assert not np.allclose(v_adapted, frozen.v, atol=1e-3)


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
    assert len(always_run.to_frame()) == 8


def test_frozen_pass_cache_and_sub_stream(model, stream, frozen, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from tracecal.secl import FrozenPass

    loaded = FrozenPass.load(frozen.save(tmp_path / "f.json"))
    np.testing.assert_array_equal(loaded.v, frozen.v)
    np.testing.assert_array_equal(loaded.tau, frozen.tau)
    assert loaded.answers == frozen.answers and all(
        np.array_equal(a, b) for a, b in zip(loaded.entropy, frozen.entropy, strict=True)
    )
    sub = [stream[0], stream[1], stream[4]]
    part = loaded.select(sub)
    part.check(sub, model.model_id)
    np.testing.assert_array_equal(part.tau, frozen.tau[[0, 1, 4]])
    assert part.cost.cost("tau") == int(frozen.tau_tokens[[0, 1, 4]].sum())
    with pytest.raises(ValueError):
        part.select(stream)


def test_cli_registered_in_a_typer_app(model, monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import typer
    from typer.testing import CliRunner

    import tracecal
    from tracecal.secl.cli import secl_command

    monkeypatch.setattr(tracecal, "load_model", lambda *a, **k: model)
    app = typer.Typer()
    app.command("secl")(secl_command)
    app.command("noop")(lambda: None)  # two commands, so `secl` is addressed by name as in the main CLI
    runner = CliRunner()
    out, ad, cache = tmp_path / "r.json", tmp_path / "adapter", tmp_path / "frozen.json"
    args = ["secl", "--stream", "triviaqa,arc_easy", "--per-domain", "2", "--cache", str(cache)]
    r = runner.invoke(app, [*args, "--gate", "always", "--out", str(out), "--save-adapter", str(ad)])
    assert r.exit_code == 0, r.output
    assert "SECL v" in r.output and "τ (NormPTrue)" in r.output and "overall" in r.output
    assert json.loads(out.read_text())["summary"]["n"] == 4
    assert (ad / "adapter_model.safetensors").is_file() and cache.is_file()
    r = runner.invoke(app, [*args, "--gate", "never", "--reset", "--loss", "mse", "--set", "ph_lambda=8"])
    assert r.exit_code == 0, r.output
    assert "reusing the frozen pass" in r.output
    r = runner.invoke(app, [*args, "--gate", "sometimes"])
    assert r.exit_code == 2
