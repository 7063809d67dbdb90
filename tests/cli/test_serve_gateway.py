"""``tracecal serve`` (`tracecal.cli.serve`): bad options exit 2 with a message; the abstain threshold from a
``tracecal selective`` file."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from tests.serve.helpers import CHAT, FakeModel
from tracecal.serve import ServeConfig, create_app


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-batch", "0"], "--max-batch must be a whole number ≥ 1"),
        (["--abstain-below", "2"], "--abstain-below must be a finite number in [0, 1]"),
        (["--drift-statistic", "perplexity"], "--drift-statistic must be one of mean_entropy, c_trace"),
        (["--request-timeout", "0"], "--request-timeout must be a finite number"),
        (["--upstream", "ftp://host/v1"], "base_url must be an http(s) URL"),
        (["--upstream", "http://h/v1", "--model", "x"], "leave out --model"),
        (["--backend", "vllm"], "--backend must be hf or llamacpp"),
        (["--dtype", "int8"], "--dtype must be auto, float32, bfloat16 or float16"),
        (["--dtype", "bfloat16", "--backend", "llamacpp"], "--dtype applies to the in-process HF backend only"),
        (["--port", "70000"], "--port must be a whole number in [1, 65535], got 70000"),  # not an OverflowError
        (["--port", "0"], "--port must be a whole number in [1, 65535], got 0"),
        (["--port", "-1"], "--port must be a whole number in [1, 65535], got -1"),
        (["--port", "80.5"], "Invalid value for '--port'"),
        (["--vocab-size", "1"], "--vocab-size must be a whole number ≥ 2, got 1"),
        (["--top-logprobs", "0"], "--top-logprobs must be a whole number ≥ 1, got 0"),
        (["--upstream-concurrency", "0"], "--upstream-concurrency must be a whole number ≥ 1, got 0"),
        (["--upstream-concurrency", "many"], "Invalid value for '--upstream-concurrency'"),
    ],
)
def test_serve_command_refuses_bad_options_with_a_message(args: list[str], message: str) -> None:
    from typer.testing import CliRunner

    from tracecal.cli.app import app

    r = CliRunner().invoke(app, ["serve", *args])
    assert r.exit_code == 2 and message in " ".join(r.output.split()), r.output
    assert "Traceback" not in r.output


@pytest.fixture(scope="module")
def selective_file(tmp_path_factory):  # type: ignore[no-untyped-def]
    from tracecal.analysis.selective import run_selective
    from tracecal.testing import write_synthetic_run

    run = write_synthetic_run(tmp_path_factory.mktemp("sel") / "run", tasks=("triviaqa", "svamp"), n_per_task=400)
    doc = run_selective(run, alpha=0.4, delta=0.1, estimators=["trace"], n_splits=2)
    (run / "selective_none.json").write_text(json.dumps(doc))  # certifies nothing: errors among the top answers
    doc["tasks"]["triviaqa"]["trace"]["deploy"]["threshold"] = 0.3  # a file as a model that certifies one would have
    (run / "selective_0.4.json").write_text(json.dumps(doc))
    return run


def test_the_abstain_threshold_can_come_from_tracecal_selective(selective_file, fake: FakeModel, calibrator) -> None:  # type: ignore[no-untyped-def]
    """--abstain-from: the guaranteed c_TRACE threshold of the run's `trace` estimator, applied to c_TRACE even with a
    calibrator loaded, its provenance in /health; the same threshold as the file's."""
    from tracecal.analysis.selective import deployed_threshold
    from tracecal.cli.serve import _abstain_from

    path = selective_file / "selective_0.4.json"
    info = deployed_threshold(path, "trace", "triviaqa")
    want = json.loads(path.read_text())["tasks"]["triviaqa"]["trace"]["deploy"]["threshold"]
    assert info["threshold"] == want == 0.3 and info["model"] == "synthetic" and info["alpha"] == 0.4
    settings = _abstain_from(path, "triviaqa", None, ("synthetic", None))
    assert settings["abstain_below"] == want and settings["abstain_on"] == "c_trace"
    with TestClient(create_app(fake, calibrator, ServeConfig(**settings))) as c:
        conf = c.post("/v1/chat/completions", json=CHAT).json()["choices"][0]["confidence"]
        assert conf["abstain_on"] == "c_trace" and conf["abstain_below"] == want
        assert conf["abstain"] == (conf["c_trace"] < want) and conf["probability"] is not None
        assert info["sha256"][:16] in c.get("/health").json()["limits"]["abstain_source"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--abstain-from", "{run}/nope.json"], "guarantee file not found"),
        (["--abstain-from", "{run}/config.json"], "is not a selective.json"),
        (["--abstain-from", "{run}/selective_0.4.json"], "holds the tasks svamp, triviaqa: name one"),
        (["--abstain-from", "{run}/selective_0.4.json", "--abstain-task", "mlqa"], "has no task 'mlqa'"),
        (["--abstain-from", "{run}/selective_none.json", "--abstain-task", "svamp"], "every answer would abstain"),
        (["--abstain-from", "{run}/selective_0.4.json", "--abstain-task", "triviaqa"], "answers of 'synthetic'"),
        (["--abstain-from", "{run}/selective_0.4.json", "--abstain-below", "0.5"], "not both"),
        (["--abstain-task", "svamp"], "--abstain-task goes with --abstain-from"),
    ],
)
def test_bad_abstain_sources_are_refused_with_a_message(selective_file, args: list[str], message: str) -> None:  # type: ignore[no-untyped-def]
    from typer.testing import CliRunner

    from tracecal.cli.app import app

    r = CliRunner().invoke(app, ["serve", *[a.format(run=selective_file) for a in args]])
    assert r.exit_code == 2 and message in " ".join(r.output.split()), r.output
    assert "Traceback" not in r.output
