"""The evaluation over a run directory: resumable runs, identity checks, options validated before anything is
written, and a pass + estimator added from outside the package. (The protocol: test_protocol.py; the settings:
test_config.py.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from tracecal.estimators import REGISTRY, Estimator, Inputs
from tracecal.evaluation.config import ConfigError, EvalConfig, resolve_dtype
from tracecal.evaluation.run import evaluate
from tracecal.evaluation.runstore import ConfigMismatchError, RunStore, RunStoreError
from tracecal.passes import ANSWER, PASSES, Pass

FAST = dict(limit=12, n_seeds=3, shard_size=4, max_new_tokens=6, batch_size=4)


class Counting:
    """Wraps a backend and counts the prompts it generates for and the beam / forward calls it makes."""

    def __init__(self, lm: Any, fail_after: int | None = None) -> None:
        self.lm, self.generated, self.fail_after = lm, 0, fail_after

    def __getattr__(self, name: str) -> Any:
        return getattr(self.lm, name)

    def generate(self, prompts: list[Any], **kw: Any) -> Any:
        if self.fail_after is not None and self.generated >= self.fail_after:
            raise KeyboardInterrupt("simulated kill")
        self.generated += len(prompts)
        return self.lm.generate(prompts, **kw)


def test_run_is_resumable_and_rescoring_never_generates(tmp_path: Path, tiny_model) -> None:  # type: ignore[no-untyped-def]
    run = tmp_path / "run"
    base = {"tasks": ["triviaqa", "svamp"], "estimators": ["trace-only", "extra"]} | FAST
    cfg = lambda **k: EvalConfig(**base | k)  # noqa: E731
    killed = Counting(tiny_model, fail_after=8)
    with pytest.raises(KeyboardInterrupt):
        evaluate(run, cfg(), model=killed)
    assert killed.generated == 8  # two shards written before the "kill"
    resumed = Counting(tiny_model)
    res = evaluate(run, cfg(), model=resumed)
    assert resumed.generated == 24 - 8  # only what was missing
    assert res is not None and res.tasks["triviaqa"]["n"] == 12 and res.tasks["svamp"]["n"] == 12
    assert np.isfinite(res.metrics["triviaqa"]["p_true"]["brier"]["mean"])
    saved = json.loads((run / "results.json").read_text())
    assert saved["metrics"]["svamp"]["trace"]["ece"]["n_seeds"] == 3
    assert (run / "results.md").read_text().startswith("| task |")
    times = saved["timings"]  # each stage's wall seconds and the worker's process CPU seconds, over both runs
    assert all(0 < times[f"cpu/{s}/{t}"] for s in ("generate", "extra") for t in ("triviaqa", "svamp"))
    # re-scoring with other settings generates nothing (score-only loads no model at all)
    never = Counting(tiny_model, fail_after=0)
    res2 = evaluate(run, cfg(n_seeds=5, calibrator="isotonic", estimators=["trace"]), model=never)
    assert never.generated == 0 and res2 is not None and res2.metrics["triviaqa"]["trace"]["auroc"]["n_seeds"] <= 5


def test_score_only_reports_estimators_whose_pass_is_missing_as_not_run(tmp_path: Path, tiny_model) -> None:  # type: ignore[no-untyped-def]
    run = tmp_path / "run"
    evaluate(run, EvalConfig(tasks=["triviaqa"], estimators=["trace"], **FAST), model=tiny_model)
    with pytest.warns(UserWarning, match="extra pass incomplete"):
        res = evaluate(run, EvalConfig(tasks=["triviaqa"], estimators=["trace", "p_true"], **FAST), score_only=True)
    assert res is not None and res.tasks["triviaqa"]["not_run"] == ["p_true"]
    assert np.isnan(res.metrics["triviaqa"]["p_true"]["auroc"]["mean"])
    assert np.isfinite(res.metrics["triviaqa"]["trace"]["brier"]["mean"])


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"limit": -5}, "limit must be a whole number ≥ 1 or None, got -5"),
        ({"dtype": "float8"}, "dtype must be one of auto, float32, bfloat16, float16, got 'float8'"),
        ({"shard_size": 0}, "shard-size must be a whole number ≥ 1, got 0"),
        ({"cal_frac": 1.0}, "cal-frac must be a finite number in"),
        ({"n_seeds": 0}, r"n-seeds must be a whole number in \[1, 10000\], got 0"),
        ({"calibrator": "bogus"}, "calibrator"),
        ({"estimators": ["tarce"]}, "unknown estimator 'tarce'. Did you mean 'trace'?"),
        ({"on_error": "ignore"}, "on-error must be one of skip, raise, got 'ignore'"),
    ],
)
def test_invalid_options_write_nothing(tmp_path: Path, tiny_model, override: dict[str, Any], message: str) -> None:  # type: ignore[no-untyped-def]
    run = tmp_path / "run"
    kw = FAST | {"estimators": ["trace"]} | override
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.").replace("?", r"\?")):
        evaluate(run, EvalConfig(tasks=["triviaqa"], **kw), model=tiny_model)
    assert not run.exists()
    # the corrected command runs
    assert evaluate(run, EvalConfig(tasks=["triviaqa"], estimators=["trace"], **FAST), model=tiny_model) is not None


def test_a_model_that_does_not_load_writes_nothing(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with pytest.raises(FileNotFoundError, match="GGUF file not found"):
        evaluate(run, EvalConfig(tasks=["triviaqa"], model=str(tmp_path / "typo.gguf"), estimators=["trace"], **FAST))
    assert not (run / "config.json").exists()


def test_a_user_file_is_a_task_even_when_named_like_a_builtin(tmp_path: Path, tiny_model) -> None:  # type: ignore[no-untyped-def]
    data = tmp_path / "triviaqa.jsonl"
    rows = [{"question": f"Capital number {i}?", "answer": ["Paris", "Paris, France"]} for i in range(6)]
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    run = tmp_path / "run"
    res = evaluate(run, EvalConfig(tasks=[str(data)], estimators=["trace"], **FAST), model=tiny_model)
    assert res is not None and list(res.tasks) == ["file-triviaqa"] and res.tasks["file-triviaqa"]["n"] == 6
    stored = json.loads((run / "config.json").read_text())["config"]["tasks"]
    assert stored == [str(data.resolve())]  # resumable from another working directory
    res2 = evaluate(run, EvalConfig(tasks=stored, estimators=["trace"], **FAST), score_only=True)
    assert res2 is not None and res2.tasks["file-triviaqa"]["n"] == 6


def test_unknown_task_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="triviaq"):
        evaluate(tmp_path / "run", EvalConfig(tasks=["triviaq"], estimators=["trace"], **FAST))
    assert not (tmp_path / "run").exists()


def test_identity_records_the_resolved_dtype(tmp_path: Path, tiny_model) -> None:  # type: ignore[no-untyped-def]
    run = tmp_path / "run"
    evaluate(run, EvalConfig(tasks=["triviaqa"], estimators=["trace"], dtype="auto", **FAST), model=tiny_model)
    ident = json.loads((run / "config.json").read_text())["identity"]
    assert ident["dtype"] == "float32"  # auto with a loaded model: its weights' dtype
    # an explicit float32 after auto is the same run
    evaluate(run, EvalConfig(tasks=["triviaqa"], estimators=["trace"], dtype="float32", **FAST), model=tiny_model)
    with pytest.raises(ConfigMismatchError, match="dtype='float32', not 'bfloat16'"):
        evaluate(run, EvalConfig(tasks=["triviaqa"], estimators=["trace"], dtype="bfloat16", **FAST), model=tiny_model)
    # a run made on a GPU (auto → bfloat16) is refused for a float32 model
    gpu = RunStore(tmp_path / "gpu")
    ident = EvalConfig(tasks=[], model=tiny_model.model_id, **FAST).identity()
    gpu.open({"tasks": ["triviaqa"]}, ident | {"dtype": resolve_dtype("auto", cuda=True)})
    with pytest.raises(ConfigMismatchError, match="bfloat16"):
        evaluate(gpu.path, EvalConfig(tasks=["triviaqa"], estimators=["trace"], **FAST), model=tiny_model)


def test_a_resumed_run_keeps_its_dtype_where_auto_now_means_another(tmp_path: Path, tiny_model, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``auto`` is bfloat16 on a CPU with bf16 matrix units (`tracecal.backends.runtime.resolve_dtype`): a new run
    there records bfloat16, but a run that recorded float32 (made where auto meant float32, or before the CPU rule)
    resumes with ``auto`` as float32, its identity unchanged; an explicit other --dtype is refused."""
    import tracecal.backends.runtime as runtime

    run = tmp_path / "run"
    evaluate(run, EvalConfig(tasks=["triviaqa"], estimators=["trace"], dtype="float32", **FAST), model=tiny_model)
    ident = json.loads((run / "config.json").read_text())["identity"]
    monkeypatch.setattr(runtime, "cpu_has_bf16", lambda: True)
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert EvalConfig(tasks=["triviaqa"], **FAST).identity()["dtype"] == "bfloat16"  # a new run's auto
    url = EvalConfig(tasks=["triviaqa"], model="http://127.0.0.1:9/v1", **FAST)
    assert url.identity()["dtype"] == "float32"  # a server's run: the identity it always had (runs resume)
    cfg = EvalConfig(tasks=["triviaqa"], model=tiny_model.model_id, estimators=["trace"], **FAST)
    assert evaluate(run, cfg) is not None  # every shard is there: nothing loads
    assert cfg.dtype == "float32" and json.loads((run / "config.json").read_text())["identity"] == ident
    with pytest.raises(ConfigMismatchError, match="dtype='float32', not 'bfloat16'"):
        evaluate(run, EvalConfig(tasks=["triviaqa"], model=tiny_model.model_id, dtype="bfloat16", **FAST))


