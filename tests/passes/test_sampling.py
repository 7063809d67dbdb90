"""`tracecal.passes.sampling`: K samples per question with their traces, agreement, clusters, cost, resumable."""

from __future__ import annotations

import doctest
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

import tracecal.passes.sampling as sampling
from tracecal.backends.base import BackendUnsupportedError, SampleSet
from tracecal.evaluation.config import EvalConfig
from tracecal.evaluation.run import evaluate
from tracecal.passes import PASSES
from tracecal.passes.sampling import COST_STATS, RAW_COLUMNS, SamplesPass, answer_clusters, question_seed
from tracecal.signals.operators import trace_confidence
from tracecal.tasks import get_task
from tracecal.tasks.example import Example
from tracecal.traces.trace import Trace, TraceBatch

COSTS = {"prefill_tokens": 5.0, "decode_tokens": 8.0, "answer_tokens": 6.0, "forward_passes": 3.0}


class Scripted:
    """A backend whose samples are given texts (one token per character, s_t = 0.1, H_t = 0.2)."""

    chat = True

    def __init__(self, texts: list[list[str]]) -> None:
        self.texts: list[list[str]] = texts
        self.calls: list[dict[str, Any]] = []

    def sample_answers(self, prompts: list[Any], k: int, max_new_tokens: int, **kw: Any) -> list[SampleSet]:
        self.calls.append({"k": k, "max_new_tokens": max_new_tokens, **kw})
        out = []
        for texts in self.texts[: len(prompts)]:
            traces = [
                Trace(text=t, token_ids=[1] * len(t), surprisal=[0.1] * len(t), entropy=[0.2] * len(t))
                for t in texts[:k]
            ]
            out.append(SampleSet(traces, COSTS | {"cpu_seconds": 0.5, "wall_seconds": 0.6}))
        return out


def _trace(text: str) -> Trace:
    """One token per character, s_t = 0.1, H_t = 0.2 nats."""
    n = len(text)
    return Trace(text=text, token_ids=np.ones(n, np.int64), surprisal=np.full(n, 0.1), entropy=np.full(n, 0.2))


def _greedy(text: str) -> Trace:
    return _trace(text)


def test_module_doctests_and_registration() -> None:
    assert doctest.testmod(sampling).failed == 0
    assert PASSES["samples"] is SamplesPass and SamplesPass.depends == ("traces",)
    assert set(COST_STATS) <= set(SamplesPass.provides) and SamplesPass.requires == {"sampling"}


def test_question_seed_is_fixed_by_seed_task_and_id_only() -> None:
    assert question_seed(0, "triviaqa", "q1") == question_seed(0, "triviaqa", "q1")
    seeds = {question_seed(s, t, q) for s in (0, 1) for t in ("a", "b") for q in ("q1", "q2")}
    assert len(seeds) == 8 and all(0 <= s < 2**63 for s in seeds)


def test_clusters_of_a_prefix_are_the_prefix_of_the_clusters() -> None:
    rng = np.random.default_rng(0)
    rule = lambda r, a: int(r[0] == a[0])  # noqa: E731  (same first letter)
    for _ in range(20):
        answers = ["".join(rng.choice(list("abc"), 2)) for _ in range(10)]
        full = answer_clusters(answers, rule)
        assert all(np.array_equal(answer_clusters(answers[:k], rule), full[:k]) for k in range(1, 11))
        assert all(answers[h][0] == a[0] for h, a in zip(full, answers, strict=True))
        assert len(set(full)) == len({a[0] for a in answers})


