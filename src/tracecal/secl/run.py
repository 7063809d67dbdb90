"""The SECL pass (docs/method.md §6): the stream in order, through the gate, with bounded LoRA steps.

Per question i: the statistic x_i of the answer's trace goes to the gate (`SECLRun.observe`); inside an open
gate τ_i is read and, if |v_i − τ_i| > update_threshold, one bounded LoRA step is taken (`SECLRun.update`)
and the question's SECL confidence is v after the step; outside the gate the SECL confidence is v under the
current adapter (`SECLRun.flush`). τ is the configured target (`tracecal.secl.targets`, NormPTrue by default).
With ``accumulate=False`` the adapter is reset after every update (``reset_at="update"``) or at every detector
alarm, before the alarming question's v is read (``reset_at="shift"``).

The definition is sequential; the implementation batches the v reads of the closed-gate questions between
two updates (the model does not change in between, so the result equals the sequential one up to float
summation order), and reuses the frozen pass (`tracecal.secl.frozen`) wherever the model equals the base
model: v before the first update and after a reset; answers and τ always with ``scope="confidence"``. With
``scope="all"`` the adapted model also answers: answers are generated in batches while the next question
cannot train, one at a time inside a burst, and a batch is cut (its later answers regenerated) when an
update changes the model in its middle.

Cost: SECL's overhead is τ on gated questions + backward passes of updates + the v re-reads after steps,
reported relative to computing τ for every question (see `tracecal.secl.cost`).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tracecal.errors import ValidationError
from tracecal.secl.adapter import SECLAdapter, UpdateInfo, require_hf
from tracecal.secl.config import SECLConfig
from tracecal.secl.cost import CostMeter
from tracecal.secl.frozen import FrozenPass, frozen_pass, weights_dtype
from tracecal.secl.gate import Gate, GateStep, make_gate
from tracecal.secl.result import SECLRecord, SECLResult
from tracecal.secl.stream import Progress, StreamItem, answer_statistic, generate_answers, read_tau, verbal_prompts
from tracecal.secl.targets import READS_PTRUE, target_series

if TYPE_CHECKING:
    from tracecal.backends.hf import HFModel

__all__ = ["SECLRun", "run_secl"]


class SECLRun:
    """One SECL pass over a stream, as explicit state and the steps that change it.

    State: ``record`` (`SECLRecord`, per question), ``answers`` / ``entropy`` / ``surprisal`` (the answers in
    use: the frozen pass's, or the adapted model's with ``scope="all"``), ``pending`` (closed-gate questions
    whose v is not read yet), ``gate``, ``adapter`` (attached while the run is open), ``cost``.

    `run` does everything and returns the `SECLResult`. To drive it by hand, open it (``with run:`` attaches
    the LoRA adapter) and call `observe` / `update` / `flush` in stream order, then `result` once closed::

        with SECLRun(lm, items, cfg, frozen) as r:
            for i in range(len(items)):
                if r.observe(i).open:
                    r.update(i)
            r.flush()
        result = r.result()

    Args:
        lm: the model (the LoRA adapter is attached while the run is open, removed afterwards).
        items: the stream (`tracecal.secl.stream.build_stream`).
        cfg: SECL parameters (default `SECLConfig()`).
        frozen: the `FrozenPass` of the same stream and model.
        gate: the adaptation gate (default `make_gate(cfg)`); any object with the `Gate` protocol.
        progress: optional callback ``(stage, done, total)``.
    """

    def __init__(
        self,
        lm: HFModel,
        items: Sequence[StreamItem],
        cfg: SECLConfig | None,
        frozen: FrozenPass,
        gate: Gate | None = None,
        progress: Progress | None = None,
    ) -> None:
        self.lm = lm
        self.items = list(items)
        self.cfg = cfg or SECLConfig()
        if not self.items:
            raise ValidationError("empty stream")
        frozen.check(self.items, lm.model_id)
        self.frozen = frozen
        self.target = target_series(self.cfg.target, frozen, self.items)  # τ of every question (scope confidence)
        self.gate: Gate = gate if gate is not None else make_gate(self.cfg)
        self.progress = progress
        self.cost = CostMeter()
        self.record = SECLRecord.empty(self.n)
        self.answers = list(frozen.answers)
        self.entropy = list(frozen.entropy)
        self.surprisal = list(frozen.surprisal)
        self.observed = 0  # questions observed so far (the stream is observed in order)
        self.pending: list[int] = []
        self.discarded = 0  # answers generated and thrown away (an update came in the middle of their batch)
        self.adapter: SECLAdapter | None = None
        self.adapter_info: dict[str, Any] = {}
        self.seconds = 0.0
        self._vprompts: list[list[int] | None] = [None] * self.n
        self._t0: float | None = None
        self._opened = False

    @property
    def n(self) -> int:
        return len(self.items)

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> SECLRun:
        if self._opened:
            raise RuntimeError("a SECL run is opened once (closing it removed its adapter)")
        self._opened = True
        self._t0 = time.perf_counter()
        self.adapter = SECLAdapter(self.lm, self.cfg, self.cost)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self, save_adapter: str | Path | None = None) -> None:
        """Describe (and optionally save) the adapter, then remove it from the model."""
        if self.adapter is None:
            return
        try:
            self.adapter_info = self.adapter.describe()
            if save_adapter is not None:
                self.adapter.save(save_adapter)
        finally:
            self.adapter.close()
            self.adapter = None
            if self._t0 is not None:
                self.seconds += time.perf_counter() - self._t0
                self._t0 = None

    def _open_adapter(self) -> SECLAdapter:
        if self.adapter is None:
            raise RuntimeError("the SECL run is not open: use `with run:` (or `run.run()`)")
        return self.adapter

    @property
    def answers_change(self) -> bool:
        """The adapted model answers (``scope="all"``) and differs from the base model now."""
        return self.cfg.scope == "all" and not self._open_adapter().pristine

    # ------------------------------------------------------------------ per question
    def vprompt(self, i: int) -> list[int]:
        """The verbalised-confidence prompt of question i with its current answer (cached)."""
        p = self._vprompts[i]
        if p is None:
            p = self._vprompts[i] = verbal_prompts(self.lm, [self.items[i]], [self.answers[i]])[0]
        return p

    def observe(self, i: int) -> GateStep:
        """Feed question i's statistic to the gate and record its decision (a closed gate queues i's v read); an
        alarm resets the adapter first with ``reset_at="shift"``."""
        if i != self.observed:
            raise ValidationError(f"questions are observed in stream order: expected {self.observed}, got {i}")
        adapter = self._open_adapter()
        x = answer_statistic(self.entropy[i], self.surprisal[i], self.cfg.statistic)
        step = self.gate.observe(x)
        if step.alarm and not self.cfg.accumulate and self.cfg.reset_at == "shift" and not adapter.pristine:
            self.flush()  # the questions before the shift are read under the adapter they saw
            adapter.reset()
        rec = self.record
        rec.stat[i], rec.alarm[i], rec.burst[i], rec.gate_open[i] = x, step.alarm, step.burst, step.open
        self.observed += 1
        if not step.open:
            self.pending.append(i)
        return step

    def tau(self, i: int) -> float:
        """The target τ of question i's answer: from the frozen pass while the answers are the base model's (a
        P(True) target charged its prompt, the others nothing), else NormPTrue read now (``scope="all"``)."""
        if self.answers_change:
            with self.cost.timer("tau_gated"):
                tau, tok = read_tau(self.lm, [self.items[i]], [self.answers[i]], 1)
            self.cost.add("tau_gated", tok[0])
            return float(tau[0])
        self.cost.add("tau_gated", int(self.frozen.tau_tokens[i]) if self.cfg.target in READS_PTRUE else 0)
        return float(self.target[i])

    def update(self, i: int) -> UpdateInfo:
        """Question i, let through by the gate: flush the queued v reads, then one bounded LoRA step toward τ_i.

        The step is taken only when |v_i − τ_i| > ``update_threshold`` (`SECLAdapter.update`); with
        ``accumulate=False`` and ``reset_at="update"`` the adapter is reset after it.
        """
        adapter = self._open_adapter()
        if i != self.observed - 1 or not self.record.gate_open[i]:
            raise ValidationError(f"question {i} is not the last one observed, with the gate open")
        self.flush()
        tau = self.tau(i)
        with self.cost.timer("update"):
            info = adapter.update(self.vprompt(i), tau)
        self.gate.feedback(info.updated)
        rec = self.record
        rec.tau_used[i], rec.v_before[i], rec.v_secl[i] = tau, info.v_before, info.v_after
        rec.updated[i] = info.updated
        if info.updated:
            rec.scale[i], rec.grad_norm[i], rec.loss[i] = info.scale, info.grad_norm, info.loss
            if not self.cfg.accumulate and self.cfg.reset_at == "update":
                adapter.reset()
        return info

    def flush(self) -> None:
        """v of the closed-gate questions queued since the last update, under the current adapter (batched).

        While the model is the base model and a question's answer is the frozen pass's, its v is the frozen v.
        """
        adapter = self._open_adapter()
        if not self.pending:
            return
        fresh = []
        for i in self.pending:
            if adapter.pristine and self.answers[i] == self.frozen.answers[i]:
                self.record.v_secl[i] = self.frozen.v[i]
                self.cost.add("v", int(self.frozen.v_tokens[i]))
            else:
                fresh.append(i)
        if fresh:
            with self.cost.timer("v"):
                vs, _ = adapter.confidence([self.vprompt(i) for i in fresh])
            self.record.v_secl[fresh] = vs
        self.pending.clear()

    # ------------------------------------------------------------------ the stream
    def _answer(self, chunk: Sequence[int]) -> None:
        """Answers of ``chunk`` from the model as it is now (``scope="all"`` after an update)."""
        with self.cost.timer("generate"):
            a = generate_answers(self.lm, [self.items[j] for j in chunk], self.cfg.batch_size, self.cost)
        for k, j in enumerate(chunk):
            self.answers[j], self.entropy[j], self.surprisal[j] = a.texts[k], a.entropy[k], a.surprisal[k]
            self._vprompts[j] = None

    def advance(self, i: int) -> int:
        """Questions i, i+1, … up to a batch's end, or to the first update that changes the answers; the next i.

        A batch is ``batch_size`` questions, or one while the adapted model answers and the gate is in a burst.
        """
        regen = self.answers_change
        size = 1 if regen and self.gate.in_burst else self.cfg.batch_size
        chunk = list(range(i, min(self.n, i + size)))
        if regen:
            self._answer(chunk)
        else:
            self.cost.add("generate_reused", 0, passes=len(chunk))
        for k, j in enumerate(chunk):
            if not self.observe(j).open:
                continue
            info = self.update(j)
            if info.updated and self.answers_change and k + 1 < len(chunk):
                self.discarded += len(chunk) - k - 1 if regen else 0
                return j + 1  # the later answers of this batch came from the model before the update
            if self.progress:
                self.progress("secl", j + 1, self.n)
        return chunk[-1] + 1

    def run(self, save_adapter: str | Path | None = None) -> SECLResult:
        """The whole stream in order, then the scored `SECLResult` (``save_adapter``: write the final LoRA)."""
        with self:
            i = 0
            while i < self.n:
                i = self.advance(i)
                if self.progress:
                    self.progress("secl", min(i, self.n), self.n)
            self.flush()
            self.close(save_adapter)
        return self.result()

    def result(self) -> SECLResult:
        """Score the finished run (labels are computed here, after both passes, for scoring only)."""
        if self.adapter is not None:
            raise RuntimeError("close the SECL run before asking for its result")
        if self.observed < self.n or self.pending:
            raise RuntimeError(
                f"the run is not finished: {self.observed}/{self.n} questions observed, "
                f"{len(self.pending)} v reads not flushed"
            )
        cost = self.cost
        if self.discarded:
            cost = copy.deepcopy(cost)
            cost.add("discarded_generate", 0, passes=self.discarded)
        items, frozen = self.items, self.frozen
        y_frozen = np.array([it.task.label(it.example, a) for it, a in zip(items, frozen.answers, strict=True)])
        if self.cfg.scope == "all":
            y_secl = np.array([it.task.label(it.example, a) for it, a in zip(items, self.answers, strict=True)])
        else:
            y_secl = y_frozen.copy()
        return SECLResult(
            config=self.cfg,
            ids=[it.id for it in items],
            domains=[it.domain for it in items],
            model_id=self.lm.model_id,
            dtype=weights_dtype(self.lm),
            label_rules={it.domain: it.task.label_rule for it in items},
            v_frozen=frozen.v.copy(),
            tau=self.target.copy(),
            y_frozen=y_frozen,
            y_secl=y_secl,
            answers_frozen=list(frozen.answers),
            answers_secl=list(self.answers),
            records=self.record,
            frozen_cost=frozen.cost,
            secl_cost=cost,
            adapter=self.adapter_info,
            seconds={"frozen_pass": frozen.cost.time(), "secl_pass": self.seconds},
        )


def run_secl(
    lm: HFModel,
    items: Sequence[StreamItem],
    cfg: SECLConfig | None = None,
    frozen: FrozenPass | None = None,
    progress: Progress | None = None,
    save_adapter: str | Path | None = None,
) -> SECLResult:
    """Run SECL over the stream (see the module docstring) and score it: a `SECLRun` from start to end.

    Args:
        lm: the model (the LoRA adapter is attached for the run and removed afterwards).
        items: the stream (`tracecal.secl.stream.build_stream`).
        cfg: SECL parameters (default `SECLConfig()`).
        frozen: a `FrozenPass` of the same stream and model (computed when None).
        progress: optional callback ``(stage, done, total)``.
        save_adapter: write the final LoRA adapter (safetensors) to this folder.
    """
    require_hf(lm)  # before the frozen pass: LoRA needs the HF backend
    cfg = cfg or SECLConfig()
    items = list(items)
    if not items:
        raise ValidationError("empty stream")
    if frozen is None:
        frozen = frozen_pass(lm, items, cfg.batch_size, progress)
    return SECLRun(lm, items, cfg, frozen, progress=progress).run(save_adapter)
