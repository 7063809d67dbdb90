"""The result of a SECL run and its scoring (docs/method.md §6 "Report").

`SECLRecord` is what the run records per question (one numpy array per field); `SECLResult` holds it with the
frozen baselines, the answers, the labels and the costs, and scores frozen v, τ and SECL v (ECE, Brier,
AUROC, accuracy, per domain and overall), the share of the stream trained on, and SECL's compute overhead
relative to computing τ for every question. Labels are computed only after both passes, for scoring.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from tracecal._outputs import InputPaths, atomic_write
from tracecal.secl.config import SECLConfig
from tracecal.secl.cost import CostMeter

__all__ = ["SECLRecord", "SECLResult", "METHODS", "BASE_KINDS", "OVERHEAD_KINDS"]

METHODS = ("frozen_v", "tau", "secl_v")
BASE_KINDS = ("generate", "v", "v_grad")  # what answering + verbalising costs with or without SECL
OVERHEAD_KINDS = ("tau_gated", "train", "reread")  # what SECL adds


@dataclass
class SECLRecord:
    """What a SECL run records per question: one array of length n per field.

    ``stat``: the detector's input x_i (NaN for an empty answer); ``alarm``: the detector fired on i;
    ``gate_open``: i was let through (τ read, an update possible); ``burst``: the id of i's burst (−1 outside);
    ``updated``: a LoRA step was taken on i; ``tau_used``, ``v_before``: the target and v before the step
    (questions let through); ``v_secl``: SECL's confidence for i; ``scale``, ``grad_norm``, ``loss``: of the
    step (updated questions). NaN where a field does not apply.
    """

    stat: np.ndarray
    alarm: np.ndarray
    gate_open: np.ndarray
    burst: np.ndarray
    updated: np.ndarray
    tau_used: np.ndarray
    v_before: np.ndarray
    v_secl: np.ndarray
    scale: np.ndarray
    grad_norm: np.ndarray
    loss: np.ndarray

    @classmethod
    def empty(cls, n: int) -> SECLRecord:
        """A record of n questions with nothing observed yet."""
        return cls(
            stat=np.full(n, np.nan),
            alarm=np.zeros(n, bool),
            gate_open=np.zeros(n, bool),
            burst=np.full(n, -1, np.int64),
            updated=np.zeros(n, bool),
            tau_used=np.full(n, np.nan),
            v_before=np.full(n, np.nan),
            v_secl=np.full(n, np.nan),
            scale=np.full(n, np.nan),
            grad_norm=np.full(n, np.nan),
            loss=np.full(n, np.nan),
        )

    def __len__(self) -> int:
        return len(self.stat)

    def as_dict(self) -> dict[str, np.ndarray]:
        """The fields by name, in declaration order."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def row(self, i: int) -> dict[str, bool | int | float]:
        """Question i's values as Python scalars."""
        out: dict[str, bool | int | float] = {}
        for k, arr in self.as_dict().items():
            x = arr[i]
            out[k] = bool(x) if isinstance(x, np.bool_) else (int(x) if isinstance(x, np.integer) else float(x))
        return out


def _metrics(y: np.ndarray, p: np.ndarray) -> dict[str, float]:
    from tracecal.stats.metrics import auroc, brier, ece

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
    records: SECLRecord
    frozen_cost: CostMeter
    secl_cost: CostMeter
    adapter: dict[str, Any]
    seconds: dict[str, float]
    dtype: str = "float32"

    @property
    def v_secl(self) -> np.ndarray:
        return np.asarray(self.records.v_secl)

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
        return float(np.mean(self.records.updated[m]))

    def gated_share(self, domain: str = "overall") -> float:
        """Share of questions inside an open gate (τ read)."""
        m = self._mask(domain)
        return float(np.mean(self.records.gate_open[m]))

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
            "updates": int(np.sum(self.records.updated)),
            "bursts": int(len(set(self.records.burst[self.records.gate_open].tolist()))),
            "alarms": [int(i) for i in np.flatnonzero(self.records.alarm)],
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
            r.update(self.records.row(i))
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
                "dtype": self.dtype,
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

    def to_json(self, path: str | Path | None = None, inputs: InputPaths = ()) -> str:
        """The result as JSON (NaN → null); written to ``path`` when given, with `tracecal._outputs.atomic_write`
        (never half-written, never over one of ``inputs``)."""
        s = json.dumps(self.to_dict(), indent=1)
        if path is not None:
            atomic_write(path, lambda tmp: Path(tmp).write_text(s, encoding="utf-8"), inputs, "--out")
        return s
