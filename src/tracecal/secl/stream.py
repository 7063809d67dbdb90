"""The SECL stream: build it, run the frozen model over it, run SECL over it, score both (METHOD §6).

Two passes over the same ordered stream of questions (domain after domain):

1. `frozen_pass` — the base model, batched: answer + trace (one generation), NormPTrue τ and verbalised v for
   every question. Gives baselines (a) frozen v and (b) τ, and is reusable across SECL runs (`FrozenPass.save`).
2. `run_secl` — SECL in stream order. Per question i: statistic x_i of the answer's trace → gate; inside an
   open burst τ_i is read and, if |v_i − τ_i| > update_threshold, one bounded LoRA step is taken
   (`SECLAdapter.update`) and the question's SECL confidence is v after the step; outside bursts the SECL
   confidence is v under the current adapter. The definition is sequential; the implementation batches the
   v reads of questions between two updates (the model does not change in between, so the result equals the
   sequential one up to float summation order), and reuses the frozen pass wherever the model equals the base
   model (before the first update; after a reset; answers and τ always with ``scope="confidence"``).

Labels z (``task.label``) are computed only after both passes, for scoring (`SECLResult.metrics`); nothing
in either pass reads a gold answer.

Cost: SECL's overhead is τ on gated questions + backward passes of updates + the v re-reads after steps,
reported relative to computing τ for every question (see `tracecal.secl.cost`).
"""

from __future__ import annotations

import json
import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tracecal.secl.adapter import V_TOKENS_EXTRA, SECLAdapter
from tracecal.secl.config import SECLConfig
from tracecal.secl.cost import CostMeter
from tracecal.secl.detector import DetectorGate, make_gate

if TYPE_CHECKING:
    from tracecal.backends.hf import HFModel
    from tracecal.tasks import Example, Task

__all__ = [
    "StreamItem",
    "build_stream",
    "question_text",
    "answer_statistic",
    "FrozenPass",
    "frozen_pass",
    "run_secl",
    "SECLResult",
    "METHODS",
    "BASE_KINDS",
    "OVERHEAD_KINDS",
]

METHODS = ("frozen_v", "tau", "secl_v")
BASE_KINDS = ("generate", "v", "v_grad")  # what answering + verbalising costs with or without SECL
OVERHEAD_KINDS = ("tau_gated", "train", "reread")  # what SECL adds
FROZEN_FORMAT = 1
Progress = Callable[[str, int, int], None]  # (stage, done, total)


# ------------------------------------------------------------------------------------------ stream


@dataclass
class StreamItem:
    """One question of the stream: its domain (task name), the task and the example."""

    domain: str
    task: Task
    example: Example

    @property
    def id(self) -> str:
        return f"{self.domain}/{self.example.id}"


def question_text(task: Task, ex: Example) -> str:
    """The question as shown in the P(True) and verbalised-confidence prompts (options / context included)."""
    from tracecal.tasks.prompts import option_lines

    q = ex.question
    if ex.choices:
        q = f"{q}\n{option_lines(ex.choices)}"
    if ex.context:
        q = f"Context: {ex.context}\n\n{q}"
    return q


def build_stream(
    tasks: str | Sequence[str],
    per_domain: int,
    data_dir: str | Path | None = None,
    sample_seed: int | None = None,
) -> list[StreamItem]:
    """``per_domain`` questions of each task, domain after domain, in the order given.

    ``tasks``: names (or a comma-separated string). ``sample_seed``: None takes the first rows in file
    order; an int takes a seeded random subset (`Task.load`).
    """
    from tracecal.tasks import get_task

    names = [t.strip() for t in tasks.split(",")] if isinstance(tasks, str) else list(tasks)
    names = [n for n in names if n]
    if not names:
        raise ValueError("the stream needs at least one task")
    if per_domain < 1:
        raise ValueError(f"per_domain must be ≥ 1, got {per_domain}")
    items: list[StreamItem] = []
    for name in names:
        task = get_task(name)
        examples = task.load(limit=per_domain, data_dir=data_dir, seed=sample_seed)
        items += [StreamItem(task.name, task, ex) for ex in examples]
    return items


def answer_statistic(entropy: np.ndarray, surprisal: np.ndarray, name: str = "mean_entropy") -> float:
    """Per-question detector input from the answer's trace (NaN for a zero-token answer)."""
    if len(entropy) == 0:
        return float("nan")
    if name == "mean_entropy":
        return float(np.mean(entropy))
    if name == "max_entropy":
        return float(np.max(entropy))
    if name == "mean_surprisal":
        return float(np.mean(surprisal))
    if name == "first_entropy":
        return float(entropy[0])
    raise ValueError(f"unknown statistic {name!r}")


