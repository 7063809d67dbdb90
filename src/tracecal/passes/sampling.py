"""The sampling pass: K answers per question drawn at temperature T, every one with its trace, and what they cost.

The black-box reference the single-pass estimators are compared with (self-consistency, semantic entropy; what
LM-Polygraph, UQLM and TruthTorchLM ship as their strongest sampling scores). Defaults K = 10, T = 1.0: the
discrete semantic entropy of Farquhar et al. (Nature 2024) samples 10 answers at temperature 1 (Kuhn et al. 2023
found 0.5 best for their models; T is a parameter). No top-k / top-p truncation: the samples are drawn from
softmax(x_t / T), the distribution each sample's trace records.

Per question the pass stores (`SamplesPass.to_table`):

* the stats estimators read, each a vector over the K samples in the order drawn: ``sample_agree`` (1 iff sample j
  is correct under the task's labeller with the greedy answer in the gold's place: `Labeller.agrees`),
  ``sample_cluster`` (the index of the first sample of j's cluster: `answer_clusters`) and ``sample_trace`` (the
  TRACE confidence of sample j, docs/method.md §2 with its default operators; NaN for an empty sample);
* the cost of drawing them (one value per question, `tracecal.backends.base.SampleSet`): ``sample_prefill_tokens``,
  ``sample_decode_tokens``, ``sample_answer_tokens``, ``sample_forward_passes``, ``sample_cpu_seconds``,
  ``sample_wall_seconds``;
* every sample's trace (`RAW_COLUMNS`): text, token ids and strings, s_t, H_t (nats) and stop reason.

Because sample j's cluster depends only on samples 0 … j, the first k entries of each vector are exactly what k
samples would give: estimators read K ∈ {2, 5, 10} from one set of 10 samples. Each question's samples are drawn
with torch's generator seeded by `question_seed` (the run's sample seed and the question id), so a shard computed
again (a resumed or repeated run) holds the same answers.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from tracecal.backends.base import BackendUnsupportedError
from tracecal.backends.registry import SAMPLING
from tracecal.passes.base import ANSWER, VECTOR, Pass, register_pass
from tracecal.signals.operators import trace_confidence
from tracecal.traces.trace import Trace, TraceBatch

__all__ = ["SamplesPass", "answer_clusters", "question_seed", "COST_STATS", "RAW_COLUMNS"]

COST_STATS = (
    "sample_prefill_tokens",
    "sample_decode_tokens",
    "sample_answer_tokens",
    "sample_forward_passes",
    "sample_cpu_seconds",
    "sample_wall_seconds",
)
"""The per-question cost columns (one float each; `tracecal.backends.base.SampleSet` defines them)."""
RAW_COLUMNS = {
    "sample_text": pa.list_(pa.string()),
    "sample_token_ids": pa.list_(pa.list_(pa.int64())),
    "sample_tokens": pa.list_(pa.list_(pa.string())),
    "sample_surprisal": pa.list_(pa.list_(pa.float64())),
    "sample_entropy": pa.list_(pa.list_(pa.float64())),
    "sample_stop_reason": pa.list_(pa.string()),
}
"""The traces of the samples, one list of K per question (Arrow types)."""


def question_seed(seed: int, task: str, qid: str) -> int:
    """The seed of one question's samples: the first 63 bits of SHA-256 of ``"seed/task/id"`` (independent of the
    question's position, its shard and the order shards are computed in)."""
    digest = hashlib.sha256(f"{int(seed)}/{task}/{qid}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def answer_clusters(answers: Sequence[str], agrees: Callable[[str, str], int]) -> np.ndarray:
    """Cluster answers in order: answer j joins the first cluster whose first member r satisfies
    ``agrees(r, j)`` (r in the gold's place, j as the answer), else starts its own. Returns, per answer, the index
    of its cluster's first member (so clusters of a prefix of ``answers`` are the prefix of the result).

    >>> answer_clusters(["Paris", "paris.", "Lyon", "Paris, France"], lambda r, a: int(r.lower()[:4] in a.lower()))
    array([0, 0, 2, 0])
    """
    heads: list[int] = []
    out = np.empty(len(answers), dtype=np.int64)
    for j, a in enumerate(answers):
        head = next((h for h in heads if agrees(answers[h], a)), None)
        if head is None:
            heads.append(j)
            head = j
        out[j] = head
    return out


@register_pass
class SamplesPass(Pass):
    """K answers per question sampled at temperature T (module docstring); opt-in: estimators ``sampling``."""

    name = "samples"
    provides = {
        "sample_agree": VECTOR,
        "sample_cluster": VECTOR,
        "sample_trace": VECTOR,
        **dict.fromkeys(COST_STATS, ANSWER),
    }
    cost_weight = 4.0  # K = 10: ≈ 74 against ≈ 20 CPU-s per question for greedy (Qwen bf16 TriviaQA, 8-question smoke)
    description = "K answers sampled at temperature T per question, each with its trace (self-consistency, SE)"
    requires = frozenset({SAMPLING})  # K answers with a shared prompt cache: the HF and llama.cpp backends

    def __init__(
        self, num_samples: int = 10, temperature: float = 1.0, seed: int = 0, max_new_tokens: int | None = None
    ) -> None:
        self.num_samples, self.temperature, self.seed = num_samples, temperature, seed
        self.max_new_tokens = max_new_tokens

    @classmethod
    def from_config(cls, cfg: Any) -> SamplesPass:
        return cls(cfg.num_samples, cfg.sample_temperature, cfg.sample_seed, cfg.max_new_tokens)

    def compute(self, model: Any, task: Any, examples: Sequence[Any], traces: Sequence[Any]) -> dict[str, Any]:
        """The K samples of each question (``traces``: the greedy answers, compared with them)."""
        if not hasattr(model, "sample_answers"):
            raise BackendUnsupportedError(
                f"{type(model).__name__} cannot draw K samples per prompt: use --backend hf or llamacpp"
            )
        sets = model.sample_answers(
            [task.prompt(ex, chat=model.chat) for ex in examples],
            self.num_samples,
            self.max_new_tokens or task.max_new_tokens,
            temperature=self.temperature,
            stop_strings=tuple(task.stop_strings(model.chat)),
            seeds=[question_seed(self.seed, task.name, ex.id) for ex in examples],
        )
        cols: dict[str, Any] = {c: [] for c in (*self.provides, *RAW_COLUMNS)}
        for ex, greedy, got in zip(examples, traces, sets, strict=True):
            self._add(cols, task, ex, greedy.text, got.traces)
            for stat in COST_STATS:
                cols[stat].append(got.cost[stat.removeprefix("sample_")])
        return cols

    @staticmethod
    def _add(cols: dict[str, Any], task: Any, example: Any, greedy: str, samples: list[Trace]) -> None:
        """Append one question's samples: agreement with the greedy answer, clusters, TRACE and the traces."""
        texts = [t.text for t in samples]
        agrees = lambda ref, ans: task.labeller.agrees(example, ref, ans)  # noqa: E731
        cols["sample_agree"].append([agrees(greedy, a) for a in texts])
        cols["sample_cluster"].append(answer_clusters(texts, agrees))
        cols["sample_trace"].append(trace_confidence(TraceBatch.from_traces(samples)))
        cols["sample_text"].append(texts)
        cols["sample_token_ids"].append([t.token_ids.tolist() for t in samples])
        cols["sample_tokens"].append([list(t.token_strings) for t in samples])
        cols["sample_surprisal"].append([t.surprisal.tolist() for t in samples])
        cols["sample_entropy"].append([t.entropy.tolist() for t in samples])
        cols["sample_stop_reason"].append([t.stop_reason for t in samples])

    def to_table(self, ids: Sequence[str], columns: dict[str, Any]) -> pa.Table:
        """The stats (`Pass.to_table`: validated) followed by the samples' traces (`RAW_COLUMNS`)."""
        table = super().to_table(ids, columns)
        for name, typ in RAW_COLUMNS.items():
            table = table.append_column(pa.field(name, typ), pa.array(columns[name], type=typ))
        return table