def test_agreement_clusters_trace_and_cost_on_triviaqa() -> None:
    task = get_task("triviaqa")
    ex = [Example(id="q1", task="triviaqa", question="Capital of France?", golds=["Paris"])]
    samples = [["Paris", "paris!", "Lyon", "The city of Paris", "", "Lyon."]]
    m = Scripted(samples)
    cols = SamplesPass(num_samples=6, temperature=0.7, seed=3).compute(m, task, ex, [_greedy("Paris")])
    assert cols["sample_agree"] == [[1, 1, 0, 1, 0, 0]]
    assert cols["sample_cluster"][0].tolist() == [0, 0, 2, 0, 4, 2]  # the empty sample is its own cluster
    direct = trace_confidence(TraceBatch.from_traces(m.sample_answers(["p"], 6, 8)[0].traces))
    assert np.isnan(cols["sample_trace"][0][4]) and np.allclose(cols["sample_trace"][0], direct, equal_nan=True)
    assert m.calls[0]["temperature"] == 0.7 and m.calls[0]["seeds"] == [question_seed(3, "triviaqa", "q1")]
    assert m.calls[0]["max_new_tokens"] == task.max_new_tokens
    table = SamplesPass(num_samples=6).to_table(["q1"], cols)
    assert table.column("sample_cpu_seconds").to_pylist() == [0.5]
    assert table.column("sample_decode_tokens").to_pylist() == [8.0]
    assert table.column("sample_text").to_pylist() == samples
    assert table.column("sample_surprisal").to_pylist()[0][2] == [0.1] * 4
    assert set(RAW_COLUMNS) | set(SamplesPass.provides) | {"id"} == set(table.column_names)


def test_a_greedy_answer_without_a_number_agrees_with_no_sample() -> None:
    task = get_task("svamp")
    ex = [Example(id="s1", task="svamp", question="3+9?", golds=["12"])]
    m = Scripted([["3 + 9 = 12", "12", "It is 13", "twelve"]])
    cols = SamplesPass(num_samples=4).compute(m, task, ex, [_greedy("I am not sure")])
    assert cols["sample_agree"] == [[0, 0, 0, 0]] and cols["sample_cluster"][0].tolist() == [0, 0, 2, 3]
    cols = SamplesPass(num_samples=4).compute(m, task, ex, [_greedy("The answer is 12.")])
    assert cols["sample_agree"] == [[1, 1, 0, 0]]


def test_a_backend_that_cannot_sample_says_so() -> None:
    task = get_task("triviaqa")
    ex = [Example(id="q1", task="triviaqa", question="?", golds=["a"])]
    with pytest.raises(BackendUnsupportedError, match="--backend hf"):
        SamplesPass().compute(object(), task, ex, [_greedy("a")])


def test_samples_of_the_tiny_model_are_resumed_identically(tmp_path: Path, tiny_model) -> None:  # type: ignore[no-untyped-def]
    """A shard computed, deleted and computed again holds the same samples (seeded per question)."""
    run = tmp_path / "run"
    settings: dict[str, Any] = {"limit": 8, "n_seeds": 2, "shard_size": 4, "max_new_tokens": 5, "batch_size": 4}
    sampling: dict[str, Any] = {"num_samples": 10, "sample_temperature": 3.0, "sample_seed": 7}
    cfg = lambda: EvalConfig(tasks=["triviaqa"], estimators=["trace", "sampling"], **settings, **sampling)  # noqa: E731
    res = evaluate(run, cfg(), model=tiny_model)
    assert res is not None and "semantic_entropy_k5" in res.metrics["triviaqa"]
    shard = run / "samples" / "triviaqa" / "00001.parquet"
    first = pq.read_table(shard)
    assert first.num_rows == 4 and all(len(t) == 10 for t in first.column("sample_text").to_pylist())
    assert len({tuple(t) for t in first.column("sample_text").to_pylist()}) > 1  # T = 3: the samples differ
    for stat in COST_STATS:
        assert all(v > 0 for v in first.column(stat).to_pylist()), stat
    shard.unlink()
    evaluate(run, cfg(), model=tiny_model)
    again = pq.read_table(shard)
    for name in first.column_names:
        if name not in ("sample_cpu_seconds", "sample_wall_seconds"):
            assert repr(again.column(name).to_pylist()) == repr(first.column(name).to_pylist()), name  # NaN too
