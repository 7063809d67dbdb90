"""The pure protocol: NaN mapping, score_tasks on synthetic stats (known AUROC / Brier / ECE), single-class tasks, and
the vectorised scoring against the per-split loop it replaced."""

from __future__ import annotations

import json
import math
import zlib
from typing import Any

import numpy as np
import pytest
from scipy.special import expit

from tracecal.calibrators import make_calibrator
from tracecal.estimators import REGISTRY, Estimator, Inputs, get_estimator
from tracecal.evaluation.protocol import SCORE_CONSTRAINTS, ScoreConfig, TaskStats, sanitize, score_tasks
from tracecal.evaluation.splitscore import platt_rows
from tracecal.stats.bootstrap import bootstrap_counts, split_draws
from tracecal.stats.metrics import SingleClassWarning, auroc, compute_all
from tracecal.stats.selective import ltt_threshold, selective_outcome
from tracecal.stats.splits import stratified_split, threshold_split
from tracecal.traces.trace import TraceBatch


def test_sanitize_maps_non_finite_to_least_confident() -> None:
    x, n = sanitize(np.array([0.2, np.nan, 0.9, -np.inf, np.inf]))
    assert n == 3 and x[1] < 0.2 and x[3] < 0.2 and x[4] == 0.9


def _synthetic_stats(name: str, n: int, seed: int) -> TaskStats:
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.4).astype(np.int64)
    lengths = rng.integers(1, 6, n)
    # entropy lower for correct answers, so TRACE ranks above chance
    H = [list(rng.gamma(2.0, 0.6 if y[i] else 1.2, lengths[i])) for i in range(n)]
    S = [list(rng.gamma(1.5, 0.5, lengths[i])) for i in range(n)]
    inputs = Inputs(TraceBatch.from_lists(S, H), p_true=np.where(y == 1, 0.8, 0.5) + 0.01 * rng.random(n))
    return TaskStats(name, [f"q{i}" for i in range(n)], y, inputs, "synthetic rule")


def test_score_tasks_is_a_pure_function_of_stats_and_labels() -> None:
    data = [_synthetic_stats("a", 120, 0), _synthetic_stats("b", 90, 1)]
    cfg = ScoreConfig(estimators=["trace", "trace_plus", "neg_mean_entropy", "p_true"], n_seeds=4, min_per_class=0)
    res = score_tasks(data, cfg)
    again = score_tasks(data, cfg)
    assert json.dumps(res.to_json()) == json.dumps(again.to_json())
    assert list(res.metrics) == ["a", "b", "average"]
    assert res.metrics["a"]["trace"]["auroc"]["mean"] > 0.6  # the signal planted above
    assert res.metrics["a"]["p_true"]["auroc"]["mean"] > 0.9
    assert res.metrics["a"]["trace"]["auroc"]["n_seeds"] == 4
    frame = res.to_frame()
    assert set(frame.columns) == {"task", "estimator", "metric", "mean", "sd", "n_seeds"}
    per_task = len(res.metrics["a"]["trace"])  # every metric and count; the average has the 9 metrics only
    assert len(frame) == 2 * 4 * per_task + 4 * len(res.metrics["average"]["trace"])
    assert res.answers["predictions"].num_rows == 210


def test_single_class_task_gives_nan_auroc_with_warning() -> None:
    d = _synthetic_stats("t", 20, 2)
    d.y[:] = 0
    with pytest.warns(SingleClassWarning):
        res = score_tasks([d], ScoreConfig(estimators=["trace"], n_seeds=2))
    assert np.isnan(res.metrics["t"]["trace"]["auroc"]["mean"])


class GivenProbability(Estimator):
    """A self-calibrated test estimator: its confidence is the stat ``p`` as given (a probability)."""

    name = "given_p"
    family = "test"
    self_calibrated = True

    def score(self, inputs: Inputs) -> np.ndarray:
        return inputs.stats["p"]


