"""The estimator and pass contracts, for every registered member: each estimator reads only stats a registered pass
provides, scores synthetic stats one value per answer (NaN only for a zero-token answer, a self-calibrated one in
[0, 1]), is deterministic and says which stat is missing with a `TracecalError`; each pass declares consistent
names, stats, dependencies and backend capabilities."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

from tests.common.toys import synthetic_traces
from tracecal.backends.registry import CAPABILITIES, SAMPLING
from tracecal.errors import TracecalError
from tracecal.estimators import REGISTRY, TRACE_STATS, Inputs, get_estimator, needs_of
from tracecal.estimators.sampling import SAMPLE_KS
from tracecal.evaluation.config import EvalConfig
from tracecal.passes import ANSWER, PASSES, TOKEN, VECTOR, Pass, provider_of
from tracecal.passes.base import KINDS
from tracecal.traces.trace import TraceBatch

N_BEAMS = 5


def synthetic_stats(batch: TraceBatch, seed: int = 1) -> dict[str, np.ndarray]:
    """A value of the right shape for every stat a registered pass provides (probabilities in (0, 1), beam
    log-scores ≤ 0, sorted best first)."""
    rng = np.random.default_rng(seed)
    n, tokens = len(batch), len(batch.surprisal)
    out: dict[str, np.ndarray] = {}
    for p in PASSES.values():
        for stat, kind in p.provides.items():
            if stat in TRACE_STATS:
                continue
            if kind == ANSWER:
                out[stat] = rng.uniform(0.05, 0.95, n)
            elif kind == TOKEN:
                out[stat] = rng.uniform(0.05, 0.95, tokens)
            else:  # a vector per answer: as wide as the pass draws (10 samples, 5 beams)
                width = SAMPLE_KS[-1] if SAMPLING in p.requires else N_BEAMS
                out[stat] = -np.sort(rng.gamma(1.0, 0.5, (n, width)), axis=1)
    return out


@pytest.fixture(scope="module")
def inputs() -> tuple[Inputs, np.ndarray]:
    traces, y = synthetic_traces(n=60, seed=3)
    batch = TraceBatch.from_traces(traces)
    return Inputs(batch, traces, synthetic_stats(batch)), y


def _score(name: str, inputs: Inputs, y: np.ndarray) -> np.ndarray:
    est = get_estimator(name)
    if est.needs_fit:
        fit_rows = np.arange(len(y) - 1)  # fitted on the answers with tokens
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(inputs.select(fit_rows), y[fit_rows])
    return np.asarray(est.score(inputs), dtype=np.float64)


@pytest.mark.parametrize("name", list(REGISTRY))
def test_an_estimator_declares_what_it_reads_and_scores_each_answer(name: str, inputs: Any) -> None:
    cls, (x, y) = REGISTRY[name], inputs
    assert cls.name == name and cls.family and cls.description
    assert all(provider_of(s) in PASSES for s in cls.stats)  # every stat it reads has a registered pass
    assert set(needs_of([name])) <= set(PASSES) and "traces" in needs_of([name])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        s = _score(name, x, y)
        again = _score(name, x, y)
    assert s.shape == (len(y),) and not np.isnan(s[:-1]).any(), s  # NaN only where an answer has no token
    np.testing.assert_array_equal(again, s)  # deterministic (NaN == NaN here)
    if cls.self_calibrated:
        assert np.all((s[:-1] >= 0) & (s[:-1] <= 1))


@pytest.mark.parametrize("name", [n for n, c in REGISTRY.items() if c.stats - TRACE_STATS])
def test_an_estimator_says_which_stat_is_missing(name: str, inputs: Any) -> None:
    x, y = inputs
    bare = Inputs(x.batch, x.traces)
    with pytest.raises(TracecalError, match="is missing: run the"):
        _score(name, bare, y)


@pytest.mark.parametrize("name", list(PASSES))
def test_a_pass_declares_consistent_names_stats_dependencies_and_capabilities(name: str) -> None:
    p: type[Pass] = PASSES[name]
    assert p.name == name and p.description and p.cost_weight > 0
    assert p.provides and set(p.provides.values()) <= set(KINDS)
    assert all(provider_of(stat) == name for stat in p.provides)  # each stat has one provider: this pass
    assert set(p.depends) <= set(PASSES) and name not in p.depends
    assert set(p.requires) <= set(CAPABILITIES), f"{name} requires unknown capabilities"
    assert p.resource in ("lm", "embedder", None)
    assert isinstance(p.from_config(EvalConfig(["triviaqa"])), p)


def test_the_passes_form_no_cycle_and_the_generation_pass_is_the_root() -> None:
    from tracecal.passes import passes_for

    every = {s for p in PASSES.values() for s in p.provides}
    order = passes_for(every)
    assert order[0] == "traces" and set(order) == set(PASSES)
    assert all(order.index(d) < order.index(n) for n in order for d in PASSES[n].depends)
    assert VECTOR in KINDS and TOKEN in KINDS
