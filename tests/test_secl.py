"""SECL (METHOD §6): detector, gate, losses, LoRA update/reset/save/load, the stream run and the CLI.

Pure unit tests first (no model); then the plumbing on the session's random-weight ``tiny_model`` over a small
stream (TriviaQA + ARC-Easy, 4 questions each) whose frozen pass is computed once per module — among them the
run checked against a one-question-at-a-time implementation of SECL's definition — and one slow test on the
real default model (`model`), where the point is that a step moves a real model's verbalised confidence.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tracecal.cli.secl import parse_overrides
from tracecal.secl import (
    AlwaysGate,
    CostMeter,
    DetectorGate,
    FrozenPass,
    GateStep,
    NeverGate,
    PageHinkley,
    SECLAdapter,
    SECLConfig,
    SECLRun,
    answer_statistic,
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
from tracecal.secl.stream import verbal_prompts

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


# ------------------------------------------------------------------------------------ runs on the tiny model


@pytest.fixture(scope="module")
def stream():  # type: ignore[no-untyped-def]
    return build_stream("triviaqa,arc_easy", 4)


@pytest.fixture(scope="module")
def frozen(tiny_model, stream):  # type: ignore[no-untyped-def]
    return frozen_pass(tiny_model, stream, batch_size=8)


ALWAYS = SECLConfig(gate="always", seed=0)
# a detector that fires on the tiny stream: bursts of 2, closed gates in between, batches of 3
DETECTOR = SECLConfig(ph_min_samples=2, ph_lambda=0.5, burst_size=2, batch_size=3, seed=0)


@pytest.fixture(scope="module")
def always_run(tiny_model, stream, frozen):  # type: ignore[no-untyped-def]
    return run_secl(tiny_model, stream, ALWAYS, frozen=frozen)


def _base_dist(lm, prompts):  # type: ignore[no-untyped-def]
    from tracecal.passes.selfeval import number_distribution

    return number_distribution(lm, prompts)[0]


def _sequential(lm, stream, cfg, frozen):  # type: ignore[no-untyped-def]
    """SECL by its definition: one question at a time, every v read alone, nothing reused from the frozen pass."""
    gate = make_gate(cfg)
    prompts = verbal_prompts(lm, stream, frozen.answers)
    v, updated, gate_open = np.full(len(stream), np.nan), np.zeros(len(stream), bool), np.zeros(len(stream), bool)
    with SECLAdapter(lm, cfg) as ad:
        for i in range(len(stream)):
            step = gate.observe(answer_statistic(frozen.entropy[i], frozen.surprisal[i], cfg.statistic))
            gate_open[i] = step.open
            if not step.open:
                v[i] = ad.confidence([prompts[i]])[0][0]
                continue
            info = ad.update(prompts[i], float(frozen.tau[i]))
            gate.feedback(info.updated)
            v[i], updated[i] = info.v_after, info.updated
            if info.updated and not cfg.accumulate:
                ad.reset()
    return v, updated, gate_open


@pytest.mark.parametrize(
    "cfg", [DETECTOR, dataclasses.replace(ALWAYS, accumulate=False, batch_size=3)], ids=["detector", "always-reset"]
)
def test_run_equals_the_sequential_definition(tiny_model, stream, frozen, cfg) -> None:  # type: ignore[no-untyped-def]
    """Batched v reads, reuse of the frozen pass and the run's bookkeeping change nothing but float summation order."""
    res = run_secl(tiny_model, stream, cfg, frozen=frozen)
    v, updated, gate_open = _sequential(tiny_model, stream, cfg, frozen)
    r = res.records
    np.testing.assert_array_equal(r.gate_open, gate_open)
    np.testing.assert_array_equal(r.updated, updated)
    np.testing.assert_array_equal(r.v_secl[gate_open], v[gate_open])  # the same single reads and steps, bit for bit
    np.testing.assert_allclose(r.v_secl, v, atol=2e-5)  # closed gates: batched vs single reads
    if cfg is DETECTOR:
        assert gate_open.any() and not gate_open.all() and updated.any()  # both kinds of question, and training
        assert res.secl_cost.passes["v"] == int((~gate_open).sum())  # every closed-gate v read exactly once


