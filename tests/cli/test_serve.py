"""`tracecal serve` (tracecal.cli.serve): options → ServeConfig and the app, refusals with one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from tracecal.cli.app import app
from tracecal.cli.serve import CONFIG_OPTIONS, _abstain_from, serve_app
from tracecal.errors import ValidationError


def _defaults(**over: Any) -> dict[str, Any]:
    """The `serve` command's options at their defaults (by parameter name), with ``over`` applied."""
    cmd = typer.main.get_command(app).commands["serve"]  # type: ignore[attr-defined]  # a click Group
    return {p.name: p.default for p in cmd.params} | over


def test_the_config_options_are_serve_config_fields() -> None:
    from tracecal.serve.config import ServeConfig

    assert set(CONFIG_OPTIONS) <= set(ServeConfig().as_dict())
    assert set(CONFIG_OPTIONS) <= set(_defaults())


def test_no_model_builds_a_score_only_app() -> None:
    from fastapi.testclient import TestClient

    server = serve_app(_defaults(no_model=True, max_batch=2, max_queue=3))
    with TestClient(server) as c:
        health = c.get("/health").json()
    assert health["limits"]["max_batch"] == 2 and health["limits"]["max_queue"] == 3, health


def test_upstream_concurrency_is_the_requests_in_flight_upstream_not_max_batch() -> None:
    """--upstream-concurrency (default `UPSTREAM_CONCURRENCY`, 64) bounds the requests sent to the upstream at once;
    --max-batch stays the in-process batch (it throttled the upstream to 8 before)."""
    from tracecal.serve.proxy import UPSTREAM_CONCURRENCY

    assert _defaults()["upstream_concurrency"] == UPSTREAM_CONCURRENCY == 64
    for asked in (None, 48):
        o = _defaults(upstream="http://upstream.test/v1", upstream_model="m", max_batch=2)
        if asked is not None:
            o["upstream_concurrency"] = asked
        gw = serve_app(o).state.gateway  # with --upstream-model nothing is asked from the upstream at start-up
        want = asked or UPSTREAM_CONCURRENCY
        assert gw.batcher.remote == want and gw.model.max_concurrency == gw.batcher.models["text"].max_concurrency
        assert gw.config.max_batch == 2


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"upstream": "http://h/v1", "no_model": True}, "leave out --model and --no-model"),
        ({"backend": "vllm"}, "--backend must be hf or llamacpp, got 'vllm'"),
        ({"dtype": "int8"}, "--dtype must be auto, float32, bfloat16 or float16"),
        ({"dtype": "float16", "backend": "llamacpp"}, "--dtype applies to the in-process HF backend only"),
        ({"threads": 0}, r"--threads must be a whole number in \[1, 4096\], got 0"),
        ({"abstain_task": "svamp"}, "--abstain-task goes with --abstain-from"),
    ],
)
def test_contradicting_options_are_refused(over: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        serve_app(_defaults(**over))


def test_abstain_from_refuses_a_threshold_given_twice(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValidationError, match="not both"):
        _abstain_from(tmp_path / "s.json", None, 0.5)
    assert _abstain_from(None, None, 0.5) == {}


def test_a_bad_limit_exits_2_with_one_line() -> None:
    r = CliRunner().invoke(app, ["serve", "--max-queue", "0", "--no-model"])
    assert r.exit_code == 2 and r.output.startswith("error: ") and r.output.count("\n") == 1, r.output


# ---------------------------------------------------------------------------------------- provenance


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A calibrator fitted by `tracecal fit-calibrator` on traces of 'qwen2.5-coder-1.5b' in bfloat16, and a
    selective.json of a synthetic run ('synthetic', float32) copied away from its run (the usual deployment)."""
    import shutil

    import numpy as np

    from tracecal.analysis.selective import run_selective
    from tracecal.testing import write_synthetic_run
    from tracecal.traces.io import save_traces
    from tracecal.traces.trace import Trace

    d = tmp_path_factory.mktemp("prov")
    rng = np.random.default_rng(0)
    traces = [
        Trace(
            text="a b",
            token_ids=[1, 2],
            surprisal=rng.random(2),
            entropy=rng.random(2),
            model_id="qwen2.5-coder-1.5b",
            decoding={"dtype": "bfloat16"},
            id=f"q{i}",
        )
        for i in range(30)
    ]
    save_traces(traces, d / "traces.parquet")
    (d / "labels.csv").write_text("id,label\n" + "".join(f"q{i},{i % 2}\n" for i in range(30)))
    r = CliRunner().invoke(
        app,
        ["fit-calibrator", str(d / "traces.parquet"), "--labels", str(d / "labels.csv"), "--out", str(d / "cal.json")],
    )
    assert r.exit_code == 0, r.output
    run = write_synthetic_run(d / "run", tasks=("triviaqa",), n_per_task=300)
    doc = run_selective(run, alpha=0.5, delta=0.1, estimators=["trace"], n_splits=2)
    doc["tasks"]["triviaqa"]["trace"]["deploy"]["threshold"] = 0.3
    (d / "deployed").mkdir()
    (d / "deployed" / "selective.json").write_text(json.dumps(doc))
    shutil.copy(d / "cal.json", d / "deployed" / "cal.json")
    return {"dir": d, "doc": doc}


def test_the_files_carry_their_own_provenance(fitted: dict[str, Any]) -> None:
    from tracecal.version import __version__

    d = fitted["dir"]
    cal = json.loads((d / "cal.json").read_text())["provenance"]
    assert cal == {
        "model": "qwen2.5-coder-1.5b",
        "dtype": "bfloat16",
        "tracecal": __version__,
        "run": str(d / "traces.parquet"),
    }
    sel = fitted["doc"]["provenance"]
    assert sel["model"] == "synthetic" and sel["dtype"] in ("float32", "bfloat16") and sel["run"] == str(d / "run")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--calibrator", "{d}/deployed/cal.json"],
            "was made on answers of 'qwen2.5-coder-1.5b'; this server serves 'smollm2-135m-instruct'",
        ),
        (
            ["--calibrator", "{d}/deployed/cal.json", "--model", "qwen2.5-coder-1.5b", "--dtype", "float32"],
            "was made on bfloat16 answers; this server's weights are float32",
        ),
        (
            ["--abstain-from", "{d}/deployed/selective.json"],
            "was made on answers of 'synthetic'; this server serves 'smollm2-135m-instruct'",
        ),
        (["--abstain-from", "{d}/deployed/selective.json", "--backend", "llamacpp"], "answers of 'synthetic'"),
    ],
)
def test_a_file_made_on_another_model_or_dtype_is_refused_wherever_it_lies(
    fitted: dict[str, Any], args: list[str], message: str
) -> None:
    """No config.json lies beside the copies: the files' own records name the model (and dtype) they hold for."""
    r = CliRunner().invoke(app, ["serve", *[a.format(d=fitted["dir"]) for a in args]])
    out = " ".join(r.output.split())
    assert r.exit_code == 2 and message in out and "--allow-foreign-calibrator" in out, r.output
    assert "Traceback" not in r.output


def test_the_override_serves_a_foreign_file_with_a_warning(fitted: dict[str, Any], monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    import tracecal.backends
    from tests.serve.helpers import FakeModel

    monkeypatch.setattr(tracecal.backends, "load_model", lambda *a, **k: FakeModel())
    d = fitted["dir"]
    o = _defaults(calibrator=d / "deployed" / "cal.json", abstain_from=d / "deployed" / "selective.json")
    with pytest.raises(ValidationError, match="answers of 'synthetic'"):
        serve_app(o)
    serve_app(o | {"allow_foreign_calibrator": True})
    err = " ".join(capsys.readouterr().err.split())
    assert err.count("served anyway (--allow-foreign-calibrator)") == 2, err
    assert "answers of 'qwen2.5-coder-1.5b'" in err and "answers of 'synthetic'" in err


def test_a_file_without_provenance_is_served_with_a_warning(
    fitted: dict[str, Any], monkeypatch, capsys, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """Files written before provenance was kept: accepted (they cannot be checked) with a warning that says so."""
    import tracecal.backends
    from tests.serve.helpers import FakeModel

    monkeypatch.setattr(tracecal.backends, "load_model", lambda *a, **k: FakeModel())
    old = json.loads((fitted["dir"] / "cal.json").read_text())
    del old["provenance"]
    (tmp_path / "old.json").write_text(json.dumps(old))
    doc = {k: v for k, v in fitted["doc"].items() if k != "provenance"}
    (tmp_path / "selective.json").write_text(json.dumps(doc))
    serve_app(_defaults(calibrator=tmp_path / "old.json", abstain_from=tmp_path / "selective.json"))
    err = " ".join(capsys.readouterr().err.split())
    assert err.count("records no provenance") == 2, err
    assert serve_app(_defaults(calibrator=tmp_path / "old.json", no_model=True)) is not None  # nothing to compare


def test_the_check_compares_only_what_both_sides_know() -> None:
    from tracecal.cli.serve import check_provenance

    rec = {"model": "m", "dtype": None, "tracecal": "0", "run": None}
    check_provenance(Path("f.json"), rec, ("m", "bfloat16"), False)  # the file's dtype unknown
    check_provenance(Path("f.json"), rec, None, False)  # --no-model: nothing served
    check_provenance(Path("f.json"), rec, (None, None), False)  # an upstream of unknown name
    with pytest.raises(ValidationError, match="f.json was made on answers of 'm'; this server serves 'n'"):
        check_provenance(Path("f.json"), rec, ("n", None), False)


def test_a_python_saved_calibrator_without_a_model_is_refused_unless_overridden(tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    """``cal.save`` of a calibrator fitted on scores records model null: it would be served for any model, so a
    server of a known model refuses it (exit 2, what to do); ``--allow-foreign-calibrator`` serves it with a
    warning, and ``--no-model`` has nothing to compare. One fitted on `Trace` objects records their model."""
    import numpy as np

    import tracecal.backends
    from tests.serve.helpers import FakeModel
    from tracecal.calibrators import PlattCalibrator, TracePlus
    from tracecal.traces.trace import Trace

    rng = np.random.default_rng(0)
    scores, y = rng.random(40), np.arange(40) % 2
    path = PlattCalibrator().fit(scores, y).save(tmp_path / "platt.json")
    assert json.loads(path.read_text())["provenance"]["model"] is None
    r = CliRunner().invoke(app, ["serve", "--calibrator", str(path)])
    out = " ".join(r.output.split())
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert f"error: {path} records no model its answers came from" in out and "'smollm2-135m-instruct'" in out
    assert "cal.provenance = tracecal.traces.provenance.provenance(" in out and "--allow-foreign-calibrator" in out
    monkeypatch.setattr(tracecal.backends, "load_model", lambda *a, **k: FakeModel())
    serve_app(_defaults(calibrator=path, allow_foreign_calibrator=True))
    assert "served anyway (--allow-foreign-calibrator)" in " ".join(capsys.readouterr().err.split())
    assert serve_app(_defaults(calibrator=path, no_model=True)) is not None
    traces = [
        Trace(text="a", token_ids=[1, 2], surprisal=rng.random(2), entropy=rng.random(2), model_id="m", id=f"q{i}")
        for i in range(40)
    ]
    fitted = TracePlus().fit(traces, y).save(tmp_path / "tp.json")
    assert json.loads(fitted.read_text())["provenance"]["model"] == "m"


def test_bad_tokenizer_options_are_one_line_before_any_upstream_is_asked(tmp_path: Path) -> None:
    """``--tokenizer`` without ``--upstream``, and a tokenizer that resolves to nothing, end with exit 2 and one
    line; the (unreachable) upstream is never contacted."""
    for args, message in (
        (["--tokenizer", "smollm2-135m-instruct"], "--tokenizer goes with --upstream"),
        (
            ["--upstream", "http://127.0.0.1:9/v1", "--tokenizer", str(tmp_path / "nothing-here")],
            "could not load the tokenizer of",
        ),
    ):
        r = CliRunner().invoke(app, ["serve", *args])
        assert r.exit_code == 2 and r.output.startswith("error: ") and message in r.output, r.output
        assert "Traceback" not in r.output and "127.0.0.1:9/v1/models" not in r.output


def test_a_proxy_with_the_served_tokenizer_sends_ids(tokenizer, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``serve --upstream URL --tokenizer NAME``: the tokenizer is loaded by name and given to both proxy backends."""
    import tracecal.backends.hf as hf
    import tracecal.serve.proxy as proxy

    names: list[str] = []
    monkeypatch.setattr(hf, "load_tokenizer", lambda name: names.append(name) or tokenizer)
    real = proxy.proxy_backends
    monkeypatch.setattr(proxy, "proxy_backends", lambda url, model, **k: real(url, "up", **k))  # no /models asked
    server = serve_app(_defaults(upstream="http://127.0.0.1:9/v1", tokenizer="smollm2-135m-instruct"))
    gw = server.state.gateway
    assert names == ["smollm2-135m-instruct"] and gw.batcher.models["chat"].tokenizer is tokenizer
    assert gw.batcher.models["text"].tokenizer is tokenizer
