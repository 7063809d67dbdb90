"""The calibrator contract, for every class in `CALIBRATOR_CLASSES` and a toy subclass registered at test time: it
declares what it reads, fits on labelled answers, saves and loads back (the same probabilities to 1e-12), is applied
alike by ``tracecal score``, ``tracecal score-answers``, the gateway (``/score``, the chat endpoint, the app of
``tracecal serve``) and the Python API, gives NaN for a zero-token answer, and refuses bad values with a
`TracecalError`. Each check feeds a class what it reads (`READS`: synthetic traces for ``"traces"`` / ``"score"``,
traces of the tiny HF model carrying hidden-state summaries for ``"hidden"``), and where a surface cannot give it
(trace files and ``/score`` hold no hidden states; a backend without ``hidden_states``) the contract is a
`TracecalError` naming what is missing and what to use instead."""

from __future__ import annotations

import csv
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sklearn.base import clone
from typer.testing import CliRunner

import tracecal
from tests.common.toys import MeanEntropyCalibrator, synthetic_traces
from tracecal.calibrators import CALIBRATOR_CLASSES, READS, Calibrator, register_calibrator
from tracecal.cli.app import app
from tracecal.errors import TracecalError
from tracecal.traces.io import load_traces, save_traces
from tracecal.traces.trace import Trace, TraceBatch

CLASSES = {**CALIBRATOR_CLASSES, "MeanEntropyCalibrator": MeanEntropyCalibrator}
"""Every registered calibrator class (as collected), and the toy registered by `toy_registered`."""
ATOL = 1e-12
runner = CliRunner()


@pytest.fixture(scope="module", autouse=True)
def toy_registered() -> Iterator[None]:
    """The toy class in the registry for this module's tests only, as a user's package would add it."""
    register_calibrator(MeanEntropyCalibrator)
    yield
    del CALIBRATOR_CLASSES["MeanEntropyCalibrator"]


@pytest.fixture(scope="module")
def synthetic() -> tuple[list[Any], np.ndarray]:
    return synthetic_traces()


HIDDEN_PROMPTS = ("What is 2 + 2?", "Name a colour.", "Capital of France?", "Say hi.", "Count to three.", "A fruit?")
HIDDEN_ANSWERS = ("4", "blue", "Paris", "hi there", "one two three", "an apple", "5", "red, I think", "London")


@pytest.fixture(scope="module")
def hidden_answers(tiny_model: Any) -> tuple[list[Any], np.ndarray]:
    """48 answers of the tiny HF model traced with their hidden summaries (the last one empty), labels as the
    synthetic ones (both classes)."""
    prompts = [HIDDEN_PROMPTS[i % len(HIDDEN_PROMPTS)] for i in range(48)]
    answers = [HIDDEN_ANSWERS[(i * 5) % len(HIDDEN_ANSWERS)] for i in range(47)] + [""]
    traces = tiny_model.trace_answers(prompts, answers, hidden_layers="auto")
    return traces, synthetic_traces()[1]


def answers_for(reads: str, request: pytest.FixtureRequest) -> tuple[list[Any], np.ndarray]:
    """Labelled answers carrying what a calibrator that reads ``reads`` reads (the last one a zero-token answer)."""
    return request.getfixturevalue("hidden_answers" if reads == "hidden" else "synthetic")


@pytest.fixture(scope="module")
def data(fitted: dict[str, Any], request: pytest.FixtureRequest) -> tuple[list[Any], np.ndarray]:
    """The answers the calibrator under test was fitted on."""
    return answers_for(type(fitted["cal"]).reads, request)