def test_update_only_when_gap_exceeds_one_bin(tiny_model, stream, frozen, always_run) -> None:  # type: ignore[no-untyped-def]
    r = always_run.records
    assert r.gate_open.all()
    np.testing.assert_array_equal(r.updated, np.abs(r.v_before - r.tau_used) > 0.1)
    # τ steered around each question's frozen v (reset after every question, so v_before is the frozen v):
    # far targets train, targets within one bin do not (whether v moves toward τ is the real model's test)
    offset = np.array([0.3, 0.03, -0.3, -0.03, 0.3, 0.05, -0.3, 0.0])
    steered = dataclasses.replace(frozen, tau=np.clip(frozen.v + offset, 0.0, 1.0))
    r = run_secl(tiny_model, stream, dataclasses.replace(ALWAYS, accumulate=False), frozen=steered).records
    np.testing.assert_array_equal(r.updated, np.abs(offset) > 0.1)
    np.testing.assert_array_equal(r.updated, np.abs(r.v_before - r.tau_used) > 0.1)  # every decision, both ways
    np.testing.assert_array_equal(r.v_secl[~r.updated], r.v_before[~r.updated])
    assert (np.abs(r.v_secl - r.v_before) <= ALWAYS.max_step * 1.05 + 1e-9).all()  # bounded steps
    assert np.isnan(r.scale[~r.updated]).all() and np.isfinite(r.scale[r.updated]).all()
    # directly: a target within one bin never moves the adapter; a far target does
    p = verbal_prompts(tiny_model, stream, frozen.answers)[0]
    with SECLAdapter(tiny_model, SECLConfig(seed=0)) as ad:
        v = ad.confidence([p])[0][0]
        for tau in (v + 0.09, v - 0.09):
            info = ad.update(p, float(tau))
            assert not info.updated and ad.pristine and ad.delta_norm() == 0.0
        info = ad.update(p, max(0.0, v - 0.4))
        assert info.updated and not ad.pristine and ad.delta_norm() > 0 and info.v_after != info.v_before


def test_reset_restores_base_weights_exactly(tiny_model, stream, frozen) -> None:  # type: ignore[no-untyped-def]
    lm = tiny_model
    prompts = verbal_prompts(lm, stream, frozen.answers)[:3]
    state0 = {k: v.clone() for k, v in lm.model.state_dict().items()}
    base = _base_dist(lm, prompts)
    with SECLAdapter(lm, SECLConfig(seed=0)) as ad:
        for p in prompts[:2]:
            ad.update(p, 0.0, force=True)
        assert not torch.equal(_base_dist(lm, prompts), base)
        ad.reset()
        assert ad.pristine and ad.delta_norm() == 0.0
        assert torch.equal(_base_dist(lm, prompts), base)  # bit for bit
    # closing removes the LoRA layers: the same modules and weights as before
    state1 = lm.model.state_dict()
    assert state1.keys() == state0.keys() and all(torch.equal(state0[k], state1[k]) for k in state0)
    assert not getattr(lm.model, "peft_config", None)
    # the reset flag in a run: every question starts from the base model
    res = run_secl(lm, stream, dataclasses.replace(ALWAYS, accumulate=False), frozen=frozen)
    np.testing.assert_allclose(res.records.v_before, frozen.v, atol=2e-5)  # batched vs single read


class _ScriptedGate:
    """A gate that lets through given questions and never announces a burst (not one of the package's gates)."""

    def __init__(self, open_at: set[int]) -> None:
        self.open_at, self.t, self.feedbacks = open_at, -1, []

    @property
    def in_burst(self) -> bool:
        return False

    def observe(self, x: float) -> GateStep:
        self.t += 1
        return GateStep(self.t in self.open_at, self.t in self.open_at, 0 if self.t in self.open_at else -1)

    def feedback(self, updated: bool) -> None:
        self.feedbacks.append(updated)