# ------------------------------------------------------------------------------------------ frozen pass


@dataclass
class _Answers:
    texts: list[str]
    entropy: list[np.ndarray]
    surprisal: list[np.ndarray]


def _generate(lm: HFModel, items: Sequence[StreamItem], batch_size: int, cost: CostMeter) -> _Answers:
    """Greedy answers with traces, grouped by task (each task has its own budget and stop strings)."""
    out: list[Any] = [None] * len(items)
    by_task: dict[str, list[int]] = {}
    for i, it in enumerate(items):
        by_task.setdefault(it.task.name, []).append(i)
    for idx in by_task.values():
        task = items[idx[0]].task
        traces = lm.generate(
            [task.prompt(items[i].example, chat=lm.chat) for i in idx],
            max_new_tokens=task.max_new_tokens,
            stop_strings=task.stop_strings(lm.chat),
            batch_size=batch_size,
            ids=[items[i].id for i in idx],
        )
        for i, t in zip(idx, traces, strict=True):
            out[i] = t
            cost.add("generate", len(t.prompt_ids) + len(t.token_ids) + (t.stop_reason == "eos"))
    return _Answers([t.text for t in out], [t.entropy for t in out], [t.surprisal for t in out])


def _tau(
    lm: HFModel, items: Sequence[StreamItem], answers: Sequence[str], batch_size: int
) -> tuple[np.ndarray, list[int]]:
    from tracecal.selfeval import p_true, p_true_prompt_ids

    qs = [question_text(it.task, it.example) for it in items]
    toks = [len(p_true_prompt_ids(lm, q, a)) for q, a in zip(qs, answers, strict=True)]
    return p_true(lm, qs, list(answers), batch_size=batch_size), toks


def _vprompts(lm: HFModel, items: Sequence[StreamItem], answers: Sequence[str]) -> list[list[int]]:
    from tracecal.selfeval import verbalized_prompt_ids

    return [
        verbalized_prompt_ids(lm, question_text(it.task, it.example), a) for it, a in zip(items, answers, strict=True)
    ]


