"""`tracecal.estimators.sampling`: self-consistency, semantic entropy and the samples' TRACE at K = 2, 5, 10."""

from __future__ import annotations

import numpy as np
import pytest

from tracecal.estimators import REGISTRY, Inputs, default_estimators, get_estimator, needs_of, resolve_estimators
from tracecal.estimators.sampling import SAMPLE_KS, agreement, cluster_entropy, trace_max, trace_mean
from tracecal.evaluation.config import EvalConfig
from tracecal.passes.sampling import answer_clusters
from tracecal.traces.trace import TraceBatch

KINDS = ("self_consistency", "semantic_entropy", "sample_trace_mean", "sample_trace_max")


def _inputs(n: int, **stats: np.ndarray) -> Inputs:
    return Inputs(TraceBatch.from_lists([[0.1]] * n, [[0.2]] * n), stats=stats)


def test_cluster_counts_give_the_entropy_of_their_shares() -> None:
    c = np.array([[0, 0, 0, 0], [0, 1, 2, 3], [0, 0, 2, 2], [0, 1, 1, 1]])
    assert np.allclose(cluster_entropy(c, 4), [0.0, np.log(4), np.log(2), -(0.25 * np.log(0.25) + 0.75 * np.log(0.75))])
    assert np.allclose(cluster_entropy(c, 2), [0.0, np.log(2), 0.0, np.log(2)])
    est = get_estimator("semantic_entropy_k2")
    assert np.allclose(est.score(_inputs(4, sample_cluster=c)), -cluster_entropy(c, 2))


def test_agreement_is_the_share_of_agreeing_samples() -> None:
    a = np.array([[1, 1, 0, 0, 1], [0, 0, 0, 0, 0]])
    assert np.allclose(agreement(a, 5), [0.6, 0.0]) and np.allclose(agreement(a, 2), [1.0, 0.0])
    assert np.allclose(get_estimator("self_consistency_k5").score(_inputs(2, sample_agree=a)), [0.6, 0.0])


def test_trace_mean_and_max_skip_empty_samples() -> None:
    t = np.array([[0.2, np.nan, 0.8, 0.1, 0.5], [np.nan] * 5])
    assert np.allclose(trace_mean(t, 2)[:1], [0.2]) and np.isclose(trace_max(t, 5)[0], 0.8)
    assert np.isnan(trace_mean(t, 5)[1]) and np.isnan(trace_max(t, 2)[1])


def test_k_subsets_of_ten_samples_equal_k_samples_drawn_alone() -> None:
    """Each K ∈ {2, 5, 10} read from one set of 10 samples equals the estimator computed from the first K directly."""
    rng = np.random.default_rng(1)
    rule = lambda r, a: int(r == a)  # noqa: E731
    answers = [[str(x) for x in rng.integers(0, 4, 10)] for _ in range(30)]
    greedy = [str(x) for x in rng.integers(0, 4, 30)]
    agree = np.array([[rule(g, a) for a in row] for g, row in zip(greedy, answers, strict=True)])
    clusters = np.array([answer_clusters(row, rule) for row in answers])
    trace = rng.uniform(0, 1, (30, 10))
    ten = _inputs(30, sample_agree=agree, sample_cluster=clusters, sample_trace=trace)
    for k in SAMPLE_KS:
        alone_clusters = np.array([answer_clusters(row[:k], rule) for row in answers])
        alone = _inputs(30, sample_agree=agree[:, :k], sample_cluster=alone_clusters, sample_trace=trace[:, :k])
        for kind in KINDS:
            est = get_estimator(f"{kind}_k{k}")
            assert np.allclose(est.score(ten), est.score(alone)), (kind, k)
        direct_entropy = [-sum(p * np.log(p) for p in np.unique(row[:k], return_counts=True)[1] / k) for row in answers]
        assert np.allclose(-get_estimator(f"semantic_entropy_k{k}").score(ten), direct_entropy)
        assert np.allclose(get_estimator(f"sample_trace_max_k{k}").score(ten), trace[:, :k].max(1))


def test_too_few_samples_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="needs 10 samples per question; the run drew 5"):
        get_estimator("self_consistency_k10").score(_inputs(1, sample_agree=np.ones((1, 5))))


def test_sampling_estimators_are_opt_in() -> None:
    names = [f"{kind}_k{k}" for kind in KINDS for k in SAMPLE_KS]
    assert set(names) <= set(REGISTRY) and all(REGISTRY[n].opt_in and REGISTRY[n].family == "sampling" for n in names)
    assert not set(names) & set(resolve_estimators("all")) and not set(names) & set(default_estimators())
    assert not set(names) & set(EvalConfig(tasks=["triviaqa"]).estimators)
    assert set(resolve_estimators("sampling")) == set(names) == set(resolve_estimators("samples"))
    assert resolve_estimators("trace,semantic_entropy_k5") == ["trace", "semantic_entropy_k5"]
    assert needs_of(["self_consistency_k2"]) == ["traces", "samples"]