def test_any_gate_drives_the_run_and_a_batch_is_cut_at_an_update(tiny_model, stream, frozen) -> None:  # type: ignore[no-untyped-def]
    """A duck-typed gate; with ``scope="all"`` an update in the middle of a batch discards its later answers.

    Batches of 4 over 8 questions, gate open at 2 and 5: [0..3] reuses the frozen answers (and, the model being
    the base model, the frozen v of 0 and 1) and is cut after the update on 2; [3..6] is generated by the
    adapted model and cut after the update on 5 (6 discarded); [6, 7] is generated.
    """
    cfg = SECLConfig(scope="all", batch_size=4, seed=0)
    gate = _ScriptedGate({2, 5})
    res = SECLRun(tiny_model, stream, cfg, frozen, gate=gate).run()
    r, c = res.records, res.secl_cost
    np.testing.assert_array_equal(np.flatnonzero(r.gate_open), [2, 5])
    np.testing.assert_array_equal(np.flatnonzero(r.updated), [2, 5])
    assert gate.feedbacks == [True, True]
    np.testing.assert_array_equal(r.v_secl[:2], frozen.v[:2])  # before the first update: the frozen v itself
    assert c.passes["generate_reused"] == 4 and c.passes["generate"] == 4 + 2
    assert c.passes["discarded_generate"] == 1
    assert c.passes["v"] == 6 and c.passes["v_grad"] == 2  # each question's v read once
    assert c.passes["tau_gated"] == 2  # τ of 2 from the frozen pass, of 5 read under the adapted model
    assert c.seconds.get("tau_gated", 0.0) > 0
    assert np.isfinite(r.v_secl).all() and len(res.answers_secl) == len(stream)
    assert res.y_secl.shape == res.y_frozen.shape


def test_run_driven_step_by_step_equals_run_secl(tiny_model, stream, frozen) -> None:  # type: ignore[no-untyped-def]
    whole = SECLRun(tiny_model, stream, DETECTOR, frozen, gate=_ScriptedGate({1, 4})).run()
    run = SECLRun(tiny_model, stream, DETECTOR, frozen, gate=_ScriptedGate({1, 4}))
    with pytest.raises(RuntimeError):
        run.observe(0)  # not open: no adapter attached
    with run:
        assert getattr(tiny_model.model, "peft_config", None)
        with pytest.raises(ValueError):
            run.observe(1)  # the stream is observed in order
        for i in range(len(stream)):
            if run.observe(i).open:
                run.update(i)
            elif i == 2:
                with pytest.raises(ValueError):
                    run.update(i)  # only a question the gate let through trains
        assert run.pending == [5, 6, 7]  # the closed-gate questions since the last update wait for one batched read
        with pytest.raises(RuntimeError):
            run.result()  # still open
        run.flush()
    assert not getattr(tiny_model.model, "peft_config", None)
    res = run.result()
    for k, arr in whole.records.as_dict().items():
        np.testing.assert_array_equal(getattr(res.records, k), arr, err_msg=k)
    with pytest.raises(RuntimeError), run:
        pass  # opened once
    unfinished = SECLRun(tiny_model, stream, DETECTOR, frozen)
    with unfinished:
        unfinished.observe(0)
    with pytest.raises(RuntimeError):
        unfinished.result()


def test_fixed_seed_reproduces_confidences(tiny_model, stream, frozen, always_run) -> None:  # type: ignore[no-untyped-def]
    again = run_secl(tiny_model, stream, ALWAYS, frozen=frozen)
    np.testing.assert_array_equal(again.v_secl, always_run.v_secl)
    np.testing.assert_array_equal(again.records.updated, always_run.records.updated)
    assert not np.array_equal(always_run.v_secl, always_run.v_frozen)  # SECL did change something


def test_labels_are_never_used_for_training(tiny_model, stream, always_run) -> None:  # type: ignore[no-untyped-def]
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
    fr = frozen_pass(tiny_model, shuffled, batch_size=8)  # the frozen pass recomputed on the altered stream
    res = run_secl(tiny_model, shuffled, ALWAYS, frozen=fr)
    assert not np.array_equal(res.y_frozen, always_run.y_frozen)  # the labels did change …
    np.testing.assert_array_equal(res.tau, always_run.tau)  # … τ, frozen v and SECL v did not
    np.testing.assert_array_equal(res.v_frozen, always_run.v_frozen)
    np.testing.assert_array_equal(res.v_secl, always_run.v_secl)
    np.testing.assert_array_equal(res.records.updated, always_run.records.updated)


