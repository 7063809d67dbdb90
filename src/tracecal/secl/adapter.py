"""LoRA adapter for SECL: the confidence read, the update step, reset, save and load (docs/method.md §6).

Confidence. For a prompt that shows the model a question and its own answer and asks for 0–100
(`tracecal.passes.selfeval.verbalized_prompt_ids`), `number_distribution` gives P(n), n = 0…100, differentiable
in the LoRA weights. The verbalised confidence and its n-bin distribution are

    v = Σ_n P(n) · n/100,        q_k = Σ_{n ∈ bin k} P(n),  k = 0…K−1  (100 → last bin).

Losses (τ = NormPTrue, the label-free target):

    directional:  L = −Σ_k t_k log q_k,  t_k ∝ exp(−(c_k − τ)² / (2 σ²)),  c_k = (k + ½)/K,  σ = target_sd
    mse:          L = (v − τ)²

The directional loss moves the whole confidence distribution toward the bins around τ (not just its mean).

One update (only when |v − τ| > update_threshold): ``steps_per_update`` optimiser steps on L with the
LoRA gradient norm clipped to ``max_grad_norm``; then v is re-read. The step is *bounded*: with
b = max_step (and b = min(b, |v_before − τ|) when ``no_overshoot``), if |v_after − v_before| > b the LoRA
parameter change Δθ is scaled to θ_before + α·Δθ, α = b / |v_after − v_before| (first-order), and v is
re-read; this is repeated at most ``max_rescales`` times. The reported confidence of a trained question is
v_after.

Reset restores the initial adapter (B = 0, so the model equals the base model bit for bit) and the optimiser.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from tracecal._inputs import read_json
from tracecal._outputs import InputPaths
from tracecal.backends.base import BackendUnsupportedError, LocalBackend
from tracecal.backends.registry import backend_of, get_backend
from tracecal.passes.selfeval import confidence_bins, number_distribution
from tracecal.secl.config import SECLConfig
from tracecal.secl.cost import CostMeter
from tracecal.secl.folders import FolderKind

if TYPE_CHECKING:
    from tracecal.backends.hf import HFModel

__all__ = [
    "ADAPTER_FOLDER",
    "SECLAdapter",
    "UpdateInfo",
    "directional_loss",
    "mse_loss",
    "expected_confidence",
    "hf_only_error",
    "require_hf",
    "target_bins",
]

ADAPTER_FILE = "adapter_model.safetensors"
SECL_CONFIG_FILE = "secl_config.json"
ADAPTER_FOLDER = FolderKind(
    "a saved SECL adapter",
    marker=SECL_CONFIG_FILE,
    names=frozenset({ADAPTER_FILE, "adapter_config.json", SECL_CONFIG_FILE, "README.md"}),
)
"""What a saved adapter folder holds (peft writes README.md too): only such a folder is replaced by a new save."""
V_TOKENS_EXTRA = 11  # number_distribution: 10 first-digit continuations + one "10"→"0" step per row


def expected_confidence(dist: torch.Tensor) -> torch.Tensor:
    """v = Σ_n P(n)·n/100 for a (B, 101) number distribution."""
    grid = torch.arange(101, dtype=dist.dtype, device=dist.device) / 100.0
    return dist @ grid


def target_bins(tau: torch.Tensor, n_bins: int = 10, sd: float = 0.1) -> torch.Tensor:
    """Discretised Gaussian over bin centres c_k = (k+½)/K centred on τ: (B, K), rows sum to 1."""
    c = (torch.arange(n_bins, dtype=tau.dtype, device=tau.device) + 0.5) / n_bins
    logit = -((c[None, :] - tau[:, None]) ** 2) / (2.0 * sd * sd)
    return torch.softmax(logit, -1)


def directional_loss(dist: torch.Tensor, tau: torch.Tensor, n_bins: int = 10, sd: float = 0.1) -> torch.Tensor:
    """Mean over rows of −Σ_k t_k(τ) log q_k (q = the model's bin distribution)."""
    q = confidence_bins(dist, n_bins).clamp(min=1e-12)
    t = target_bins(tau.to(dist.dtype), n_bins, sd)
    return -(t * q.log()).sum(-1).mean()


def mse_loss(dist: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    """Mean over rows of (v − τ)²."""
    return ((expected_confidence(dist) - tau.to(dist.dtype)) ** 2).mean()


def _save_pretrained(peft_model: Any, folder: str) -> None:
    """peft's ``save_pretrained`` (safetensors) into ``folder``; safetensors' own I/O error (a full disk) becomes the
    ``OSError`` it wraps (its errno read from the message), so that it is reported as every OS error is."""
    from safetensors import SafetensorError

    try:
        peft_model.save_pretrained(folder, safe_serialization=True)
    except SafetensorError as e:
        code = re.search(r"code: (\d+)", str(e))
        if code is None:
            raise
        raise OSError(int(code.group(1)), os.strerror(int(code.group(1))), folder) from e


def hf_only_error(what: str) -> BackendUnsupportedError:
    """Why SECL cannot run on ``what`` (llama.cpp, a server) and how to give it the same model on the HF backend."""
    from tracecal.backends.catalogue import NAMED_MODELS, model_cache_dir

    return BackendUnsupportedError(
        f"SECL runs on the HF backend only: it trains LoRA weights by gradient steps, which {what} cannot take. "
        f"Run it on the HF backend (leave out --backend llamacpp): a named model ({', '.join(NAMED_MODELS)}) or a "
        f".gguf file given to --model is converted once into an HF checkpoint (the GGUF dequantised to fp32) under "
        f"{model_cache_dir() / 'hf'}; a checkpoint folder or a Hugging Face id loads as it is"
    )


def require_hf(lm: Any) -> HFModel:
    """``lm``, or `BackendUnsupportedError` (`hf_only_error`) unless it holds its torch weights in this process."""
    if not isinstance(lm, LocalBackend):
        name = backend_of(lm)
        raise hf_only_error(get_backend(name).label if name is not None else f"a {type(lm).__name__}")
    return lm  # type: ignore[return-value]  # a LocalBackend: what SECL reads of an HFModel


@dataclass
class UpdateInfo:
    """What one `SECLAdapter.update` did."""

    updated: bool
    v_before: float
    v_after: float
    tau: float
    loss: float = float("nan")
    grad_norm: float = float("nan")
    scale: float = 1.0  # α applied to the step (1 = unbounded step kept)
    rereads: int = 0


class SECLAdapter:
    """LoRA on ``lm.model`` (in place, via peft) with SECL's update, reset, save and load.

    Use as a context manager, or call `close` to remove the LoRA layers again (the base model's modules and
    ``requires_grad`` flags are restored; adapted weights are discarded unless saved first).

    Args:
        lm: an `HFModel` (transformers causal LM, fp32 for gradients).
        cfg: the LoRA/optimiser/loss parameters of `SECLConfig`.
        cost: a `CostMeter` to record forward/backward tokens (optional).
    """

    max_rescales = 3

    def __init__(self, lm: HFModel, cfg: SECLConfig | None = None, cost: CostMeter | None = None) -> None:
        from peft import LoraConfig, get_peft_model

        require_hf(lm)
        self.lm = lm
        self.cfg = cfg or SECLConfig()
        self.cost = cost if cost is not None else CostMeter()
        if getattr(lm.model, "peft_config", None):
            raise RuntimeError("the model already carries a peft adapter; close the other SECLAdapter first")
        self._requires_grad = {n: p.requires_grad for n, p in lm.model.named_parameters()}
        self._was_training = lm.model.training
        n_layers = int(lm.model.config.num_hidden_layers)
        k = self.cfg.lora_layers
        self.layers = list(range(n_layers)) if k == 0 or k >= n_layers else list(range(n_layers - k, n_layers))
        self.backward_fraction = (n_layers - min(self.layers)) / n_layers
        self.lora_config = LoraConfig(
            r=self.cfg.lora_r,
            lora_alpha=self.cfg.lora_alpha,
            lora_dropout=self.cfg.lora_dropout,
            target_modules=list(self.cfg.lora_targets),
            layers_to_transform=self.layers,
            layers_pattern="layers",
            bias="none",
            task_type="CAUSAL_LM",
        )
        # the LoRA A matrices are random (kaiming); seed them without touching the global RNG stream
        with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*")
            torch.manual_seed(self.cfg.seed)
            self.peft = get_peft_model(lm.model, self.lora_config)
        self.peft.eval()  # dropout off; gradients still flow
        self.params = [p for n, p in self.peft.named_parameters() if p.requires_grad]
        if not self.params:
            raise RuntimeError(f"no LoRA parameters were created for targets {self.cfg.lora_targets}")
        self._init = [p.detach().clone() for p in self.params]
        self.optimizer = self._make_optimizer()
        self.pristine = True  # the adapter is at its initial state (model == base model)
        self.n_updates = 0
        self.n_resets = 0  # resets that undid at least one update
        self.closed = False

    # ------------------------------------------------------------------ setup / teardown
    def _make_optimizer(self) -> torch.optim.Optimizer:
        if self.cfg.optimizer == "sgd":
            return torch.optim.SGD(self.params, lr=self.cfg.lr, weight_decay=self.cfg.weight_decay)
        return torch.optim.Adam(self.params, lr=self.cfg.lr, weight_decay=self.cfg.weight_decay)

    @property
    def n_trainable(self) -> int:
        return int(sum(p.numel() for p in self.params))

    def close(self) -> None:
        """Remove the LoRA layers from ``lm.model`` (unmerged: the base weights were never changed)."""
        if self.closed:
            return
        self.peft.unload()
        for n, p in self.lm.model.named_parameters():
            p.requires_grad_(self._requires_grad.get(n, p.requires_grad))
        self.lm.model.train(self._was_training)
        for attr in ("peft_config", "_hf_peft_config_loaded"):
            if hasattr(self.lm.model, attr) and attr not in type(self.lm.model).__dict__:
                try:
                    delattr(self.lm.model, attr)
                except AttributeError:
                    pass
        self.closed = True

    def __enter__(self) -> SECLAdapter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def disabled(self) -> Iterator[None]:
        """Run the base model (adapter off) inside the ``with`` body."""
        with self.peft.disable_adapter():
            yield

    # ------------------------------------------------------------------ state
    def reset(self) -> None:
        """Restore the initial adapter exactly (B = 0 ⇒ outputs equal the base model's) and a fresh optimiser."""
        self.n_resets += not self.pristine
        with torch.no_grad():
            for p, p0 in zip(self.params, self._init, strict=True):
                p.copy_(p0)
        self.optimizer = self._make_optimizer()
        self.pristine = True

    def state(self) -> list[torch.Tensor]:
        return [p.detach().clone() for p in self.params]

    def _set(self, values: Sequence[torch.Tensor]) -> None:
        with torch.no_grad():
            for p, x in zip(self.params, values, strict=True):
                p.copy_(x)

    def delta_norm(self) -> float:
        """‖θ − θ_init‖₂ over the LoRA parameters (0 when pristine)."""
        sq = sum(float(((p.detach() - p0) ** 2).sum()) for p, p0 in zip(self.params, self._init, strict=True))
        return float(np.sqrt(sq))

    # ------------------------------------------------------------------ confidence
    def confidence(self, prompt_ids: Sequence[Sequence[int]], kind: str = "v") -> tuple[np.ndarray, np.ndarray]:
        """v (B,) and the number distribution (B, 101) with the adapter as it is now (no gradient)."""
        vs, ds = [], []
        bs = self.cfg.batch_size
        for s in range(0, len(prompt_ids), bs):
            chunk = prompt_ids[s : s + bs]
            dist, _ = number_distribution(self.lm, chunk)
            self.cost.add(kind, sum(len(p) + V_TOKENS_EXTRA for p in chunk), passes=len(chunk))
            ds.append(dist.double().cpu().numpy())
            vs.append(expected_confidence(dist).double().cpu().numpy())
        if not vs:
            return np.zeros(0), np.zeros((0, 101))
        return np.concatenate(vs), np.concatenate(ds)

    def _loss(self, dist: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
        if self.cfg.loss == "mse":
            return mse_loss(dist, tau)
        return directional_loss(dist, tau, self.cfg.n_bins, self.cfg.target_sd)

    def _read_v(self, prompt_ids: Sequence[int]) -> float:
        dist, _ = number_distribution(self.lm, [prompt_ids])
        self.cost.add("reread", len(prompt_ids) + V_TOKENS_EXTRA)
        return float(expected_confidence(dist)[0])

    # ------------------------------------------------------------------ update
    def update(self, prompt_ids: Sequence[int], tau: float, force: bool = False) -> UpdateInfo:
        """Read v for one question (with gradient) and, if |v − τ| > threshold (or ``force``), take a bounded step.

        Returns an `UpdateInfo`; ``v_after`` is the question's confidence after the update (= ``v_before``
        when no update happened). See the module docstring for the step bound.
        """
        cfg = self.cfg
        n_tok = len(prompt_ids) + V_TOKENS_EXTRA
        tau_t = torch.tensor([float(tau)], dtype=torch.float32, device=self.lm.device)
        dist, _ = number_distribution(self.lm, [prompt_ids], grad=True)
        v0 = float(expected_confidence(dist)[0].detach())
        self.cost.add("v_grad", n_tok)  # this read is the question's confidence read (base pipeline)
        if not force and abs(v0 - tau) <= cfg.update_threshold:
            return UpdateInfo(False, v0, v0, float(tau))
        before = self.state()
        loss_val, gn = float("nan"), float("nan")
        for step in range(cfg.steps_per_update):
            if step > 0:
                dist, _ = number_distribution(self.lm, [prompt_ids], grad=True)
            loss = self._loss(dist, tau_t)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            gn = float(torch.nn.utils.clip_grad_norm_(self.params, cfg.max_grad_norm))
            self.optimizer.step()
            # backward runs only through the layers at and above the lowest LoRA layer
            self.cost.add("train", n_tok if step > 0 else 0, backward_tokens=round(n_tok * self.backward_fraction))
            loss_val = float(loss.detach())
        self.optimizer.zero_grad(set_to_none=True)
        after = self.state()
        self.pristine = False
        self.n_updates += 1
        v1 = self._read_v(prompt_ids)
        rereads, alpha = 1, 1.0
        bound = cfg.max_step
        if cfg.no_overshoot:
            bound = min(bound, abs(v0 - tau))
        while abs(v1 - v0) > bound * 1.05 and rereads <= self.max_rescales:
            alpha *= bound / abs(v1 - v0)
            self._set([b + alpha * (a - b) for a, b in zip(after, before, strict=True)])
            v1 = self._read_v(prompt_ids)
            rereads += 1
        return UpdateInfo(True, v0, v1, float(tau), loss_val, gn, alpha, rereads)

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | Path, inputs: InputPaths = ()) -> Path:
        """Write the LoRA adapter (``adapter_model.safetensors`` + ``adapter_config.json``) and ``secl_config.json``
        into the folder ``path`` with `tracecal.secl.folders.atomic_write_dir`: a temporary sibling renamed into
        place, never over a file, a folder holding one of ``inputs``, or a non-empty folder that is not a saved
        SECL adapter (`ADAPTER_FOLDER`); a full disk is an ``OSError`` naming ``path``."""
        from tracecal.secl.folders import atomic_write_dir

        def write(folder: str) -> None:
            with warnings.catch_warnings():  # GGUF-loaded models have no config.json next to the weights
                warnings.filterwarnings("ignore", message="Could not find a config file")
                _save_pretrained(self.peft, folder)
            (Path(folder) / SECL_CONFIG_FILE).write_text(self.cfg.to_json(), encoding="utf-8")
            if not (Path(folder) / ADAPTER_FILE).is_file():
                raise RuntimeError(f"peft did not write {ADAPTER_FILE} in {path}")

        atomic_write_dir(path, write, ADAPTER_FOLDER, inputs, "the adapter folder")
        return Path(path)

    @classmethod
    def load(cls, lm: HFModel, path: str | Path, cost: CostMeter | None = None) -> SECLAdapter:
        """Attach a saved adapter to ``lm`` (same LoRA layout as saved; optimiser state starts fresh)."""
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        path = Path(path)
        if not (path / ADAPTER_FILE).is_file():
            raise FileNotFoundError(f"no {ADAPTER_FILE} in {path}")
        cfg_file = path / SECL_CONFIG_FILE
        cfg = SECLConfig.from_dict(read_json(cfg_file, "saved adapter's config")) if cfg_file.is_file() else None
        if cfg is None:
            acfg = read_json(path / "adapter_config.json", "saved adapter's config")
            n_layers = int(lm.model.config.num_hidden_layers)
            layers = acfg.get("layers_to_transform") or list(range(n_layers))
            cfg = SECLConfig(
                lora_r=int(acfg["r"]),
                lora_alpha=int(acfg["lora_alpha"]),
                lora_targets=tuple(sorted(acfg["target_modules"])),
                lora_layers=len(layers) if len(layers) < n_layers else 0,
            )
        ad = cls(lm, cfg, cost)
        try:
            result = set_peft_model_state_dict(ad.peft, load_file(str(path / ADAPTER_FILE)))
            missing = [k for k in getattr(result, "unexpected_keys", []) if "lora" in k]
            if missing:
                raise RuntimeError(f"adapter weights do not match the model: unexpected {missing[:3]}")
        except Exception:
            ad.close()
            raise
        ad.pristine = ad.delta_norm() == 0.0
        return ad

    def describe(self) -> dict[str, Any]:
        return {
            "lora_r": self.cfg.lora_r,
            "lora_alpha": self.cfg.lora_alpha,
            "targets": list(self.cfg.lora_targets),
            "layers": self.layers,
            "trainable_params": self.n_trainable,
            "updates": self.n_updates,
            "resets": self.n_resets,
            "delta_norm": self.delta_norm(),
        }
