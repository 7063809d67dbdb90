"""`tracecal evaluate` (tracecal.cli.evaluate): options → a validated EvalConfig, refused before anything is
written, ``--score-only`` defaults from the run, and the progress view without a terminal."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from tracecal.cli.app import app
from tracecal.cli.evaluate import CONFIG_OPTIONS, STORED_WITH_SCORE_ONLY, evaluate_config
from tracecal.testing import write_synthetic_run


def test_the_config_options_are_eval_config_fields() -> None:
    from tracecal.evaluation.config import EvalConfig

    names = set(EvalConfig(["triviaqa"]).to_dict())
    assert set(CONFIG_OPTIONS) <= names and set(STORED_WITH_SCORE_ONLY) <= names


def test_evaluate_config_splits_tasks_and_validates() -> None:
    cfg = evaluate_config(tasks=" triviaqa, svamp ,", estimators="trace", n_seeds=3)
    assert cfg.tasks == ["triviaqa", "svamp"] and cfg.n_seeds == 3
    with pytest.raises(ValueError, match="limit"):
        evaluate_config(tasks="triviaqa", limit=-5)


def test_score_only_takes_the_runs_settings(tmp_path: Path) -> None:
    run = write_synthetic_run(tmp_path / "run", tasks=("triviaqa",), n_per_task=20, n_seeds=2)
    doc = json.loads((run / "config.json").read_text())
    doc["config"] |= {"n_boot": 7, "sel_alpha": 0.4}
    (run / "config.json").write_text(json.dumps(doc))
    cfg = evaluate_config(run, tasks="svamp", estimators="trace")  # outside a command: every stored value
    assert cfg.tasks == ["triviaqa"] and cfg.n_boot == 7 and cfg.sel_alpha == 0.4


def _score_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[Any, Any]:
    """``evaluate --score-only`` on a synthetic run (config: triviaqa, svamp; limit 20; float32) with ``args``;
    the run itself replaced by one that records the config it is given."""
    import tracecal.evaluation.run as run_module

    run = tmp_path / "run"
    if not run.exists():
        write_synthetic_run(run, tasks=("triviaqa", "svamp"), n_per_task=20, n_seeds=2)
    seen: dict[str, Any] = {}
    monkeypatch.setattr(run_module, "evaluate", lambda _run, cfg, *a, **k: seen.setdefault("cfg", cfg) and None)
    r = CliRunner().invoke(app, ["evaluate", "--score-only", "--run-dir", str(run), "--no-report", *args])
    return r, seen.get("cfg")


def test_score_only_options_given_win_or_are_refused_with_both_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every `STORED_WITH_SCORE_ONLY` option typed with --score-only: a scoring one wins over config.json, one of
    what the run holds is refused naming both values unless it equals the stored one; none is silently replaced."""
    won = {
        "tasks": ("svamp", ["svamp"]),
        "data_dir": (str(tmp_path), str(tmp_path)),
        "on_error": ("raise", "raise"),
        "n_boot": ("10", 10),
        "level": ("0.9", 0.9),
        "sel_alpha": ("0.3", 0.3),
        "sel_delta": ("0.2", 0.2),
        "sel_holdout": ("0.4", 0.4),
    }
    held = {
        "limit": ("100", "limit=20"),
        "model": ("another", "model='synthetic'"),
        "dtype": ("bfloat16", "dtype='float32'"),
        "backend": ("llamacpp", "backend='auto'"),
        "embedder_dtype": ("bfloat16", "embedder_dtype='auto'"),
        "max_new_tokens": ("5", "max_new_tokens=None"),
        "shard_size": ("3", "shard_size=64"),
    }
    assert set(won) | set(held) == set(STORED_WITH_SCORE_ONLY)
    for key, (arg, want) in won.items():
        r, cfg = _score_only(tmp_path, monkeypatch, f"--{key.replace('_', '-')}", arg)
        assert r.exit_code == 0, r.output
        assert getattr(cfg, key) == want, key
    for key, (arg, stored) in held.items():
        option = f"--{key.replace('_', '-')}"
        r, cfg = _score_only(tmp_path, monkeypatch, option, arg)
        line = _one_line_error(r)
        assert cfg is None and f"{option} {arg} conflicts with {stored} in {tmp_path / 'run' / 'config.json'}" in line
        assert "--score-only scores what the run holds" in line
    for option, same in (("--limit", "20"), ("--dtype", "float32"), ("--model", "synthetic"), ("--shard-size", "64")):
        r, cfg = _score_only(tmp_path, monkeypatch, option, same)  # the stored value itself: accepted
        assert r.exit_code == 0 and cfg is not None, r.output
    r, cfg = _score_only(tmp_path, monkeypatch, "--tasks", "svamp,mlqa")
    assert "--tasks svamp,mlqa: " in _one_line_error(r) and "holds only triviaqa,svamp" in r.output
    r, cfg = _score_only(tmp_path, monkeypatch)  # nothing given: the run's own settings
    assert r.exit_code == 0 and cfg.tasks == ["triviaqa", "svamp"] and cfg.limit == 20 and cfg.n_boot == 1000


