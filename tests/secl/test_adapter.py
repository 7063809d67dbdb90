"""`tracecal.secl.adapter`: the losses, the LoRA step, reset to the base weights, save/load; one slow test on the real
default model (`model`), where the point is that a step moves a real model's verbalised confidence."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.secl.helpers import ALWAYS, base_dist
from tracecal.secl import (
    SECLAdapter,
    SECLConfig,
    directional_loss,
    expected_confidence,
    mse_loss,
    run_secl,
    target_bins,
)
from tracecal.secl.stream import verbal_prompts


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


def test_mse_and_directional_loss_values_on_a_fixed_example() -> None:
    """A uniform number distribution over 0…100 (v = 0.5) and τ = 0.2: MSE = (0.5 − 0.2)²; the directional loss is
    the cross-entropy from the Gaussian target over the 10 bin centres to the bins' masses (10/101 each, the last
    bin 11/101: 100 goes there)."""
    dist = torch.full((1, 101), 1.0 / 101, dtype=torch.float64)
    tau = torch.tensor([0.2], dtype=torch.float64)
    assert float(mse_loss(dist, tau)) == pytest.approx(0.09)
    centres = (np.arange(10) + 0.5) / 10
    t = np.exp(-((centres - 0.2) ** 2) / (2 * 0.1**2))
    t /= t.sum()
    q = np.array([10 / 101] * 9 + [11 / 101])
    assert float(directional_loss(dist, tau, 10, 0.1)) == pytest.approx(float(-(t * np.log(q)).sum()))
    assert float(directional_loss(dist, tau)) == pytest.approx(2.3125, abs=1e-4)  # ≈ log 10: not the MSE's 0.09


@pytest.mark.parametrize("loss", ["directional", "mse"])
def test_the_update_trains_on_the_configured_loss(tiny_model, stream, frozen, loss) -> None:  # type: ignore[no-untyped-def]
    p = verbal_prompts(tiny_model, stream, frozen.answers)[0]
    dist = base_dist(tiny_model, [p]).double()
    tau = torch.tensor([0.05], dtype=torch.float64)
    want = mse_loss(dist, tau) if loss == "mse" else directional_loss(dist, tau)
    with SECLAdapter(tiny_model, SECLConfig(loss=loss, seed=0)) as ad:
        info = ad.update(p, 0.05, force=True)
    assert info.loss == pytest.approx(float(want), rel=1e-4)  # the loss of the step is the configured one


@pytest.mark.parametrize(("k", "layers"), [(1, [1]), (2, [0, 1]), (0, [0, 1]), (5, [0, 1])])
def test_top_k_layers_carry_the_lora_weights(tiny_model, k, layers) -> None:  # type: ignore[no-untyped-def]
    """``lora_layers=K``: LoRA on the top K decoder layers (0, or K ≥ the model's 2 layers: all of them)."""
    with SECLAdapter(tiny_model, SECLConfig(lora_layers=k, seed=0)) as ad:
        assert ad.layers == layers
        names = [n for n, p in ad.peft.named_parameters() if p.requires_grad]
        assert {int(n.split("layers.")[1].split(".")[0]) for n in names} == set(layers)
        assert len(names) == 2 * 2 * len(layers)  # A and B of q_proj and v_proj per layer


def test_reset_restores_base_weights_exactly(tiny_model, stream, frozen) -> None:  # type: ignore[no-untyped-def]
    lm = tiny_model
    prompts = verbal_prompts(lm, stream, frozen.answers)[:3]
    state0 = {k: v.clone() for k, v in lm.model.state_dict().items()}
    base0 = base_dist(lm, prompts)
    with SECLAdapter(lm, SECLConfig(seed=0)) as ad:
        # the pristine adapter is the base model bit for bit, though peft froze the base weights: the head's input
        # is made contiguous (`contiguous_head_input`), so torch.matmul folds the batch for frozen weights too
        base = base_dist(lm, prompts)
        assert torch.equal(base, base0)
        for p in prompts[:2]:
            ad.update(p, 0.0, force=True)
        assert not torch.equal(base_dist(lm, prompts), base)
        ad.reset()
        assert ad.pristine and ad.delta_norm() == 0.0
        assert torch.equal(base_dist(lm, prompts), base)  # bit for bit
    # closing removes the LoRA layers: the same modules and weights as before
    state1 = lm.model.state_dict()
    assert state1.keys() == state0.keys() and all(torch.equal(state0[k], state1[k]) for k in state0)
    assert not getattr(lm.model, "peft_config", None)
    # the reset flag in a run: every question starts from the base model
    res = run_secl(lm, stream, dataclasses.replace(ALWAYS, accumulate=False), frozen=frozen)
    np.testing.assert_allclose(res.records.v_before, frozen.v, atol=2e-5)  # batched vs single read


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


def test_secl_refuses_a_backend_without_gradients_before_any_work(tiny_model, stream, tokenizer) -> None:  # type: ignore[no-untyped-def]
    from tracecal.backends.base import BackendUnsupportedError
    from tracecal.backends.llamacpp import LlamaCppModel
    from tracecal.secl import SECLAdapter, run_secl
    from tracecal.secl.adapter import require_hf

    assert require_hf(tiny_model) is tiny_model
    lc = LlamaCppModel.load(n_threads=1, tokenizer=tokenizer)
    for call in (lambda: run_secl(lc, stream, ALWAYS), lambda: SECLAdapter(lc, ALWAYS)):
        with pytest.raises(BackendUnsupportedError, match=r"SECL runs on the HF backend only.*llama\.cpp \(the GGUF"):
            call()


def test_a_saved_adapter_is_replaced_whole_and_a_folder_of_other_files_never(
    tiny_model, stream, frozen, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """`SECLAdapter.save` writes through `tracecal.secl.folders.atomic_write_dir`: an earlier adapter is replaced,
    a folder of the user's files is refused and left byte-identical, and a full disk is an ``OSError`` naming the
    folder (safetensors' own error mapped to it) with the earlier adapter kept."""
    from tests.traces.disk import fill, small_filesystem
    from tracecal.errors import ValidationError

    def snapshot(folder: Path) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}

    out, mine = tmp_path / "ad", tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    with SECLAdapter(tiny_model, SECLConfig(seed=1, lora_layers=1)) as ad:
        ad.save(out)
        first = snapshot(out)
        assert {"adapter_model.safetensors", "adapter_config.json", "secl_config.json"} <= set(first)
        ad.update(verbal_prompts(tiny_model, stream, frozen.answers)[0], 0.05, force=True)  # the weights move
        ad.save(out)
        assert snapshot(out)["adapter_model.safetensors"] != first["adapter_model.safetensors"]
        with pytest.raises(ValidationError, match="mine is not empty and is not a saved SECL adapter"):
            ad.save(mine)
        assert snapshot(mine) == {"notes.txt": b"mine"}
        with small_filesystem(tmp_path) as mnt:
            ad.save(mnt / "ad")
            kept = snapshot(mnt / "ad")
            fill(mnt)
            with pytest.raises(OSError, match="No space left on device") as e:
                ad.save(mnt / "ad")
            assert e.value.filename == str(mnt / "ad") and snapshot(mnt / "ad") == kept
            assert not [p for p in mnt.iterdir() if p.name.endswith(".tmp")]
