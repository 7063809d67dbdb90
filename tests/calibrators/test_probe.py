"""`HiddenProbe`: standardise → PCA → logistic with C by CV; sklearn clone, JSON round trip, width refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from sklearn.base import clone

from tracecal.calibrators.probe import HiddenProbe
from tracecal.calibrators.values import CalibratorFileError
from tracecal.errors import ValidationError
from tracecal.traces.trace import Trace


def data(n: int = 400, p: int = 120, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Labels from a direction spread over many columns (what PCA keeps) plus noise."""
    rng = np.random.default_rng(seed)
    latent = rng.normal(size=(n, 3))
    X = latent @ rng.normal(size=(3, p)) + 0.5 * rng.normal(size=(n, p))
    y = (latent[:, 0] + 0.5 * rng.normal(size=n) > 0).astype(float)
    return X, y


def auroc(y: np.ndarray, s: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y, s))


def test_it_learns_and_its_folded_weights_are_the_pipeline(tmp_path: Path) -> None:
    X, y = data()
    probe = HiddenProbe(n_components=8).fit(X[:300], y[:300])
    p = probe.predict_proba(X[300:])
    assert auroc(y[300:], p) > 0.8 and probe.k_ == 8 and probe.C_ in probe.Cs
    back = HiddenProbe.load(probe.save(tmp_path / "probe.json"))
    np.testing.assert_allclose(back.predict_proba(X[300:]), p, atol=1e-12, rtol=0)
    assert clone(probe).get_params() == probe.get_params()
    again = clone(probe).fit(X[:300], y[:300])
    np.testing.assert_array_equal(again.predict_proba(X[300:]), p)


def test_it_refuses_another_width_and_bad_input() -> None:
    X, y = data()
    probe = HiddenProbe(n_components=4).fit(X, y)
    with pytest.raises(ValidationError, match="fitted on 120 features per answer, got 119"):
        probe.predict_proba(X[:, :-1])
    with pytest.raises(ValidationError, match="2-D"):
        probe.predict_proba(X[0])
    with pytest.raises(ValidationError, match="labels"):
        HiddenProbe().fit(X, y * 2)
    with pytest.raises(ValidationError, match="n_components"):
        HiddenProbe(n_components=0).fit(X, y)
    with pytest.raises(ValidationError, match="passthrough"):
        HiddenProbe(passthrough=120).fit(X, y)
    assert probe.confidence([]).shape == (0,)
    bare = Trace(text="a", token_ids=[1], surprisal=[0.1], entropy=[0.2])
    with pytest.raises(ValidationError, match="reads hidden states.*score-answers"):
        probe.confidence([bare])


def answers(X: np.ndarray, layers: tuple[int, ...] | None, k: int = 2) -> list[Trace]:
    """One trace per row of X carrying it as its hidden summary (2, k, d) recorded at ``layers``; row 0 empty."""
    out = []
    for i, x in enumerate(X):
        T = 0 if i == 0 else 1 + i % 3
        t = Trace(text="ab"[:T], token_ids=np.arange(T), surprisal=np.full(T, 0.3 + i % 5), entropy=np.full(T, 0.5))
        t.hidden, t.hidden_layers = x.reshape(2, k, -1).astype(np.float32), layers
        out.append(t)
    return out


def test_on_answers_it_reads_their_hidden_summaries_and_records_their_layers(tmp_path: Path) -> None:
    X, y = data()
    traces = answers(X, (3, 7))
    probe = HiddenProbe(n_components=8).fit_answers(traces[:300], y[:300])
    assert probe.layers_ == (3, 7) and probe.backend_options() == {"hidden_layers": [3, 7]}
    want = (
        HiddenProbe(n_components=8).fit(X[:300].astype(np.float32), y[:300]).predict_proba(X[300:].astype(np.float32))
    )
    p = probe.confidence(traces[300:])
    np.testing.assert_allclose(p, want, atol=1e-12, rtol=0)
    assert np.isnan(probe.confidence(traces[:1])[0])  # the zero-token answer
    back = HiddenProbe.load(probe.save(tmp_path / "probe.json"))
    assert back.layers_ == (3, 7)
    np.testing.assert_allclose(back.confidence(traces[300:]), p, atol=1e-12, rtol=0)
    with pytest.raises(
        ValidationError, match=r"fitted on the hidden states of layers \[3, 7\].*hidden_layers=\[3, 7\]"
    ):
        back.confidence(answers(X[300:], (4, 8)))
    with pytest.raises(ValidationError, match="layers"):
        HiddenProbe(n_components=8, layers=(1, 2)).fit_answers(traces[:300], y[:300])
    with pytest.raises(ValidationError, match="records no hidden layers"):
        HiddenProbe(n_components=8).fit(X[:300], y[:300]).backend_options()


def test_fused_with_trace_plus_it_reads_their_traces_too() -> None:
    X, y = data()
    traces = answers(X, (1, 2))
    with pytest.raises(ValidationError, match="passthrough=8"):
        HiddenProbe(trace_plus=True).fit_answers(traces, y)
    probe = HiddenProbe(n_components=8, passthrough=8, trace_plus=True).fit_answers(traces[:300], y[:300])
    assert probe.n_features_in_ == X.shape[1] + 8
    assert np.isfinite(probe.confidence(traces[300:])).all()


def test_a_file_whose_layers_do_not_split_its_weights_is_refused(tmp_path: Path) -> None:
    import json

    X, y = data()
    path = HiddenProbe(n_components=8).fit_answers(answers(X, (3, 7)), y).save(tmp_path / "probe.json")
    d = json.loads(path.read_text())
    for bad in ([3, 3], [0, 2], [1, 2, 3, 4, 5, 6, 7], "auto"):
        d["state"]["layers"] = bad
        path.write_text(json.dumps(d))
        with pytest.raises(CalibratorFileError, match="layers must be distinct"):
            HiddenProbe.load(path)


def test_passthrough_columns_are_kept_unreduced() -> None:
    """A label carried by one passthrough column is found though PCA of the rest would drop it."""
    X, _ = data()
    rng = np.random.default_rng(1)
    extra = rng.normal(size=(len(X), 1))
    y = (extra[:, 0] > 0).astype(float)
    M = np.hstack([X, extra])
    fused = HiddenProbe(n_components=2, passthrough=1).fit(M[:300], y[:300])
    alone = HiddenProbe(n_components=2).fit(X[:300], y[:300])
    assert auroc(y[300:], fused.predict_proba(M[300:])) > 0.95 > auroc(y[300:], alone.predict_proba(X[300:])) + 0.2


def test_non_finite_values_read_as_the_column_mean_and_one_class_is_the_base_rate() -> None:
    X, y = data()
    X[0, 3] = np.nan
    probe = HiddenProbe(n_components=4).fit(X, y)
    Y = X[:2].copy()
    Y[1, 3] = np.inf
    filled = Y.copy()
    filled[:, 3] = probe.means_[3]
    np.testing.assert_allclose(probe.predict_proba(Y), probe.predict_proba(filled))
    const = HiddenProbe().fit(X[:50], np.ones(50))
    np.testing.assert_allclose(const.predict_proba(X[:3]), 1 - 1e-6, rtol=1e-9)


def test_a_damaged_file_is_refused(tmp_path: Path) -> None:
    import json

    X, y = data()
    path = HiddenProbe(n_components=4).fit(X, y).save(tmp_path / "p.json")
    doc = json.loads(path.read_text())
    doc["state"]["means"] = doc["state"]["means"][:-1]
    path.write_text(json.dumps(doc))
    with pytest.raises(CalibratorFileError, match="means"):
        HiddenProbe.load(path)
