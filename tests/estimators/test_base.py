"""Estimators: each against a naive per-answer reference; registry, needs; semantic and extra passes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tracecal.estimators import (
    PAPER_BASELINES,
    REGISTRY,
    Inputs,
    MissingStatError,
    UnknownEstimatorError,
    get_estimator,
    needs_of,
    resolve_estimators,
)
from tracecal.traces.trace import Trace, TraceBatch

RNG = np.random.default_rng(3)
LENS = [1, 2, 3, 5, 8, 13, 21]
S = [RNG.gamma(1.0, 0.8, n) for n in LENS]
H = [RNG.gamma(1.0, 1.5, n) for n in LENS]
BATCH = TraceBatch.from_lists(S, H)


def slope(u: np.ndarray) -> float:
    return 0.0 if len(u) == 1 else float(np.polyfit(np.arange(len(u)), u, 1)[0])


def window(u: np.ndarray, w: int = 4) -> float:
    return float(u.mean()) if len(u) < w else max(float(u[i : i + w].mean()) for i in range(len(u) - w + 1))


NAIVE = {
    "first_token_prob": lambda s, h: math.exp(-s[0]),
    "mean_prob": lambda s, h: float(np.exp(-s).mean()),
    "norm_seq_prob": lambda s, h: math.exp(-s.mean()),
    "seq_likelihood": lambda s, h: math.exp(-s.sum()),
    "min_prob": lambda s, h: float(np.exp(-s).min()),
    "high_prob_rate": lambda s, h: float((np.exp(-s) > 0.9).mean()),
    "neg_mean_entropy": lambda s, h: -h.mean(),
    "neg_max_entropy": lambda s, h: -h.max(),
    "neg_first3_entropy": lambda s, h: -h[:3].mean(),
    "neg_last3_entropy": lambda s, h: -h[-3:].mean(),
    "neg_window_entropy": lambda s, h: -window(h),
    "neg_entropy_var": lambda s, h: -h.var(),
    "neg_entropy_slope": lambda s, h: -slope(h),
    "prob_slope": lambda s, h: slope(np.exp(-s)),
}


def test_registry_has_all_paper_baselines_and_more() -> None:
    assert len(PAPER_BASELINES) == 19
    assert set(PAPER_BASELINES) <= set(REGISTRY)
    assert {"trace", "trace_plus", "p_true", "verbalized"} <= set(REGISTRY)
    assert needs_of(["mean_prob"]) == ["traces"]
    assert needs_of(["beam_ratio"]) == ["traces", "beam"]
    assert needs_of(["mars", "p_true"]) == ["traces", "semantic", "extra"]
    assert REGISTRY["tokensar"].stats == {"tokensar_rel"} and REGISTRY["p_true"].stats == {"p_true"}
    assert set(resolve_estimators("beam")) == {"beam_ratio", "beam_tail_thinness", "beam_neg_entropy"}
    with pytest.raises(UnknownEstimatorError, match="Did you mean 'mean_prob'"):
        resolve_estimators("mean_prb")


@pytest.mark.parametrize("name", sorted(NAIVE))
def test_trace_estimators_match_naive(name: str) -> None:
    got = get_estimator(name).score(Inputs(BATCH))
    want = [NAIVE[name](s, h) for s, h in zip(S, H, strict=True)]
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def test_zero_token_answers_score_nan() -> None:
    b = TraceBatch.from_lists([[0.1], [], [0.2, 0.3]], [[1.0], [], [0.5, 0.4]])
    for name in NAIVE:
        x = get_estimator(name).score(Inputs(b))
        assert np.isnan(x[1]) and np.all(np.isfinite(x[[0, 2]])), name


def test_beam_estimators_hand_example() -> None:
    beam = np.log(np.array([[0.5, 0.3, 0.1, 0.05, 0.05], [0.9, 0.05, 0.03, 0.01, 0.01]]))
    inp = Inputs(TraceBatch.from_lists([[0.1], [0.2]], [[0.1], [0.2]]), beam=beam)
    q = np.exp(beam) / np.exp(beam).sum(1, keepdims=True)
    np.testing.assert_allclose(get_estimator("beam_tail_thinness").score(inp), 0.5 * (q**2).sum(1))
    np.testing.assert_allclose(get_estimator("beam_neg_entropy").score(inp), (q * np.log(q)).sum(1))
    br = get_estimator("beam_ratio", k=2)
    np.testing.assert_allclose(br.fit(inp, np.array([0, 1])).score(inp), [0.5 / 0.3, 0.9 / 0.05])
    # k chosen on the calibration split by AUROC
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 200)
    beam2 = np.sort(rng.normal(size=(200, 5)), axis=1)[:, ::-1].copy()
    beam2[:, 3] -= 3 * y  # the 4th beam separates the classes
    inp2 = Inputs(TraceBatch.from_lists([[0.1]] * 200, [[0.1]] * 200), beam=beam2)
    assert get_estimator("beam_ratio").fit(inp2, y).k_ == 4


def test_a_missing_stat_names_the_pass_to_run() -> None:
    inp = Inputs(TraceBatch.from_lists([[0.1]], [[0.1]]))
    with pytest.raises(MissingStatError, match="stat 'beam' is missing: run the 'beam' pass"):
        get_estimator("beam_tail_thinness").score(inp)
    with pytest.raises(MissingStatError, match="'extra' pass"):
        get_estimator("p_true").score(inp)


def test_selecting_a_subset_keeps_token_stats_aligned() -> None:
    b = TraceBatch.from_lists([[0.1, 0.2], [0.3], [0.4, 0.5, 0.6]], [[1, 1], [1], [1, 1, 1]])
    inp = Inputs(b, mars_u=np.arange(6.0), p_true=[0.1, 0.2, 0.3], beam=np.arange(6.0).reshape(3, 2))
    sub = inp.select(np.array([2, 0]))
    np.testing.assert_array_equal(sub.mars_u, [3, 4, 5, 0, 1])
    np.testing.assert_array_equal(sub.p_true, [0.3, 0.1])
    np.testing.assert_array_equal(sub.beam, [[4, 5], [0, 1]])


def test_tokensar_and_mars_formulas() -> None:
    s = np.array([0.5, 1.0, 2.0])
    rel = np.array([0.2, 0.3, 0.5])
    u = np.array([0.6, 0.4, 0.0])
    inp = Inputs(TraceBatch.from_lists([s], [[0.0, 0.0, 0.0]]), tokensar_rel=rel, mars_u=u)
    assert get_estimator("tokensar").score(inp)[0] == pytest.approx(-(s * rel).sum())
    w = 1 / 6 + u / 2
    assert get_estimator("mars").score(inp)[0] == pytest.approx(np.prod(np.exp(-s) ** w))


class FakeEmbedder:
    """Bag-of-characters embedding: deterministic, and removing a rare character changes it more."""

    def encode(self, texts, batch_size=0, normalize_embeddings=True, convert_to_numpy=True):  # type: ignore[no-untyped-def]
        out = np.zeros((len(texts), 64))
        for i, t in enumerate(texts):
            for ch in t:
                out[i, ord(ch) % 64] += 1.0
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


def _trace(text: str, pieces: list[str]) -> Trace:
    offs = np.cumsum([0] + [len(p) for p in pieces[:-1]])
    n = len(pieces)
    return Trace(
        text=text, token_ids=np.arange(n), surprisal=np.ones(n), entropy=np.ones(n), token_strings=pieces, offsets=offs
    )


def test_relevance_normalised_and_spread_over_words() -> None:
    from tracecal.passes.semantic import relevance

    tr = [
        _trace("Paris is nice", ["Par", "is", " is", " nice"]),
        _trace("x", ["x"]),
        Trace(text="", token_ids=[], surprisal=[], entropy=[]),
    ]
    rel, u = relevance(tr, ["capital?", "q", "q"], FakeEmbedder())
    assert len(rel) == 5 and len(u) == 5
    np.testing.assert_allclose(rel[:4].sum(), 1.0)
    np.testing.assert_allclose(u[:4].sum(), 1.0)
    assert u[0] == pytest.approx(u[1])  # "Par"+"is" are one word: its importance is split evenly
    np.testing.assert_allclose([rel[4], u[4]], [1.0, 1.0])


def test_real_embedder_loads_offline() -> None:
    from tracecal.passes.semantic import load_embedder, relevance

    emb = load_embedder()
    tr = [_trace("The capital is Paris", ["The", " capital", " is", " Paris"])]
    rel, u = relevance(tr, ["What is the capital of France?"], emb)
    assert np.all(rel >= 0) and rel.sum() == pytest.approx(1.0)
    assert np.argmax(rel) == 3, "removing 'Paris' changes the meaning most"


def test_p_true_and_verbalized_on_real_model(model) -> None:  # type: ignore[no-untyped-def]
    from tracecal.passes import selfeval

    qs = ["What is the capital of France?", "What is the capital of France?"]
    ans = ["Paris", "Berlin"]
    pt = selfeval.p_true(model, qs, ans)
    assert pt.shape == (2,) and np.all((pt > 0) & (pt < 1))
    v, dist, mass = selfeval.verbalized_confidence(model, qs, ans)
    assert np.all((v >= 0) & (v <= 1)) and np.allclose(dist.sum(1), 1.0)
    assert np.all(mass > 0.5), "the pre-filled 'Confidence: ' makes a digit the likely next token"
    # the tree of cached steps equals explicit teacher-forced passes: P(85) = P(8)·P(5|8) / digit mass
    p = selfeval.verbalized_prompt_ids(model, qs[0], ans[0])
    enc = lambda s: model.tokenizer.encode(s, add_special_tokens=False)  # noqa: E731
    lp8 = model.next_token_logprobs([p], enc("8"))[0, 0]
    lp5 = model.next_token_logprobs([p + enc("8")], enc("5"))[0, 0]
    d, m = selfeval.number_distribution(model, [p])
    assert float(d[0, 85]) == pytest.approx(math.exp(lp8 + lp5) / float(m[0]), rel=1e-3)
    # 100 vs 10: P(100) = P(1)·P(0|1)·P(0|10) / mass
    lp1 = model.next_token_logprobs([p], enc("1"))[0, 0]
    lp0 = model.next_token_logprobs([p + enc("1")], enc("0"))[0, 0]
    lp00 = model.next_token_logprobs([p + enc("1") + enc("0")], enc("0"))[0, 0]
    assert float(d[0, 100]) == pytest.approx(math.exp(lp1 + lp0 + lp00) / float(m[0]), rel=1e-3)


def test_parse_confidence() -> None:
    from tracecal.passes.selfeval import parse_confidence

    assert parse_confidence("I am 85% sure") == pytest.approx(0.85)
    assert parse_confidence("0.7") == pytest.approx(0.7)
    assert parse_confidence("90/100") == pytest.approx(0.9)
    assert math.isnan(parse_confidence("not sure"))


def test_every_estimator_declares_a_constraint_for_each_parameter() -> None:
    from tracecal.estimators import REGISTRY
    from tracecal.estimators.base import FittedModelEstimator

    for name, cls in REGISTRY.items():
        est = cls()
        declared = set(cls._parameter_constraints)
        if issubclass(cls, FittedModelEstimator):
            declared |= set(cls.model_class._parameter_constraints)
        assert set(est.get_params()) <= declared, name
        assert est.check_params() is est  # the defaults meet them


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        ("trace", {"lam": -1}, r"^trace: lam must be a finite number > 0, got -1$"),
        ("trace", {"window": 0}, r"^trace: window must be a whole number ≥ 1, got 0$"),
        ("trace", {"alpha": 0.9}, r"^alpha \+ beta \+ gamma must be 1, got 1.5$"),
        ("trace_plus", {"C": 0.0}, r"^trace_plus: C must be a finite number > 0, got 0.0$"),
        ("trace_plus_prior", {"monotone": "yes"}, r"^trace_plus_prior: monotone must be true or false, got 'yes'$"),
        ("beam_ratio", {"candidates": (2, 1)}, r"candidates\[1\] = 1 is not a whole number ≥ 2$"),
    ],
)
def test_get_estimator_refuses_a_bad_parameter_by_name(name: str, params: dict, message: str) -> None:
    from tracecal.errors import ValidationError

    with pytest.raises(ValidationError, match=message):
        get_estimator(name, **params)