def _given(p: np.ndarray, y: np.ndarray) -> TaskStats:
    n = len(y)
    batch = TraceBatch.from_lists([[0.5]] * n, [[1.0]] * n)
    return TaskStats("given", [f"q{i}" for i in range(n)], y, Inputs(batch, p=p), "given")


def test_known_auroc_brier_and_ece(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(REGISTRY, GivenProbability.name, GivenProbability)
    y = np.array([1] * 40 + [0] * 60)
    p = np.where(y == 1, 0.8, 0.3)  # perfectly ranked; off by 0.2 (correct) and 0.3 (wrong)
    res = score_tasks([_given(p, y)], ScoreConfig(["given_p"], n_seeds=1, n_boot=0))
    m = res.metrics["given"]["given_p"]
    _, ev = stratified_split(y, 0.35, 0)
    n1, n0 = int(y[ev].sum()), int((1 - y[ev]).sum())
    assert (n1, n0) == (26, 39)
    assert m["auroc"]["mean"] == 1.0
    assert m["brier"]["mean"] == pytest.approx((n1 * 0.2**2 + n0 * 0.3**2) / (n1 + n0), abs=1e-12)
    assert m["ece"]["mean"] == pytest.approx((n1 * 0.2 + n0 * 0.3) / (n1 + n0), abs=1e-12)
    assert m["n"]["mean"] == 65 and m["n_cal"]["mean"] == 35 and res.tasks["given"]["nan_mapped"] == {}


def test_non_finite_scores_are_mapped_to_the_least_confident_and_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(REGISTRY, GivenProbability.name, GivenProbability)
    rng = np.random.default_rng(0)
    y = (rng.random(80) < 0.5).astype(np.int64)
    p = np.clip(0.5 + 0.3 * (y - 0.5) + 0.2 * rng.standard_normal(80), 0.01, 0.99)
    p[[3, 7, 11]] = np.nan
    res = score_tasks([_given(p, y)], ScoreConfig(["given_p"], n_seeds=1, n_boot=0))
    assert res.tasks["given"]["nan_mapped"] == {"given_p": 3}
    _, ev = stratified_split(y, 0.35, 0)
    expected = auroc(y[ev], sanitize(p)[0][ev])
    assert math.isclose(res.metrics["given"]["given_p"]["auroc"]["mean"], expected, abs_tol=1e-12)
    scores = res.answers["scores"].column("given_p").to_numpy()
    assert np.isfinite(scores).all() and scores[3] < np.nanmin(p)


def test_settings_are_checked_with_one_vocabulary() -> None:
    assert set(SCORE_CONSTRAINTS) == {"n_seeds", "cal_frac", "n_bins", "n_boot", "level", "sel_alpha", "sel_delta"} | {
        "sel_holdout",
        "min_per_class",
        "seed",
    }
    with pytest.raises(ValueError, match=r"^n_seeds must be a whole number in \[1, 10000\], got 0$"):
        ScoreConfig(["trace"], n_seeds=0).validate()
    with pytest.raises(ValueError, match=r"^sel_holdout must be a finite number in \[0, 1\), got 1.0$"):
        ScoreConfig(["trace"], sel_holdout=1.0).validate()
    assert ScoreConfig(["trace"]).validate().to_dict()["n_boot"] == 1000


# ------------------------------------------------------------ the vectorised protocol against the loop it replaced


class NewtonPlatt:
    """Platt as the vectorised protocol fits it (`platt_rows`), one split at a time, for the reference below."""

    def fit(self, s: np.ndarray, y: np.ndarray) -> NewtonPlatt:
        self.params = [x[0] for x in platt_rows(np.asarray(s)[None], np.asarray(y)[None])]
        return self

    def predict_proba(self, s: np.ndarray) -> np.ndarray:
        mean, scale, a, w, constant = self.params
        if not np.isnan(constant):
            return np.full(len(s), constant)
        return np.clip(expit(a + w * ((s - mean) / scale)), 0.0, 1.0)


def reference_scores(data: TaskStats, cfg: ScoreConfig, newton: bool) -> tuple[dict, dict, dict]:
    """`score_tasks` of one task before the vectorised inner loop, kept as the reference: every estimator × split
    on its own — a fitted estimator fitted on the selected inputs, the calibrator fitted on the split, metrics by
    `compute_all`, the Learn-then-Test threshold by `ltt_threshold`, draws by `split_draws` (int32 counts); ``newton``
    swaps scikit-learn's Platt for the Newton one. Returns ({name: {metric: per-split values}}, draws, seed-0
    predictions)."""
    y = data.y
    splits = [stratified_split(y, cfg.cal_frac, cfg.seed + s) for s in range(cfg.n_seeds)]
    counts = bootstrap_counts(y, cfg.n_boot, seed=(cfg.seed, zlib.crc32(data.task.encode())))
    per: dict[str, dict[str, list[float]]] = {}
    draws, preds = {}, {}
    for name in cfg.estimators:
        cls, per[name], vals = REGISTRY[name], {}, {"auroc": [], "brier": []}
        raw_all = None if cls.needs_fit else sanitize(get_estimator(name).score(data.inputs))[0]
        for s, (cal, ev) in enumerate(splits):
            if raw_all is None:
                est = get_estimator(name).fit(data.inputs.select(cal), y[cal])
                raw_cal, raw_ev = (sanitize(est.score(data.inputs.select(r)))[0] for r in (cal, ev))
            else:
                raw_cal, raw_ev = raw_all[cal], raw_all[ev]
            if cls.self_calibrated:
                prob = np.clip(raw_ev, 0.0, 1.0)
            else:
                calib: Any = NewtonPlatt() if newton and cfg.calibrator == "platt" else make_calibrator(cfg.calibrator)
                if cfg.calibrator == "temperature":
                    lo, hi = raw_cal.min(), raw_cal.max()
                    span = hi - lo if hi > lo else 1.0
                    raw_cal_c, raw_ev_c = np.clip((raw_cal - lo) / span, 0, 1), np.clip((raw_ev - lo) / span, 0, 1)
                else:
                    raw_cal_c, raw_ev_c = raw_cal, raw_ev
                prob = calib.fit(raw_cal_c, y[cal]).predict_proba(raw_ev_c)
            m = compute_all(y[ev], raw_ev, prob, n_bins=cfg.n_bins) | {
                "n_correct_cal": int(y[cal].sum()),
                "n_cal": len(cal),
            }
            if cls.needs_fit:
                fit, thr = threshold_split(y[cal], cfg.sel_holdout, seed=(cfg.seed, zlib.crc32(cal.tobytes())))
                refit = get_estimator(name).fit(data.inputs.select(cal[fit]), y[cal[fit]])
                t_raw = sanitize(refit.score(data.inputs.select(cal[thr])))[0]
                t = ltt_threshold(t_raw, y[cal[thr]], cfg.sel_alpha, cfg.sel_delta).threshold
                sel_ev = sanitize(refit.score(data.inputs.select(ev)))[0]
            else:
                t = ltt_threshold(raw_cal, y[cal], cfg.sel_alpha, cfg.sel_delta).threshold
                sel_ev = raw_ev
            m |= selective_outcome(sel_ev, y[ev], t, cfg.sel_alpha)
            for k, v in m.items():
                per[name].setdefault(k, []).append(v)
            vals["auroc"].append(raw_ev)
            vals["brier"].append(prob)
            if s == 0:
                preds[name] = (ev, raw_ev, prob)
        draws[name] = {k: split_draws(k, y, [ev for _, ev in splits], vals[k], counts) for k in ("auroc", "brier")}
    return per, draws, preds


def _rich_task(name: str, n: int, seed: int) -> TaskStats:
    """Zero-token answers (NaN scores), ties (rounded P(True), shares of tokens), beam scores and token weights."""
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.45).astype(np.int64)
    lengths = rng.integers(0, 9, n)
    H = [rng.gamma(2.0, 0.5 if y[i] else 1.0, k) for i, k in enumerate(lengths)]
    S = [np.round(rng.gamma(1.0, 0.4 if y[i] else 0.8, k), 1) for i, k in enumerate(lengths)]
    batch = TraceBatch.from_lists(S, H)
    stats = {
        "p_true": np.round(np.clip(0.5 + 0.3 * (y - 0.5) + 0.2 * rng.normal(size=n), 0, 1), 1),
        "beam": np.sort(-rng.exponential(1.0 + y[:, None], (n, 5)), axis=1)[:, ::-1],
        "tokensar_rel": rng.random(int(batch.offsets[-1])),
    }
    return TaskStats(name, [f"q{i}" for i in range(n)], y, Inputs(batch, None, stats), "synthetic")