@dataclass
class FrozenPass:
    """The base model over the stream: answers (texts, per-token H and s), τ, v, and their cost."""

    ids: list[str]
    domains: list[str]
    model_id: str
    answers: list[str]
    entropy: list[np.ndarray]
    surprisal: list[np.ndarray]
    tau: np.ndarray
    v: np.ndarray
    tau_tokens: np.ndarray
    v_tokens: np.ndarray
    cost: CostMeter = field(default_factory=CostMeter)

    def __len__(self) -> int:
        return len(self.ids)

    def check(self, items: Sequence[StreamItem], model_id: str | None = None) -> None:
        """Raise ValueError unless this pass was computed for exactly these items (and model)."""
        ids = [it.id for it in items]
        if ids != self.ids:
            raise ValueError(f"the frozen pass is for a different stream ({len(self.ids)} vs {len(ids)} questions)")
        if model_id is not None and model_id != self.model_id:
            raise ValueError(f"the frozen pass was computed with {self.model_id!r}, not {model_id!r}")

    def select(self, items: Sequence[StreamItem]) -> FrozenPass:
        """The pass restricted to ``items`` (a sub-stream, e.g. fewer questions per domain), in their order.

        Costs are re-summed from the per-question token counts (generation and seconds pro rata).
        """
        pos = {q: i for i, q in enumerate(self.ids)}
        missing = [it.id for it in items if it.id not in pos]
        if missing:
            raise ValueError(f"the frozen pass lacks {len(missing)} of the stream's questions (e.g. {missing[0]!r})")
        idx = [pos[it.id] for it in items]
        frac = len(idx) / max(len(self.ids), 1)
        cost = CostMeter()
        tau_tok, v_tok = self.tau_tokens[idx], self.v_tokens[idx]
        cost.add("tau", int(tau_tok.sum()), passes=len(idx))
        cost.add("v", int(v_tok.sum()), passes=len(idx))
        cost.add("generate", round(self.cost.forward_tokens.get("generate", 0) * frac), passes=len(idx))
        shares = {
            "tau": tau_tok.sum() / max(self.tau_tokens.sum(), 1),
            "v": v_tok.sum() / max(self.v_tokens.sum(), 1),
            "generate": frac,
        }
        for k, sec in self.cost.seconds.items():
            cost.seconds[k] = float(sec * shares.get(k, frac))
        return FrozenPass(
            ids=[self.ids[i] for i in idx],
            domains=[self.domains[i] for i in idx],
            model_id=self.model_id,
            answers=[self.answers[i] for i in idx],
            entropy=[self.entropy[i] for i in idx],
            surprisal=[self.surprisal[i] for i in idx],
            tau=self.tau[idx],
            v=self.v[idx],
            tau_tokens=tau_tok,
            v_tokens=v_tok,
            cost=cost,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FROZEN_FORMAT,
            "model_id": self.model_id,
            "ids": self.ids,
            "domains": self.domains,
            "answers": self.answers,
            "entropy": [e.tolist() for e in self.entropy],
            "surprisal": [s.tolist() for s in self.surprisal],
            "tau": self.tau.tolist(),
            "v": self.v.tolist(),
            "tau_tokens": self.tau_tokens.tolist(),
            "v_tokens": self.v_tokens.tolist(),
            "cost": self.cost.to_dict(),
        }

    def save(self, path: str | Path) -> Path:
        """Write the pass as JSON (floats round-trip exactly)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict()), encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | Path) -> FrozenPass:
        d = json.loads(Path(path).read_text(encoding="utf-8"))
        if d.get("format") != FROZEN_FORMAT:
            raise ValueError(f"{path}: not a SECL frozen-pass file (format {d.get('format')!r})")
        return cls(
            ids=list(d["ids"]),
            domains=list(d["domains"]),
            model_id=d["model_id"],
            answers=list(d["answers"]),
            entropy=[np.asarray(e, dtype=np.float64) for e in d["entropy"]],
            surprisal=[np.asarray(s, dtype=np.float64) for s in d["surprisal"]],
            tau=np.asarray(d["tau"], dtype=np.float64),
            v=np.asarray(d["v"], dtype=np.float64),
            tau_tokens=np.asarray(d["tau_tokens"], dtype=np.int64),
            v_tokens=np.asarray(d["v_tokens"], dtype=np.int64),
            cost=CostMeter.from_dict(d["cost"]),
        )


def frozen_pass(
    lm: HFModel, items: Sequence[StreamItem], batch_size: int = 8, progress: Progress | None = None
) -> FrozenPass:
    """Answers (with traces), τ and v of the base model for every question, in batches (labels not used)."""
    from tracecal.selfeval import verbalized_confidence

    if getattr(lm.model, "peft_config", None):
        raise RuntimeError("the model carries a peft adapter; the frozen pass needs the base model")
    cost = CostMeter()
    n = len(items)
    answers = _Answers([], [], [])
    for s in range(0, n, batch_size * 4):
        chunk = items[s : s + batch_size * 4]
        with cost.timer("generate"):
            a = _generate(lm, chunk, batch_size, cost)
        answers.texts += a.texts
        answers.entropy += a.entropy
        answers.surprisal += a.surprisal
        if progress:
            progress("answering", s + len(chunk), n)
    with cost.timer("tau"):
        tau, tau_tok = _tau(lm, items, answers.texts, batch_size)
    cost.add("tau", sum(tau_tok), passes=n)
    if progress:
        progress("tau", n, n)
    qs = [question_text(it.task, it.example) for it in items]
    with cost.timer("v"):
        v, _, _ = verbalized_confidence(lm, qs, answers.texts, batch_size=batch_size)
    v_tok = [len(p) + V_TOKENS_EXTRA for p in _vprompts(lm, items, answers.texts)]
    cost.add("v", sum(v_tok), passes=n)
    if progress:
        progress("v", n, n)
    return FrozenPass(
        ids=[it.id for it in items],
        domains=[it.domain for it in items],
        model_id=lm.model_id,
        answers=answers.texts,
        entropy=answers.entropy,
        surprisal=answers.surprisal,
        tau=np.asarray(tau, dtype=np.float64),
        v=np.asarray(v, dtype=np.float64),
        tau_tokens=np.asarray(tau_tok, dtype=np.int64),
        v_tokens=np.asarray(v_tok, dtype=np.int64),
        cost=cost,
    )


# ------------------------------------------------------------------------------------------ SECL pass


def run_secl(
    lm: HFModel,
    items: Sequence[StreamItem],
    cfg: SECLConfig | None = None,
    frozen: FrozenPass | None = None,
    progress: Progress | None = None,
    save_adapter: str | Path | None = None,
) -> SECLResult:
    """Run SECL over the stream (see the module docstring) and score it.

    Args:
        lm: the model (the LoRA adapter is attached for the run and removed afterwards).
        items: the stream (`build_stream`).
        cfg: SECL parameters (default `SECLConfig()`).
        frozen: a `FrozenPass` of the same stream and model (computed when None).
        progress: optional callback ``(stage, done, total)``.
        save_adapter: write the final LoRA adapter (safetensors) to this folder.
    """
    cfg = cfg or SECLConfig()
    items = list(items)
    n = len(items)
    if n == 0:
        raise ValueError("empty stream")
    if frozen is None:
        frozen = frozen_pass(lm, items, cfg.batch_size, progress)
    frozen.check(items, lm.model_id)
    t_frozen = frozen.cost.time()
    cost = CostMeter()
    gate = make_gate(cfg)
    rec: dict[str, Any] = {
        "stat": np.full(n, np.nan),
        "alarm": np.zeros(n, bool),
        "gate_open": np.zeros(n, bool),
        "burst": np.full(n, -1, np.int64),
        "updated": np.zeros(n, bool),
        "tau_used": np.full(n, np.nan),
        "v_before": np.full(n, np.nan),
        "v_secl": np.full(n, np.nan),
        "scale": np.full(n, np.nan),
        "grad_norm": np.full(n, np.nan),
        "loss": np.full(n, np.nan),
    }
    answers = list(frozen.answers)
    vprompts: list[list[int] | None] = [None] * n
    pending: list[int] = []
    discarded = 0
    t0 = time.perf_counter()
    with SECLAdapter(lm, cfg, cost) as adapter:

        def vprompt(i: int) -> list[int]:
            if vprompts[i] is None:
                vprompts[i] = _vprompts(lm, [items[i]], [answers[i]])[0]
            return vprompts[i]  # type: ignore[return-value]

        def flush() -> None:
            """v of the closed-gate questions seen since the last update, under the current adapter."""
            if not pending:
                return
            fresh = [i for i in pending if not (adapter.pristine and answers[i] == frozen.answers[i])]
            for i in pending:
                if i not in fresh:  # the model equals the base model: the frozen v is this v
                    rec["v_secl"][i] = frozen.v[i]
                    cost.add("v", int(frozen.v_tokens[i]))
            if fresh:
                with cost.timer("v"):
                    vs, _ = adapter.confidence([vprompt(i) for i in fresh])
                rec["v_secl"][fresh] = vs
            pending.clear()

        i = 0
        while i < n:
            regen = cfg.scope == "all" and not adapter.pristine
            in_burst = isinstance(gate, DetectorGate) and gate.remaining > 0
            size = 1 if regen and (in_burst or cfg.gate == "always") else cfg.batch_size
            chunk = list(range(i, min(n, i + size)))
            ent, sur = [frozen.entropy[j] for j in chunk], [frozen.surprisal[j] for j in chunk]
            if regen:
                with cost.timer("generate"):
                    a = _generate(lm, [items[j] for j in chunk], cfg.batch_size, cost)
                ent, sur = a.entropy, a.surprisal
                for j, text in zip(chunk, a.texts, strict=True):
                    answers[j], vprompts[j] = text, None
            else:
                cost.add("generate_reused", 0, passes=len(chunk))
            nxt = chunk[-1] + 1
            for k, j in enumerate(chunk):
                x = answer_statistic(ent[k], sur[k], cfg.statistic)
                step = gate.observe(x)
                rec["stat"][j], rec["alarm"][j], rec["burst"][j] = x, step.alarm, step.burst
                rec["gate_open"][j] = step.open
                if not step.open:
                    pending.append(j)
                    continue
                flush()
                if cfg.scope == "all" and not adapter.pristine:
                    with cost.timer("tau_gated"):
                        tau_j, tok = _tau(lm, [items[j]], [answers[j]], 1)
                    tau_j = float(tau_j[0])
                    cost.add("tau_gated", tok[0])
                else:  # the base model's τ (scope "confidence", or the adapter is still the base model)
                    tau_j = float(frozen.tau[j])
                    cost.add("tau_gated", int(frozen.tau_tokens[j]))
                with cost.timer("update"):
                    info = adapter.update(vprompt(j), tau_j)
                gate.feedback(info.updated)
                rec["tau_used"][j], rec["v_before"][j], rec["v_secl"][j] = tau_j, info.v_before, info.v_after
                rec["updated"][j] = info.updated
                if info.updated:
                    rec["scale"][j], rec["grad_norm"][j], rec["loss"][j] = info.scale, info.grad_norm, info.loss
                    if not cfg.accumulate:
                        adapter.reset()
                    if cfg.scope == "all" and not adapter.pristine and k + 1 < len(chunk):
                        discarded += len(chunk) - k - 1 if regen else 0
                        nxt = j + 1  # later answers of this chunk came from the model before the update
                        break
                if progress:
                    progress("secl", j + 1, n)
            i = nxt
            if progress:
                progress("secl", min(i, n), n)
        flush()
        adapter_info = adapter.describe()
        if save_adapter is not None:
            adapter.save(save_adapter)
    t_secl = time.perf_counter() - t0
    if discarded:
        cost.add("discarded_generate", 0, passes=discarded)
    # -------- scoring only: labels are computed here, after both passes
    y_frozen = np.array([it.task.label(it.example, a) for it, a in zip(items, frozen.answers, strict=True)])
    if cfg.scope == "all":
        y_secl = np.array([it.task.label(it.example, a) for it, a in zip(items, answers, strict=True)])
    else:
        y_secl = y_frozen.copy()
    return SECLResult(
        config=cfg,
        ids=[it.id for it in items],
        domains=[it.domain for it in items],
        model_id=lm.model_id,
        label_rules={it.domain: it.task.label_rule for it in items},
        v_frozen=frozen.v.copy(),
        tau=frozen.tau.copy(),
        y_frozen=y_frozen,
        y_secl=y_secl,
        answers_frozen=list(frozen.answers),
        answers_secl=answers,
        records=rec,
        frozen_cost=frozen.cost,
        secl_cost=cost,
        adapter=adapter_info,
        seconds={"frozen_pass": t_frozen, "secl_pass": t_secl},
    )


# ------------------------------------------------------------------------------------------ result


def _metrics(y: np.ndarray, p: np.ndarray) -> dict[str, float]:
    from tracecal.metrics import auroc, brier, ece

    p = np.clip(np.asarray(p, dtype=np.float64), 0.0, 1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {
            "n": int(len(y)),
            "ece": float(ece(y, p)),
            "brier": float(brier(y, p)),
            "auroc": float(auroc(y, p)),
            "acc": float(np.mean(y)),
            "mean_conf": float(np.mean(p)),
        }


@dataclass
class SECLResult:
    """Everything a SECL run produced; labels (``y_*``) are for scoring only."""

    config: SECLConfig
    ids: list[str]
    domains: list[str]
    model_id: str
    label_rules: dict[str, str]
    v_frozen: np.ndarray
    tau: np.ndarray
    y_frozen: np.ndarray
    y_secl: np.ndarray
    answers_frozen: list[str]
    answers_secl: list[str]
    records: dict[str, np.ndarray]
    frozen_cost: CostMeter
    secl_cost: CostMeter
    adapter: dict[str, Any]
    seconds: dict[str, float]

    @property
    def v_secl(self) -> np.ndarray:
        return np.asarray(self.records["v_secl"])

    @property
    def domain_names(self) -> list[str]:
        return list(dict.fromkeys(self.domains))

    def _mask(self, domain: str) -> np.ndarray:
        d = np.asarray(self.domains)
        return np.ones(len(d), bool) if domain == "overall" else d == domain

    def metrics(self) -> dict[str, dict[str, dict[str, float]]]:
        """``{domain | "overall": {method: {n, ece, brier, auroc, acc, mean_conf}}}`` for frozen v, τ, SECL v."""
        out: dict[str, dict[str, dict[str, float]]] = {}
        for dom in [*self.domain_names, "overall"]:
            m = self._mask(dom)
            out[dom] = {
                "frozen_v": _metrics(self.y_frozen[m], self.v_frozen[m]),
                "tau": _metrics(self.y_frozen[m], self.tau[m]),
                "secl_v": _metrics(self.y_secl[m], self.v_secl[m]),
            }
        return out

    def trained_share(self, domain: str = "overall") -> float:
        """Share of the stream's questions with an update (trained on)."""
        m = self._mask(domain)
        return float(np.mean(self.records["updated"][m]))

    def gated_share(self, domain: str = "overall") -> float:
        """Share of questions inside an open gate (τ read)."""
        m = self._mask(domain)
        return float(np.mean(self.records["gate_open"][m]))

    def cost_summary(self) -> dict[str, float]:
        """SECL's overhead (τ on gated questions + backward + re-reads) relative to τ on every question.

        ``overhead_vs_tau_all`` is in token-forwards; ``overhead_time_vs_tau_all`` in measured seconds (τ read
        from the frozen pass is charged its proportional share of the frozen pass's τ time).
        """
        c = self.secl_cost
        tau_all = self.frozen_cost.cost("tau")
        overhead = c.cost(*OVERHEAD_KINDS)
        t_tau_all = self.frozen_cost.time("tau")
        share = c.forward_tokens.get("tau_gated", 0) / max(tau_all, 1)
        t_tau_gated = c.seconds.get("tau_gated", 0.0) or share * t_tau_all
        t_over = t_tau_gated + c.seconds.get("update", 0.0)
        return {
            "tau_all_cost": float(tau_all),
            "overhead_cost": float(overhead),
            "overhead_vs_tau_all": float(overhead / tau_all) if tau_all else float("nan"),
            "base_pipeline_cost": float(self.frozen_cost.cost("generate", "v")),
            "overhead_vs_base_pipeline": float(overhead / max(self.frozen_cost.cost("generate", "v"), 1)),
            "tau_all_seconds": float(t_tau_all),
            "overhead_seconds": float(t_over),
            "overhead_time_vs_tau_all": float(t_over / t_tau_all) if t_tau_all else float("nan"),
        }

    def summary(self) -> dict[str, Any]:
        """Headline numbers: ECE of frozen v / τ / SECL v, ECE reduction, trained share, cost ratio."""
        m = self.metrics()["overall"]
        e0, e1 = m["frozen_v"]["ece"], m["secl_v"]["ece"]
        return {
            "n": len(self.ids),
            "ece_frozen_v": e0,
            "ece_tau": m["tau"]["ece"],
            "ece_secl_v": e1,
            "ece_reduction": float(1.0 - e1 / e0) if e0 > 0 else float("nan"),
            "trained_share": self.trained_share(),
            "gated_share": self.gated_share(),
            "updates": int(np.sum(self.records["updated"])),
            "bursts": int(len(set(self.records["burst"][self.records["gate_open"]].tolist()))),
            "alarms": [int(i) for i in np.flatnonzero(self.records["alarm"])],
            **self.cost_summary(),
            "seconds": dict(self.seconds),
        }

    def to_records(self) -> list[dict[str, Any]]:
        """One dict per question (for a DataFrame or CSV)."""
        rows = []
        for i in range(len(self.ids)):
            r: dict[str, Any] = {
                "id": self.ids[i],
                "domain": self.domains[i],
                "answer": self.answers_frozen[i],
                "y": int(self.y_frozen[i]),
                "v_frozen": float(self.v_frozen[i]),
                "tau": float(self.tau[i]),
            }
            for k, arr in self.records.items():
                x = arr[i]
                r[k] = bool(x) if isinstance(x, np.bool_) else (int(x) if isinstance(x, np.integer) else float(x))
            if self.config.scope == "all":
                r["answer_secl"] = self.answers_secl[i]
                r["y_secl"] = int(self.y_secl[i])
            rows.append(r)
        return rows

    def to_frame(self) -> Any:
        """The per-question records as a pandas DataFrame (needs pandas)."""
        import pandas as pd

        return pd.DataFrame(self.to_records())

    def to_dict(self) -> dict[str, Any]:
        def clean(x: Any) -> Any:
            if isinstance(x, float) and not math.isfinite(x):
                return None
            if isinstance(x, dict):
                return {k: clean(v) for k, v in x.items()}
            if isinstance(x, list):
                return [clean(v) for v in x]
            return x

        return clean(
            {
                "model_id": self.model_id,
                "config": self.config.to_dict(),
                "stream": {d: int(np.sum(self._mask(d))) for d in self.domain_names},
                "label_rules": self.label_rules,
                "summary": self.summary(),
                "metrics": self.metrics(),
                "trained_share": {d: self.trained_share(d) for d in [*self.domain_names, "overall"]},
                "cost": {"frozen_pass": self.frozen_cost.to_dict(), "secl_pass": self.secl_cost.to_dict()},
                "adapter": self.adapter,
                "questions": self.to_records(),
            }
        )

    def to_json(self, path: str | Path | None = None) -> str:
        """The result as JSON (NaN → null); written to ``path`` when given."""
        s = json.dumps(self.to_dict(), indent=1)
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(s, encoding="utf-8")
        return s