@pytest.fixture(scope="module", params=sorted(CLASSES))
def fitted(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One calibrator of each class fitted on the answers with tokens, saved; the traces saved beside it."""
    traces, y = answers_for(CLASSES[request.param].reads, request)
    cal = CLASSES[request.param]()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert cal.fit_answers(traces[:-1], y[:-1]) is cal
    folder = tmp_path_factory.mktemp(request.param)
    path = cal.save(folder / "cal.json")
    return {"cal": cal, "path": path, "traces_path": save_traces(traces, folder / "traces.parquet"), "dir": folder}


def test_it_declares_what_it_reads_and_keeps_the_sklearn_conventions(fitted: dict[str, Any]) -> None:
    cal = fitted["cal"]
    assert isinstance(cal, Calibrator) and type(cal).reads in READS
    assert type(cal).__name__ in CALIBRATOR_CLASSES
    assert clone(cal).get_params() == cal.get_params()


def test_it_saves_loads_and_scores_alike(fitted: dict[str, Any], data: Any) -> None:
    traces, _ = data
    cal, back = fitted["cal"], tracecal.load_calibrator(fitted["path"])
    assert type(back) is type(cal) and back.provenance == cal.provenance
    assert back.provenance is not None and back.provenance["model"] == traces[0].model_id
    p = cal.confidence(traces)
    np.testing.assert_allclose(back.confidence(traces), p, atol=ATOL, rtol=0)
    if cal.reads != "hidden":  # a TraceBatch holds numbers only (refused for a hidden reader, tested below)
        np.testing.assert_allclose(back.confidence(TraceBatch.from_traces(traces)), p, atol=ATOL, rtol=0)
    assert p.shape == (len(traces),) and np.isnan(p[-1]) and np.all((p[:-1] >= 0) & (p[:-1] <= 1))


def test_it_is_deterministic(fitted: dict[str, Any], data: Any) -> None:
    traces, y = data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = clone(fitted["cal"]).fit_answers(traces[:-1], y[:-1])
    np.testing.assert_array_equal(again.confidence(traces), fitted["cal"].confidence(traces))


def test_tracecal_score_applies_it(fitted: dict[str, Any], data: Any) -> None:
    out = fitted["dir"] / "scored.csv"
    args = ["score", str(fitted["traces_path"]), "--calibrator", str(fitted["path"]), "--csv", str(out)]
    r = runner.invoke(app, args)
    if fitted["cal"].reads == "hidden":  # trace files hold no hidden states: one line saying what to use
        assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
        assert "hidden states" in r.output and "score-answers" in r.output and not out.exists()
        return
    assert r.exit_code == 0, r.output
    with open(out, encoding="utf-8") as f:
        got = np.array([float(row["p_trace_plus"]) for row in csv.DictReader(f)])
    np.testing.assert_allclose(got, fitted["cal"].confidence(data[0]), atol=ATOL, rtol=0)


def test_the_gateway_serves_it(fitted: dict[str, Any], data: Any, request: pytest.FixtureRequest) -> None:
    from tests.serve.helpers import CHAT, FakeModel, fake_trace
    from tracecal.serve import ServeConfig, create_app

    traces, _ = data
    body = {"surprisal": [t.surprisal.tolist() for t in traces], "entropy": [t.entropy.tolist() for t in traces]}
    cal = tracecal.load_calibrator(fitted["path"])
    if cal.needs:  # what it reads needs a backend capability the fake backend lacks: refused at start, saying so
        with pytest.raises(TracecalError, match="has no .*--backend hf"):
            create_app(FakeModel(), cal, ServeConfig())
        return check_served_by_hf(cal, body, request.getfixturevalue("tiny_model"))
    with TestClient(create_app(FakeModel(), cal, ServeConfig())) as c:
        scored = c.post("/score", json=body).json()
        chat = c.post("/v1/chat/completions", json=CHAT).json()
    p = fitted["cal"].confidence(traces)
    np.testing.assert_allclose(np.array(scored["trace_plus"][:-1]), p[:-1], atol=ATOL, rtol=0)
    assert scored["trace_plus"][-1] is None  # the zero-token answer
    conf = chat["choices"][0]["confidence"]
    assert conf["calibrator"] == type(cal).__name__
    assert conf["probability"] == pytest.approx(float(cal.confidence([fake_trace(None)])[0]), abs=ATOL)


def check_served_by_hf(cal: Any, body: dict[str, Any], model: Any) -> None:
    """The gateway on an HF backend: a chat answer's probability is the calibrator's on that answer traced with what
    it reads (`Calibrator.backend_options`), recorded in the generation pass itself (no second pass: the model's
    ``trace_answers`` fails here), an answer stopped on risk included; ``/score`` (numbers only) says what it lacks."""
    from tracecal.serve import ServeConfig, create_app

    chat = {"model": model.model_id, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 6}
    stopped = chat | {"stop_on_risk": 1.0}  # c_TRACE < 1: ends the answer after risk_min_tokens = 2 tokens
    with pytest.MonkeyPatch.context() as mp, TestClient(create_app(model, cal, ServeConfig(risk_min_tokens=2))) as c:
        mp.setattr(model, "trace_answers", lambda *a, **k: pytest.fail("the gateway ran a second pass"))
        scored = c.post("/score", json=body)
        got = [c.post("/v1/chat/completions", json=b).json()["choices"][0] for b in (chat, stopped)]
    assert scored.status_code == 422 and "hidden states" in scored.json()["error"]["message"]
    ids = model.generate([chat["messages"]], max_new_tokens=6)[0].token_ids.tolist()
    assert got[1]["finish_reason"] == "risk" and got[1]["confidence"]["tokens"] == 2 < len(ids)
    for choice, kept in zip(got, (ids, ids[:2]), strict=True):
        conf = choice["confidence"]
        assert conf["calibrator"] == type(cal).__name__ and conf["tokens"] == len(kept)
        forced = model.trace_answers([chat["messages"]], [kept], **cal.backend_options())  # the teacher-forced summary
        assert forced[0].hidden_layers == tuple(cal.backend_options()["hidden_layers"])
        assert conf["probability"] == pytest.approx(float(cal.confidence(forced)[0]), abs=1e-5)


def test_tracecal_serve_builds_an_app_on_it(fitted: dict[str, Any]) -> None:
    import typer

    from tracecal.cli.serve import serve_app

    cmd = typer.main.get_command(app).commands["serve"]  # type: ignore[attr-defined]  # a click Group
    options = {p.name: p.default for p in cmd.params} | {"no_model": True, "calibrator": fitted["path"]}
    if fitted["cal"].needs:  # a --no-model server has no backend to give what it reads
        with pytest.raises(TracecalError, match="--no-model"):
            serve_app(options)
        return
    with TestClient(serve_app(options)) as c:
        health = c.get("/health").json()
    assert health["calibrator"]["kind"] == type(fitted["cal"]).__name__


def test_tracecal_score_answers_applies_it(fitted: dict[str, Any], tiny_model: Any, monkeypatch: Any) -> None:
    import json

    import tracecal.backends

    monkeypatch.setattr(tracecal.backends, "load_model", lambda *a, **k: tiny_model)
    answers = fitted["dir"] / "answers.jsonl"
    rows = [{"id": "a", "prompt": "What is 2 + 2?", "answer": "4"}, {"id": "b", "prompt": "Say hi.", "answer": ""}]
    answers.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = fitted["dir"] / "answers.parquet"
    args = ["score-answers", str(answers), "--out", str(out), "--calibrator", str(fitted["path"])]
    r = runner.invoke(app, [*args, "--allow-foreign-calibrator"])
    assert r.exit_code == 0, r.output
    import pyarrow.parquet as pq

    got = pq.read_table(out).column("p_correct").to_numpy()
    cal, traces = fitted["cal"], load_traces(out)
    if cal.backend_options():  # what it reads beyond the trace file: traced again with it
        prompts, texts = [r["prompt"] for r in rows], [r["answer"] for r in rows]
        traces = tiny_model.trace_answers(prompts, texts, **cal.backend_options())
    np.testing.assert_allclose(got, cal.confidence(traces), atol=ATOL, rtol=0)
    assert np.isnan(got[1])  # the empty answer


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        (lambda y: np.where(np.arange(len(y)) == 3, np.nan, y), "0 .*1|labels"),
        (lambda y: y[:-1], "shape|length"),
        (lambda y: y + 1, "0 .*1|labels"),
        (lambda y: y.reshape(-1, 1), "shape|1-D"),
    ],
    ids=["nan-label", "too-few-labels", "label-2", "2-d-labels"],
)
@pytest.mark.parametrize("name", sorted(CLASSES))
def test_bad_labels_are_refused_with_a_tracecal_error(
    name: str, labels: Any, message: str, request: pytest.FixtureRequest
) -> None:
    traces, y = answers_for(CLASSES[name].reads, request)
    with pytest.raises(TracecalError, match=message):
        CLASSES[name]().fit_answers(traces[:-1], labels(y[:-1].astype(np.float64)))


def test_what_it_cannot_read_is_refused_with_a_tracecal_error(fitted: dict[str, Any], data: Any) -> None:
    traces, _ = data
    cal = fitted["cal"]
    with pytest.raises(TracecalError, match="TraceBatch or a list of Trace"):
        cal.confidence("not traces")
    if cal.reads == "hidden":
        bare = [Trace(text=t.text, token_ids=t.token_ids, surprisal=t.surprisal, entropy=t.entropy) for t in traces]
        for without in (bare, TraceBatch.from_traces(traces)):
            with pytest.raises(TracecalError, match="reads hidden states.*score-answers"):
                cal.confidence(without)
    if cal.reads == "score":
        with pytest.raises(TracecalError, match="one number per answer"):
            cal.confidence(traces, score=np.zeros(len(traces) + 1))
    else:
        with pytest.raises(TracecalError, match="reads the answers' traces"):
            cal.confidence(score=np.zeros(3))
