"""The four recipes of docs/architecture.md ("add an estimator / a pass / a calibrator / a backend"), run as they
stand there: each code block executed with the random-weight test model, then the member it added checked through
the public entry points (evaluate, `tracecal.load_calibrator`, `tracecal score`), then unregistered."""

from __future__ import annotations

import csv
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tracecal
from tracecal.backends import registry as backends
from tracecal.calibrators import CALIBRATOR_CLASSES
from tracecal.estimators import REGISTRY as ESTIMATORS
from tracecal.passes import PASSES

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
RECIPES = ("Add an estimator", "Add a pass", "Add a calibrator", "Add a backend")


def recipe(title: str) -> str:
    """The one ```python block under the heading ``### title`` of docs/architecture.md."""
    text = DOC.read_text()
    start = text.index(f"\n### {title}\n")
    end = text.find("\n## ", start + 1)
    end = min(e for e in (text.find("\n### ", start + 1), end, len(text)) if e > 0)
    blocks = re.findall(r"```python\n(.*?)```", text[start:end], flags=re.DOTALL)
    assert len(blocks) == 1, f"{title}: one python block expected, found {len(blocks)}"
    return blocks[0]


@pytest.fixture()
def registries() -> Iterator[None]:
    """Whatever a recipe registers is gone afterwards: every registry restored to what it held before."""
    saved = [(r, dict(r)) for r in (ESTIMATORS, PASSES, CALIBRATOR_CLASSES, backends.REGISTRY)]
    yield
    for reg, before in saved:
        reg.clear()
        reg.update(before)


def run_recipe(title: str, tmp_path: Path, **names: Any) -> dict[str, Any]:
    folder = tmp_path / "scratch"
    folder.mkdir()
    ns: dict[str, Any] = {"__name__": "recipe", "run_dir": tmp_path / "run", "folder": folder, **names}
    exec(compile(recipe(title), f"docs/architecture.md: {title}", "exec"), ns)
    return ns


def test_every_recipe_is_in_the_document() -> None:
    for title in RECIPES:
        assert "register" in recipe(title)


def test_the_registries_are_restored(registries: None) -> None:
    PASSES["x"] = PASSES["traces"]
    assert "x" in PASSES  # the fixture removes it: the next test sees the registry as it was


def test_the_restore_held() -> None:
    assert "x" not in PASSES


@pytest.mark.filterwarnings("ignore::tracecal.stats.metrics.SingleClassWarning")  # random weights: wrong answers
def test_add_an_estimator(registries: None, tmp_path: Path, tiny_model: Any) -> None:
    res = run_recipe("Add an estimator", tmp_path, model=tiny_model)["res"]
    assert "neg_max_surprisal" in ESTIMATORS and "neg_max_surprisal" in res.metrics["triviaqa"]
    from tracecal.evaluation.runstore import RunStore

    traces = RunStore(tmp_path / "run").read_traces("triviaqa")
    stored = RunStore(tmp_path / "run").read_table("scores")
    want = [-max(t.surprisal) if len(t.surprisal) else None for t in traces]
    got = stored.column("neg_max_surprisal").to_pylist()
    np.testing.assert_allclose(np.array(got, dtype=float), np.array(want, dtype=float), rtol=0, atol=1e-12)


@pytest.mark.filterwarnings("ignore::tracecal.stats.metrics.SingleClassWarning")
def test_add_a_pass(registries: None, tmp_path: Path, tiny_model: Any) -> None:
    from tracecal.evaluation.runstore import RunStore

    ns = run_recipe("Add a pass", tmp_path, model=tiny_model)
    assert ns["passes"] == ["answer_words", "traces"]
    store = RunStore(tmp_path / "run")
    stored = store.read_pass("answer_words", "triviaqa")
    answers = [t.text for t in store.read_traces("triviaqa")]
    assert stored is not None and stored.column("n_words").to_pylist() == [len(a.split()) for a in answers]


def test_add_a_calibrator(registries: None, tmp_path: Path) -> None:
    ns = run_recipe("Add a calibrator", tmp_path)
    cal, back, p, traces, y = ns["cal"], ns["back"], ns["p"], ns["traces"], ns["y"]
    assert type(back).__name__ == "HistogramBinning" and CALIBRATOR_CLASSES["HistogramBinning"] is type(back)
    assert len(set(y.tolist())) == 2 and np.all((p >= 0) & (p <= 1))
    np.testing.assert_array_equal(p, cal.confidence(traces))  # saved and loaded: the same numbers
    with open(tmp_path / "scratch" / "scored.csv", encoding="utf-8") as f:
        got = np.array([float(row["p_trace_plus"]) for row in csv.DictReader(f)])
    np.testing.assert_allclose(got, p, rtol=0, atol=1e-12)  # `tracecal score` applied it
    higher = p[np.argsort(tracecal.trace_confidence(traces))]
    assert higher[-20:].mean() > higher[:20].mean()  # it calibrates c_TRACE, a rising map
    with pytest.raises(tracecal.TracecalError, match="n_bins"):
        type(cal)(n_bins=0).fit_answers(traces, y)


@pytest.mark.filterwarnings("ignore::tracecal.stats.metrics.SingleClassWarning")  # the echo answers are wrong
def test_add_a_backend(registries: None, tmp_path: Path) -> None:
    ns = run_recipe("Add a backend", tmp_path)
    assert backends.get_backend("echo").can(backends.BATCHING)
    res = ns["res"]
    assert res.tasks["triviaqa"]["n"] == 8 and "trace" in res.metrics["triviaqa"]
    assert ns["not_run"] == {"beam_ratio": "the echo backend has no beam search scores (beam_scores)"}
    model = tracecal.load_model("echo-2", backend="echo")
    assert model.generate(["what is the capital of France"])[0].text == "France"