def test_adapter_save_and_reload_gives_same_confidences(tiny_model, stream, frozen, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    prompts = verbal_prompts(tiny_model, stream, frozen.answers)
    with SECLAdapter(tiny_model, SECLConfig(seed=1, lora_layers=1)) as ad:
        assert ad.layers == [1]  # the top layer of two
        for p in prompts[:2]:
            ad.update(p, 0.05, force=True)
        v_adapted, _ = ad.confidence(prompts)
        ad.save(tmp_path / "ad")
    assert (tmp_path / "ad" / "adapter_model.safetensors").is_file()
    assert (tmp_path / "ad" / "adapter_config.json").is_file()
    with SECLAdapter.load(tiny_model, tmp_path / "ad") as ad2:
        assert not ad2.pristine and ad2.cfg.lora_layers == 1
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
    assert list(d["questions"][0])[6:] == list(always_run.records.as_dict())  # every record field, in order
    assert len(always_run.to_frame()) == 8


def test_frozen_pass_cache_and_sub_stream(tiny_model, stream, frozen, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from tracecal.tasks.prompts import self_eval_question

    loaded = FrozenPass.load(frozen.save(tmp_path / "f.json"))
    np.testing.assert_array_equal(loaded.v, frozen.v)
    np.testing.assert_array_equal(loaded.tau, frozen.tau)
    assert loaded.answers == frozen.answers and all(
        np.array_equal(a, b) for a, b in zip(loaded.entropy, frozen.entropy, strict=True)
    )
    sub = [stream[0], stream[1], stream[4]]
    part = loaded.select(sub)
    part.check(sub, tiny_model.model_id)
    np.testing.assert_array_equal(part.tau, frozen.tau[[0, 1, 4]])
    assert part.cost.cost("tau") == int(frozen.tau_tokens[[0, 1, 4]].sum())
    with pytest.raises(ValueError):
        part.select(stream)
    # the self-evaluation prompts show the question as the shared builder does (options for multiple choice)
    mc = stream[4]
    assert mc.example.choices and "A. " in self_eval_question(mc.example)
    assert tiny_model.tokenizer.decode(verbal_prompts(tiny_model, [mc], ["B"])[0]).count(mc.example.choices[0]) == 1


def test_cli_registered_in_a_typer_app(tiny_model, monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import typer
    from typer.testing import CliRunner

    import tracecal.backends.hf
    from tracecal.cli.secl import secl_command

    monkeypatch.setattr(tracecal.backends.hf, "load_model", lambda *a, **k: tiny_model)
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
    r = runner.invoke(
        app, [*args, "--gate", "never", "--reset", "--loss", "mse", "--set", "ph_lambda=8", "--set", "lr=0.01"]
    )
    assert r.exit_code == 0, r.output
    assert "reusing the frozen pass" in r.output
    r = runner.invoke(app, [*args, "--gate", "sometimes"])
    assert r.exit_code == 2


# ------------------------------------------------------------------------------------ on the real model


@pytest.mark.slow
def test_real_model_step_moves_verbalised_confidence_toward_tau(model, stream) -> None:  # type: ignore[no-untyped-def]
    """On SmolLM2 (not a random model): one bounded LoRA step moves v toward a far τ, each way, by ≤ max_step."""
    p = verbal_prompts(model, stream[:1], ["Paris"])[0]
    for direction in (-1, 1):
        with SECLAdapter(model, SECLConfig(seed=0)) as ad:
            v = float(ad.confidence([p])[0][0])
            tau = float(np.clip(v + 0.4 * direction, 0.0, 1.0))
            info = ad.update(p, tau)
            assert info.updated and np.sign(info.v_after - info.v_before) == direction, (v, tau, info)
            assert abs(info.v_after - info.v_before) <= ad.cfg.max_step * 1.05 + 1e-9
    assert not getattr(model.model, "peft_config", None)