def test_a_run_made_without_backend_resumes_as_hf_and_never_as_llama_cpp(tmp_path: Path, tiny_model) -> None:  # type: ignore[no-untyped-def]
    """A run directory written before ``backend`` existed (neither its config nor its identity has it) resumes on the
    HF backend with its identity unchanged; a llama.cpp run is refused there, and an HF run in a llama.cpp one."""
    run = tmp_path / "old"
    evaluate(run, EvalConfig(tasks=["triviaqa"], estimators=["trace"], **FAST), model=tiny_model)
    doc = json.loads((run / "config.json").read_text())
    doc["config"].pop("backend")  # as an older tracecal wrote it
    (run / "config.json").write_text(json.dumps(doc))
    ident = doc["identity"]
    assert "backend" not in ident
    res = evaluate(run, EvalConfig(tasks=["triviaqa"], estimators=["trace", "p_true"], **FAST), model=tiny_model)
    assert res is not None and res.tasks["triviaqa"]["not_run"] == []  # the P(True) pass was added to it
    assert json.loads((run / "config.json").read_text())["identity"] == ident
    with pytest.raises(ConfigMismatchError, match="backend='hf', not 'llamacpp'"):
        evaluate(run, EvalConfig(tasks=["triviaqa"], estimators=["trace"], backend="llamacpp", **FAST))
    lc = RunStore(tmp_path / "lc")
    lc.open({"tasks": ["triviaqa"]}, EvalConfig(tasks=["triviaqa"], backend="llamacpp", **FAST).identity())
    with pytest.raises(ConfigMismatchError, match="backend='llamacpp', not 'hf'"):
        evaluate(lc.path, EvalConfig(tasks=["triviaqa"], estimators=["trace"], **FAST), model=tiny_model)
    with pytest.raises(ConfigError, match="the model given is a HFModel, not --backend llamacpp"):
        evaluate(lc.path, EvalConfig(tasks=["triviaqa"], estimators=["trace"], backend="llamacpp"), model=tiny_model)


