"""Sampling estimators: confidences from K answers sampled per question (the ``samples`` pass,
`tracecal.passes.sampling`), each read at K ∈ {2, 5, 10} from the first K of the same 10 samples.

All higher = more confident. With a_j = 1 iff sample j agrees with the greedy answer (`Labeller.agrees`: the task's
own rule with the greedy answer in the gold's place), c_j the cluster of sample j and TRACE_j its TRACE confidence:

* ``self_consistency_kK`` = (1/K)·Σ_{j<K} a_j (Wang et al. 2023's agreement, scored against the answer given);
* ``semantic_entropy_kK`` = −SE, SE = −Σ_c p_c·ln p_c over the clusters of the first K samples, p_c = their share
  (the discrete semantic entropy of Farquhar et al. 2024, nats). The clusters come from the task's labeller rule
  (`tracecal.passes.sampling.answer_clusters`), not from an NLI model's bidirectional entailment: no NLI model is
  installed here (the package index offers none offline), and for these tasks the rule is what decides correctness
  (alias containment, numeric match), so two samples it cannot tell apart are one answer for the evaluation too;
* ``sample_trace_mean_kK`` / ``sample_trace_max_kK`` = the mean / max of TRACE_j over the first K samples (empty
  samples skipped; NaN when all are empty).

They are opt-in (`Estimator.opt_in`): ``all`` and the default selection leave them out, since their pass costs K
generations per question; ``--estimators sampling`` (or ``samples``, the pass's name) selects them.
"""

from __future__ import annotations

import warnings
from typing import Any, ClassVar

import numpy as np

from tracecal.errors import ValidationError
from tracecal.estimators.base import Estimator, Inputs, register

__all__ = ["SAMPLE_KS", "SamplingEstimator", "agreement", "cluster_entropy", "trace_mean", "trace_max"]

SAMPLE_KS = (2, 5, 10)
"""The numbers of samples each sampling estimator is registered for (names end in ``_k2``, ``_k5``, ``_k10``)."""


def _first(x: np.ndarray, k: int, name: str) -> np.ndarray:
    """The first ``k`` columns of an (n, K) stat; a clear error when fewer than ``k`` samples were drawn."""
    x = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
    if x.shape[1] < k:
        raise ValidationError(f"{name} needs {k} samples per question; the run drew {x.shape[1]} (raise --num-samples)")
    return x[:, :k]


def agreement(agree: np.ndarray, k: int) -> np.ndarray:
    """Share of the first ``k`` samples that agree with the greedy answer, per question."""
    return _first(agree, k, "self-consistency").mean(axis=1)


def cluster_entropy(clusters: np.ndarray, k: int) -> np.ndarray:
    """−Σ_c p_c·ln p_c (nats) of the cluster shares of the first ``k`` samples, per question (0: one cluster)."""
    c = _first(clusters, k, "semantic entropy").astype(np.int64)
    counts = (c[:, :, None] == np.arange(k)[None, None, :]).sum(axis=1)  # cluster ids are sample indices < k
    p = counts / k
    return -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0), axis=1)


def _nan_reduce(f: Any, x: np.ndarray) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all samples empty: NaN (mapped to least confident)
        return np.asarray(f(x, axis=1), dtype=np.float64)


def trace_mean(traces: np.ndarray, k: int) -> np.ndarray:
    """Mean TRACE confidence of the first ``k`` samples (empty samples skipped)."""
    return _nan_reduce(np.nanmean, _first(traces, k, "sample TRACE"))


def trace_max(traces: np.ndarray, k: int) -> np.ndarray:
    """Largest TRACE confidence of the first ``k`` samples (empty samples skipped)."""
    return _nan_reduce(np.nanmax, _first(traces, k, "sample TRACE"))


class SamplingEstimator(Estimator):
    """Reads one stat of the samples pass (``field``) and reduces its first ``k`` columns with ``reduce``."""

    family = "sampling"
    opt_in = True
    field: ClassVar[str] = ""
    k: ClassVar[int] = 0
    reduce: ClassVar[Any] = None

    @classmethod
    def refuses(cls, settings: Any) -> str | None:
        """A run that draws fewer than ``k`` samples per question cannot give this estimator (`_first`)."""
        drawn = getattr(settings, "num_samples", None)
        if isinstance(drawn, int) and drawn < cls.k:
            return f"needs {cls.k} samples per question and --num-samples {drawn} draws {drawn}"
        return None

    def score(self, inputs: Inputs) -> np.ndarray:
        return np.asarray(type(self).reduce(inputs.stat(self.field), self.k), dtype=np.float64)


KINDS = {
    "self_consistency": ("sample_agree", agreement, "self-consistency: share of {k} samples agreeing with the answer"),
    "semantic_entropy": ("sample_cluster", lambda c, k: -cluster_entropy(c, k), "−semantic entropy of {k} samples"),
    "sample_trace_mean": ("sample_trace", trace_mean, "mean TRACE confidence of {k} sampled answers"),
    "sample_trace_max": ("sample_trace", trace_max, "largest TRACE confidence of {k} sampled answers"),
}


def _register(kind: str, k: int) -> type[Estimator]:
    field, reduce, text = KINDS[kind]
    name = f"{kind}_k{k}"
    attrs = {
        "name": name,
        "field": field,
        "stats": frozenset({field}),
        "k": k,
        "reduce": staticmethod(reduce),
        "description": text.format(k=k) + " (clusters and agreement by the task's labeller rule)",
        "__doc__": text.format(k=k),
    }
    return register(type(name, (SamplingEstimator,), attrs))


for _kind in KINDS:
    for _k in SAMPLE_KS:
        _register(_kind, _k)