ESTIMATORS = ["trace", "high_prob_rate", "neg_last3_entropy", "p_true", "tokensar", "beam_ratio", "trace_plus"]


def _compare(res: Any, data: TaskStats, ref: tuple[dict, dict, dict], tol: dict[str, float]) -> None:
    per, draws, preds = ref
    got_pred = res.answers["predictions"].to_pydict()
    for name, vals in per.items():
        for k, v in vals.items():
            a = np.asarray(v, dtype=np.float64)
            ok = a[np.isfinite(a)]
            sd = ok.std(ddof=1) if ok.size > 1 else (0.0 if ok.size else np.nan)
            want = (ok.mean() if ok.size else np.nan, sd)
            got = res.metrics[data.task][name][k]
            np.testing.assert_allclose(
                [got["mean"], got["sd"]], want, rtol=0, atol=tol.get(k, 1e-12), err_msg=f"{name} {k}"
            )
        ev, raw_ev, prob = preds[name]
        np.testing.assert_allclose(np.asarray(got_pred[f"raw:{name}"])[ev], raw_ev, rtol=0, atol=1e-12)
        np.testing.assert_allclose(np.asarray(got_pred[f"prob:{name}"])[ev], prob, rtol=0, atol=tol.get("prob", 1e-12))
        for m in ("auroc", "brier"):
            np.testing.assert_allclose(
                res.draws[data.task][name][m], draws[name][m], rtol=0, atol=tol.get(f"draw {m}", 1e-12)
            )