def test_a_bad_value_in_config_json_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _score_only(tmp_path, monkeypatch)
    path = tmp_path / "run" / "config.json"
    doc = json.loads(path.read_text())
    for key, value, msg in (("n_boot", -3, "n_boot must be"), ("sel_alpha", 2, "sel_alpha must be")):
        bad = json.loads(json.dumps(doc))
        bad["config"][key] = value
        path.write_text(json.dumps(bad))
        r, cfg = _score_only(tmp_path, monkeypatch)
        line = _one_line_error(r)
        source = f"config.json of {path.parent}"
        assert line.startswith(f"error: {source}: {msg}") and f"give --{key.replace('_', '-')}" in line, line
        r, cfg = _score_only(tmp_path, monkeypatch, f"--{key.replace('_', '-')}", "5" if key == "n_boot" else "0.2")
        assert r.exit_code == 0, r.output  # given on the command line: the stored value is not used


def test_bad_options_write_nothing(tmp_path: Path) -> None:
    run = tmp_path / "run"
    for args, msg in [
        (["--metrics", "aurocc"], "unknown metric 'aurocc'"),
        (["--threads", "0"], "--threads must be a whole number in [1, 4096], got 0"),
        (["--shard-size", "0"], "shard-size"),
        (["--embedder-dtype", "fp16"], "embedder-dtype must be one of auto, float32, bfloat16, got 'fp16'"),
    ]:
        r = CliRunner().invoke(app, ["evaluate", "--run-dir", str(run), "--tasks", "triviaqa", *args])
        assert r.exit_code == 2 and msg in r.output, r.output
        assert not run.exists()


