"""`SECLConfig`: every choice of SECL (docs/method.md §6) as a named parameter, with our defaults.

Every constrained setting has one entry in ``SECLConfig.parameter_constraints`` (`tracecal._validation`); the
``ph_*`` settings take their defaults and constraints from `tracecal.stats.drift.PageHinkleySettings` (the one
declaration the gateway's drift settings share). A bad value is a `tracecal.errors.ValidationError` (a
``ValueError``) naming the setting.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar

from tracecal._validation import SEED, Constraint, Interval, Options, check_params
from tracecal.errors import ValidationError
from tracecal.stats.drift import PAGE_HINKLEY_DEFAULTS as PH
from tracecal.stats.drift import PageHinkleySettings, page_hinkley_constraints

__all__ = ["SECLConfig", "GATES", "LOSSES", "POSITIVE", "RESET_AT", "SCOPES", "STATISTICS", "TARGETS"]

GATES = ("detector", "always", "never")
LOSSES = ("directional", "mse")
SCOPES = ("confidence", "all")
TARGETS = ("norm_ptrue", "ptrue", "trace", "trace_rank", "oracle")
RESET_AT = ("update", "shift")
STATISTICS = ("mean_entropy", "max_entropy", "mean_surprisal", "first_entropy")
POSITIVE = Interval(float, 0, None, closed="neither")
"""A step size, bound or spread: a finite number > 0."""


@dataclass
class SECLConfig:
    """Parameters of a SECL run (defaults in brackets are our choices where docs/method.md §6 leaves one open).

    Gate (when to adapt):
        gate: ``"detector"`` (Page-Hinkley opens bursts) | ``"always"`` (every question may train) |
            ``"never"`` (frozen model; SECL = frozen v).
        statistic: per-question detector input, default the answer's mean token entropy mean_t H_t.
        ph_delta: Page-Hinkley tolerance δ, in reference standard deviations [0.25].
        ph_lambda: Page-Hinkley alarm threshold λ, in reference standard deviations [10].
        ph_min_samples: observations after a (re)start before an alarm may fire; the first ones also give
            the reference mean/sd used to standardise the statistic [20].
        ph_direction: ``"both"`` (two-sided) | ``"up"`` | ``"down"`` [both].
        ph_standardize: feed z = (x − μ_ref)/σ_ref instead of x (δ, λ then in sd units) [True].
        burst_size: a burst lasts at most N questions after an alarm [32].
        burst_patience: close a burst early after this many consecutive questions with |v − τ| ≤ bin;
            0 = never early [0].
        start_burst: the start of deployment counts as a change point (open a burst at question 0) [True].

    Target (what v is pulled toward; `tracecal.secl.targets`):
        target: ``"norm_ptrue"`` — NormPTrue τ = P(yes)/(P(yes)+P(no)) [default] | ``"ptrue"`` — raw P(yes),
            not renormalised | ``"trace"`` — c_TRACE = exp(−R) of the answer's trace (label-free, docs/method.md §2) |
            ``"trace_rank"`` — c_TRACE's mid-rank among the answers seen so far, (#{j<i: c_j<c_i} +
            ½·#{j<i: c_j=c_i} + ½)/i (label-free, online) | ``"oracle"`` — the answer's label (an upper bound
            that reads labels; the only target that does). Other than ``norm_ptrue`` needs ``scope="confidence"``.

    Update (what one adaptation step is):
        n_bins: confidence bins of the loss and of the update threshold [10].
        update_threshold: train only when |v − τ| > this (one bin = 1/n_bins) [0.1].
        loss: ``"directional"`` — cross-entropy between the model's n-bin confidence distribution q and a
            target t centred on τ, t_k ∝ exp(−(c_k − τ)²/(2·target_sd²)) over bin centres c_k — or ``"mse"``
            — (E[conf] − τ)².
        target_sd: sd of the discretised Gaussian target, in confidence units [0.1 = one bin].
        optimizer: ``"adam"`` | ``"sgd"``; lr; weight_decay; max_grad_norm (clip of the LoRA gradient norm).
        steps_per_update: optimiser steps per trained question [1].
        max_step: bound on the change of v a single update may cause, |v_after − v_before| ≤ max_step; a
            larger move is scaled back (see `SECLAdapter.update`) [0.1].
        no_overshoot: also bound the move by |v_before − τ| (never step past the target) [True].
        accumulate: LoRA weights accumulate across the stream; False resets them (and the optimiser)
            to the initial adapter (= base model) at ``reset_at`` [True].
        reset_at: with ``accumulate=False``: ``"update"`` — after every update [default, the first ablation's
            meaning] | ``"shift"`` — at every detector alarm, before the alarming question's v is read (needs
            ``gate="detector"``: the other gates detect no shift).

    LoRA:
        lora_r, lora_alpha, lora_dropout; lora_targets: module names (attention projections by default);
        lora_layers: adapt the top-K decoder layers only (0 = all layers) [4].

    Other:
        scope: where the adapter is active. ``"confidence"`` — only when the model verbalises its
            confidence: answers, their traces and τ come from the base model (the target never drifts
            with the adapter) [default]. ``"all"`` — the adapted model also answers and computes τ.
        batch_size: questions per forward batch where no update can happen in between [8].
        seed: seeds LoRA initialisation (and nothing else is random: decoding is greedy) [0].
    """

    gate: str = "detector"
    target: str = "norm_ptrue"
    statistic: str = "mean_entropy"
    ph_delta: float = PH.delta
    ph_lambda: float = PH.threshold
    ph_min_samples: int = PH.min_samples
    ph_direction: str = PH.direction
    ph_standardize: bool = PH.standardize
    burst_size: int = 32
    burst_patience: int = 0
    start_burst: bool = True
    n_bins: int = 10
    update_threshold: float = 0.1
    loss: str = "directional"
    target_sd: float = 0.1
    optimizer: str = "adam"
    lr: float = 3e-3
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    steps_per_update: int = 1
    max_step: float = 0.1
    no_overshoot: bool = True
    accumulate: bool = True
    reset_at: str = "update"
    lora_r: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.0
    lora_targets: tuple[str, ...] = field(default_factory=lambda: ("q_proj", "v_proj"))
    lora_layers: int = 4
    scope: str = "confidence"
    batch_size: int = 8
    seed: int = 0

    parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "gate": Options(*GATES),
        "target": Options(*TARGETS),
        "reset_at": Options(*RESET_AT),
        "loss": Options(*LOSSES),
        "scope": Options(*SCOPES),
        "statistic": Options(*STATISTICS),
        "optimizer": Options("adam", "sgd"),
        **page_hinkley_constraints(
            delta="ph_delta", threshold="ph_lambda", min_samples="ph_min_samples", direction="ph_direction"
        ),
        "burst_size": Interval(int, 1, None),
        "n_bins": Interval(int, 1, None),
        "lora_r": Interval(int, 1, None),
        "steps_per_update": Interval(int, 1, None),
        "batch_size": Interval(int, 1, None),
        "lr": POSITIVE,
        "max_step": POSITIVE,
        "target_sd": POSITIVE,
        "max_grad_norm": POSITIVE,
        "lora_layers": Interval(int, 0, None),
        "burst_patience": Interval(int, 0, None),
        "update_threshold": Interval(float, 0, None),
        "seed": SEED,
    }
    """Every constrained setting's constraint, declared once (`tracecal._validation`)."""

    def __post_init__(self) -> None:
        if isinstance(self.lora_targets, str):
            self.lora_targets = tuple(t.strip() for t in self.lora_targets.split(",") if t.strip())
        self.lora_targets = tuple(self.lora_targets)
        check_params(vars(self), self.parameter_constraints)
        if not self.lora_targets:
            raise ValidationError("lora_targets is empty: name at least one module (e.g. q_proj,v_proj)")
        if self.reset_at == "shift" and (self.accumulate or self.gate != "detector"):
            raise ValidationError(
                "reset_at='shift' needs accumulate=False (--reset) and gate='detector' (only the detector sees shifts)"
            )
        if self.target != "norm_ptrue" and self.scope != "confidence":
            raise ValidationError(f"target={self.target!r} needs scope='confidence' (only NormPTrue is re-read)")

    def page_hinkley(self) -> PageHinkleySettings:
        """The gate's detector settings (``ph_*``)."""
        return PageHinkleySettings(
            self.ph_delta, self.ph_lambda, self.ph_min_samples, self.ph_direction, self.ph_standardize
        )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["lora_targets"] = list(self.lora_targets)
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SECLConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValidationError(f"unknown SECLConfig fields: {', '.join(unknown)}")
        return cls(**d)