@pytest.mark.parametrize("calibrator", ["platt", "isotonic", "temperature"])
def test_vectorised_scoring_equals_the_per_split_loop(calibrator: str) -> None:
    """Every metric (mean and sd over splits), the seed-0 predictions and the bootstrap draws equal the per-split
    loop to 1e-12, with Platt fitted alike (by Newton) and with the other calibrators as they always were."""
    data = _rich_task("r", 240, 3)
    cfg = ScoreConfig(ESTIMATORS, n_seeds=4, n_boot=40, calibrator=calibrator)
    res = score_tasks([data], cfg)
    _compare(res, data, reference_scores(data, cfg, newton=True), {})


def test_vectorised_scoring_against_scikit_learn_platt() -> None:
    """Against the loop with scikit-learn's Platt (the implementation before): everything computed from raw scores
    equal to 1e-12; the calibrated probabilities differ as Newton's optimum differs from where L-BFGS stopped."""
    data = _rich_task("r", 240, 4)
    cfg = ScoreConfig(ESTIMATORS, n_seeds=4, n_boot=40)
    res = score_tasks([data], cfg)
    loose = {"brier": 1e-4, "ece": 5e-3, "aece": 5e-3, "prob": 2e-2, "draw brier": 1e-4}
    _compare(res, data, reference_scores(data, cfg, newton=False), loose)