def _one_line_error(r: object) -> str:
    out = r.output  # type: ignore[attr-defined]
    assert r.exit_code == 2 and "Traceback" not in out, out  # type: ignore[attr-defined]
    lines = [ln for ln in out.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, out
    return lines[0]


SMALL = ["--tasks", "triviaqa", "--limit", "8", "--shard-size", "4", "--estimators", "trace", "--seeds", "2"]
SMALL += ["--max-new-tokens", "4", "--n-boot", "0", "--no-report"]


def test_faults_are_one_line_messages_with_exit_2(tmp_path: Path, tiny_model, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import errno

    import tracecal.backends as backends
    import tracecal.evaluation.runstore as runstore

    monkeypatch.setattr(backends, "load_model", lambda *a, **k: tiny_model)
    runner = CliRunner()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.json").write_text('{"my": "settings"}')
    for extra in ([], ["--score-only"]):
        r = runner.invoke(app, ["evaluate", "--run-dir", str(mine), *SMALL, *extra])
        assert "not a tracecal run" in _one_line_error(r)
    assert [p.name for p in mine.iterdir()] == ["config.json"]
    assert (mine / "config.json").read_text() == '{"my": "settings"}'
    for args, option in ((["--cal-frac", "0.01"], "--cal-frac"), (["--limit", "1"], "--limit")):
        r = runner.invoke(app, ["evaluate", "--run-dir", str(tmp_path / "few"), *SMALL, *args])
        assert "too few to split" in _one_line_error(r) and option in r.output
    assert not (tmp_path / "few").exists()
    real = runstore.atomic_write

    def full(path: Path, write: object) -> None:
        if path.suffix == ".parquet" and path.name == "00001.parquet":
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real(path, write)  # type: ignore[arg-type]

    monkeypatch.setattr(runstore, "atomic_write", full)
    run = tmp_path / "run"
    r = runner.invoke(app, ["evaluate", "--run-dir", str(run), *SMALL])
    assert "No space left on device; free some space and run the same command again" in _one_line_error(r)
    monkeypatch.setattr(runstore, "atomic_write", real)
    r = runner.invoke(app, ["evaluate", "--run-dir", str(run), *SMALL])
    assert r.exit_code == 0, r.output


@pytest.mark.slow  # the real default model, in llama.cpp
def test_evaluate_on_llama_cpp_scores_trace_and_self_evaluation(tmp_path: Path) -> None:
    """``--backend llamacpp`` on 2 tasks × 4 questions: the traces come from llama.cpp, the trace estimators and
    P(True) / verbalised confidence are scored, the beam estimators are reported as not run (with why: in the
    output, results.json and the report), the run is resumable and refuses the HF backend."""
    import pyarrow.parquet as pq

    from tracecal.evaluation.runstore import RunStore

    run = tmp_path / "run"
    args = ["evaluate", "--backend", "llamacpp", "--run-dir", str(run), "--tasks", "triviaqa,svamp", "--limit", "4"]
    args += ["--estimators", "trace-only,extra,beam", "--seeds", "2", "--cal-frac", "0.5", "--max-new-tokens", "8"]
    args += ["--n-boot", "0"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    html = (run / "report.html").read_text()
    assert "(GGUF weights in llama.cpp)" in html
    assert "Not run: beam_ratio, beam_tail_thinness, beam_neg_entropy on triviaqa, svamp (llama.cpp has no beam" in html
    assert "not run: beam_ratio, beam_tail_thinness, beam_neg_entropy: llama.cpp has no beam search" in r.output
    doc = json.loads((run / "results.json").read_text())
    assert doc["config"]["backend"] == "llamacpp"
    ident = json.loads((run / "config.json").read_text())["identity"]
    assert ident["backend"] == "llamacpp" and ident["dtype"] is None
    store = RunStore(run)
    scores = pq.read_table(run / "scores.parquet").to_pandas()
    for task in ("triviaqa", "svamp"):
        traces = store.read_traces(task)
        assert len(traces) == 4 and {t.decoding["backend"] for t in traces} == {"llama.cpp"}
        info = doc["tasks"][task]
        assert set(info["not_run"]) == {"beam_ratio", "beam_tail_thinness", "beam_neg_entropy"}
        assert set(info["not_run_reasons"].values()) == {
            "llama.cpp has no beam search (llama-cpp-python decodes one sequence): use --backend hf"
        }
        extra = store.read_pass("extra", task)
        assert extra is not None and extra.num_rows == 4
        for col in ("p_true", "verbalized"):
            x = extra[col].to_numpy()
            assert np.all((x > 0) & (x < 1)), (col, x)
        mine = scores[scores.task == task]
        for est in ("trace", "p_true", "verbalized", "neg_mean_entropy"):
            assert np.isfinite(mine[est].to_numpy()).all(), est
        assert doc["metrics"][task]["trace_plus"]["brier"]["n_seeds"] == 2  # a fitted trace estimator, scored
        assert doc["metrics"][task]["beam_ratio"]["brier"]["mean"] is None  # NaN, written as null
    again = CliRunner().invoke(app, [*args, "--no-report"])  # resumed: everything is on disk, nothing is computed
    assert again.exit_code == 0 and "traces triviaqa" not in again.output, again.output
    rescore = ["evaluate", "--run-dir", str(run), "--score-only", "--cal-frac", "0.5", "--seeds", "2", "--no-report"]
    rescored = CliRunner().invoke(app, rescore)
    assert rescored.exit_code == 0 and "llama.cpp has no beam search" in rescored.output, rescored.output  # stored
    hf = CliRunner().invoke(app, [a for a in args if a not in ("--backend", "llamacpp")] + ["--no-report"])
    assert hf.exit_code == 2 and "made with backend='llamacpp', not 'hf'" in hf.output, hf.output


def test_a_shard_copied_from_another_models_run_is_one_line(tmp_path: Path, tiny_model, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import shutil

    import tracecal.backends as backends

    monkeypatch.setattr(backends, "load_model", lambda *a, **k: tiny_model)
    runner = CliRunner()
    for run, extra in (("mine", []), ("theirs", ["--model", "another-model"])):
        r = runner.invoke(app, ["evaluate", "--run-dir", str(tmp_path / run), *SMALL, *extra])
        assert r.exit_code == 0, r.output
    shard = Path("traces") / "triviaqa" / "00000.parquet"
    shutil.copy(tmp_path / "theirs" / shard, tmp_path / "mine" / shard)
    for extra in ([], ["--score-only"]):
        r = runner.invoke(app, ["evaluate", "--run-dir", str(tmp_path / "mine"), *SMALL, *extra])
        line = _one_line_error(r)
        assert "shard 0 of the traces pass" in line and "was made by another run (model='another-model'" in line
        assert "a shard copied in from another run directory. Delete it" in line


def test_a_filled_disk_during_evaluate_loses_nothing_and_the_resumed_run_is_exact(
    tmp_path: Path, tiny_model, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """A real full disk (a small tmpfs filled up to 24 KiB free: room for the config and one shard): one line with
    what to do, exit 2, no temporary file, the shards written are whole; once space is freed the same command
    computes only what is missing and its traces and metrics equal a run that never failed."""
    import tracecal.backends as backends
    from tests.evaluation.test_run import Counting
    from tests.traces.disk import leave_free, small_filesystem
    from tracecal.traces.io import load_traces

    lm = Counting(tiny_model)
    monkeypatch.setattr(backends, "load_model", lambda *a, **k: lm)
    runner, clean = CliRunner(), tmp_path / "clean"
    assert runner.invoke(app, ["evaluate", "--run-dir", str(clean), *SMALL]).exit_code == 0

    def traces(run: Path) -> list[tuple[str, list[int], list[float]]]:
        return [(t.id, t.token_ids.tolist(), t.surprisal.tolist()) for t in load_traces(run / "traces" / "triviaqa")]

    with small_filesystem(tmp_path, 512) as mnt:
        run = mnt / "run"
        leave_free(mnt, 24)
        lm.generated = 0
        line = _one_line_error(runner.invoke(app, ["evaluate", "--run-dir", str(run), *SMALL]))
        assert "cannot write" in line and "No space left on device; free some space and run the same command" in line
        assert "(what is written is kept and the run resumes)" in line and "Detail" not in line
        kept = sorted((run / "traces" / "triviaqa").glob("*.parquet"))
        assert not list(run.rglob("*.tmp")) and len(kept) == 1  # shard 0 fit, shard 1 did not
        assert traces(run) == traces(clean)[:4]  # what was written is whole
        (mnt / ".filler").unlink()
        lm.generated = 0
        r = runner.invoke(app, ["evaluate", "--run-dir", str(run), *SMALL])
        assert r.exit_code == 0, r.output
        assert lm.generated == 4 and traces(run) == traces(clean)  # only the missing shard
        metrics = [json.loads((d / "results.json").read_text())["metrics"] for d in (run, clean)]
        assert metrics[0] == metrics[1]


def test_an_unstamped_shard_resumes_and_a_damaged_stamp_is_one_line(tmp_path: Path, tiny_model, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """What the user sees for shards of an older tracecal (no stamps: resumed, exit 0, the shard kept byte-identical)
    and for a damaged stamp (exit 2, one line naming the shard and what to do)."""
    import pyarrow.parquet as pq

    import tracecal.backends as backends

    monkeypatch.setattr(backends, "load_model", lambda *a, **k: tiny_model)
    runner, run = CliRunner(), tmp_path / "run"
    assert runner.invoke(app, ["evaluate", "--run-dir", str(run), *SMALL]).exit_code == 0
    shard = run / "traces" / "triviaqa" / "00000.parquet"
    table = pq.read_table(shard)
    meta = {k: v for k, v in (table.schema.metadata or {}).items() if not k.startswith(b"tracecal_") or b"schema" in k}
    pq.write_table(table.replace_schema_metadata(meta), shard)  # as written before the stamps existed
    before = shard.read_bytes()
    r = runner.invoke(app, ["evaluate", "--run-dir", str(run), *SMALL])
    assert r.exit_code == 0 and "Traceback" not in r.output and shard.read_bytes() == before, r.output
    pq.write_table(table.replace_schema_metadata(meta | {b"tracecal_run_identity": b"[1]"}), shard)
    line = _one_line_error(runner.invoke(app, ["evaluate", "--run-dir", str(run), *SMALL]))
    assert f"{shard} carries a damaged run-identity stamp" in line and "delete it and run again" in line


def test_the_end_of_evaluate_prints_the_verdict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The last thing `evaluate` prints: the verdict panel (what to use, the tasks apart, the serving commands)."""
    from tracecal.cli.evaluate import print_verdict
    from tracecal.testing import scored_synthetic_run

    run = scored_synthetic_run(tmp_path / "r", {"triviaqa": (300, 0.4), "svamp": (200, 0.02)}, n_boot=100)
    print_verdict(run)
    out = " ".join(capsys.readouterr().out.split())
    assert "verdict" in out and "For synthetic (float32) on triviaqa: use" in out
    assert "Not ranked: svamp: 4 correct answers of 200" in out or "Not ranked: svamp:" in out
    assert "tracecal fit-calibrator" in out and "tracecal serve --model synthetic" in out


def test_sampling_estimators_with_too_few_samples_are_refused_before_the_run(tmp_path: Path) -> None:
    run = tmp_path / "run"
    r = CliRunner().invoke(
        app, ["evaluate", "--run-dir", str(run), "--tasks", "svamp", "--estimators", "sampling", "--num-samples", "3"]
    )
    assert r.exit_code == 2 and "needs 5 samples per question" not in r.output, r.output
    assert "cannot be computed: the last needs 10 samples per question and --num-samples 3 draws 3" in r.output
    assert not run.exists()  # nothing computed, nothing written