def test_a_run_made_without_embedder_dtype_resumes_in_float32(tmp_path: Path, tiny_model, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """On a CPU with bf16 units, ``auto`` makes a new run's embedder bf16 (in its identity), but a run directory made
    before the option (a float32 embedder; neither config nor identity has the key) resumes with ``auto`` and its
    identity unchanged; an explicit other dtype is refused either way."""
    import tracecal.backends.runtime as runtime

    monkeypatch.setattr(runtime, "cpu_has_bf16", lambda: True)
    run, new = tmp_path / "old", tmp_path / "new"
    fp32 = EvalConfig(tasks=["triviaqa"], estimators=["trace"], embedder_dtype="float32", **FAST)
    evaluate(run, fp32, model=tiny_model)
    doc = json.loads((run / "config.json").read_text())
    doc["config"].pop("embedder_dtype")  # as an older tracecal wrote it
    (run / "config.json").write_text(json.dumps(doc))
    ident = doc["identity"]
    assert "embedder_dtype" not in ident
    cfg = EvalConfig(tasks=["triviaqa"], estimators=["trace", "p_true"], **FAST)
    res = evaluate(run, cfg, model=tiny_model)
    assert res is not None and res.tasks["triviaqa"]["not_run"] == [] and cfg.embedder_dtype == "float32"
    assert json.loads((run / "config.json").read_text())["identity"] == ident
    with pytest.raises(ConfigMismatchError, match="embedder_dtype='float32', not 'bfloat16'"):
        evaluate(run, EvalConfig(tasks=["triviaqa"], estimators=["trace"], embedder_dtype="bfloat16", **FAST))
    evaluate(new, EvalConfig(tasks=["triviaqa"], estimators=["trace"], **FAST), model=tiny_model)
    doc = json.loads((new / "config.json").read_text())
    assert doc["identity"]["embedder_dtype"] == doc["config"]["embedder_dtype"] == "bfloat16"
    monkeypatch.setattr(runtime, "cpu_has_bf16", lambda: False)  # resumed on a CPU without: still the run's own
    assert evaluate(new, EvalConfig(tasks=["triviaqa"], estimators=["trace"], **FAST), model=tiny_model) is not None
    with pytest.raises(ConfigMismatchError, match="embedder_dtype='bfloat16', not 'float32'"):
        evaluate(new, EvalConfig(tasks=["triviaqa"], estimators=["trace"], embedder_dtype="float32", **FAST))


def test_a_loaded_llama_cpp_model_makes_a_llama_cpp_run(tmp_path: Path, tokenizer) -> None:  # type: ignore[no-untyped-def]
    from tracecal.backends.llamacpp import LlamaCppModel

    lc = LlamaCppModel.load(n_threads=1, tokenizer=tokenizer)
    fast = FAST | {"limit": 4, "cal_frac": 0.5}
    with pytest.raises(ConfigError, match="the model given is a LlamaCppModel, not --backend hf"):
        evaluate(tmp_path / "r", EvalConfig(tasks=["triviaqa"], estimators=["trace"], backend="hf", **fast), model=lc)
    cfg = EvalConfig(tasks=["triviaqa"], estimators=["trace", "beam_ratio"], **fast)
    res = evaluate(tmp_path / "r", cfg, model=lc)
    assert cfg.backend == "llamacpp" and res is not None and res.tasks["triviaqa"]["n"] == 4
    ident = json.loads((tmp_path / "r" / "config.json").read_text())["identity"]
    assert ident["backend"] == "llamacpp" and ident["model"] == "smollm2-135m-instruct" and ident["dtype"] is None
    why = "llama.cpp has no beam search (llama-cpp-python decodes one sequence): use --backend hf"
    assert res.tasks["triviaqa"]["not_run_reasons"] == {"beam_ratio": why}
    assert {t.decoding["backend"] for t in RunStore(tmp_path / "r").read_traces("triviaqa")} == {"llama.cpp"}


def test_run_dir_that_is_a_file_is_a_clear_error(tmp_path: Path) -> None:
    f = tmp_path / "run"
    f.write_text("x")
    with pytest.raises(RunStoreError, match="is a file, not a run directory"):
        evaluate(f, EvalConfig(tasks=["triviaqa"], estimators=["trace"], **FAST))


# ------------------------------------------------------------------------------ a pass and an estimator from outside
class AnswerCharsPass(Pass):
    """A new stat: the number of characters of each answer (needs no model)."""

    name = "answer_chars"
    provides: ClassVar[dict[str, str]] = {"n_chars": ANSWER}
    resource = None

    def compute(self, model: Any, task: Any, examples: Any, traces: Any) -> dict[str, Any]:
        assert model is None and len(examples) == len(traces)
        return {"n_chars": [len(t.text) for t in traces]}


class ShortAnswerEstimator(Estimator):
    """Shorter answers are more confident: −n_chars."""

    name = "short_answer"
    family = "test"
    stats = frozenset({"n_chars"})

    def score(self, inputs: Inputs) -> np.ndarray:
        return -inputs.stat("n_chars")


def test_a_new_pass_and_estimator_are_scored_without_editing_tracecal(tmp_path: Path, tiny_model, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setitem(PASSES, AnswerCharsPass.name, AnswerCharsPass)
    monkeypatch.setitem(REGISTRY, ShortAnswerEstimator.name, ShortAnswerEstimator)
    run = tmp_path / "run"
    res = evaluate(run, EvalConfig(tasks=["triviaqa"], estimators=["trace", "short_answer"], **FAST), model=tiny_model)
    assert res is not None and "short_answer" in res.metrics["triviaqa"]
    assert res.estimators["short_answer"]["passes"] == ["answer_chars", "traces"]
    stored = RunStore(run).read_pass("answer_chars", "triviaqa")
    answers = [t.text for t in RunStore(run).read_traces("triviaqa")]
    assert stored is not None and stored.column("n_chars").to_pylist() == [len(a) for a in answers]
    scores = RunStore(run).read_table("scores")
    assert scores is not None and scores.column("short_answer").to_pylist() == [-len(a) for a in answers]


def test_evaluate_cli_reports_bad_options_and_shows_one_progress_view(tmp_path: Path, tiny_model, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from typer.testing import CliRunner

    import tracecal.backends as hf
    from tracecal.cli.app import app

    monkeypatch.setattr(hf, "load_model", lambda *a, **k: tiny_model)
    runner = CliRunner()
    run = tmp_path / "run"
    for args, msg in [
        (["--limit", "-5"], "limit must be a whole number ≥ 1 or None, got -5"),
        (["--dtype", "float8"], "dtype must be one of"),
        (["--shard-size", "0"], "shard-size must be a whole number ≥ 1"),
        (["--metrics", "aurocc"], "unknown metric 'aurocc'"),
        (["--tasks", "nope"], "nope"),
    ]:
        r = runner.invoke(app, ["evaluate", "--run-dir", str(run), "--tasks", "triviaqa", *args])
        assert r.exit_code == 2 and msg in r.output, (args, r.output)
        assert "Traceback" not in r.output and not run.exists()
    f = tmp_path / "file"
    f.write_text("")
    r = runner.invoke(app, ["evaluate", "--run-dir", str(f), "--tasks", "triviaqa"])
    assert r.exit_code == 2 and "is a file, not a run directory" in r.output
    args = [
        "evaluate",
        "--run-dir",
        str(run),
        "--tasks",
        "triviaqa",
        "--limit",
        "8",
        "--shard-size",
        "4",
        "--estimators",
        "trace",
        "--seeds",
        "2",
        "--max-new-tokens",
        "4",
        "--no-report",
    ]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "whole run" in r.output and "AUROC" in r.output
    # re-scoring takes what the run holds (tasks, limit, ...) from its config.json: no need to repeat them
    r = runner.invoke(
        app,
        [
            "evaluate",
            "--run-dir",
            str(run),
            "--score-only",
            "--estimators",
            "trace,mean_prob",
            "--seeds",
            "3",
            "--no-report",
        ],
    )
    assert r.exit_code == 0, r.output
    assert "mean_prob" in r.output and json.loads((run / "results.json").read_text())["tasks"]["triviaqa"]["n"] == 8
    r = runner.invoke(app, ["evaluate", "--run-dir", str(tmp_path / "nothing"), "--score-only"])
    assert r.exit_code == 2 and "not a run directory" in r.output
