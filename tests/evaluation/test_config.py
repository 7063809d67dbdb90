"""The evaluation settings: `EvalConfig` holds a `ScoreConfig` (keywords and attributes read through), writes the
flat dict every config.json has, validates with one vocabulary and travels to workers (pickle)."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tracecal.cli.app import app
from tracecal.errors import TracecalError, ValidationError
from tracecal.estimators import REGISTRY
from tracecal.evaluation.config import EVAL_CONSTRAINTS, KEY_ORDER, ConfigError, EvalConfig, legacy_identity
from tracecal.evaluation.protocol import ScoreConfig
from tracecal.testing import write_synthetic_run


def test_eval_config_holds_a_score_config_and_keeps_its_keywords() -> None:
    cfg = EvalConfig(tasks=["triviaqa"], n_seeds=3, cal_frac=0.5, shard_size=8, sel_alpha=0.2)
    assert isinstance(cfg.score, ScoreConfig) and cfg.score.n_seeds == 3 and cfg.n_seeds == 3
    assert cfg.estimators == [n for n, c in REGISTRY.items() if not c.opt_in]  # the sampling ones are opt-in
    assert cfg.score.sel_alpha == 0.2 and cfg.shard_size == 8
    cfg.n_seeds = 5  # written through to the score config
    assert cfg.score.n_seeds == 5 and "n_seeds" not in vars(cfg)
    assert EvalConfig(["svamp"], score=ScoreConfig(["trace"], n_seeds=2)).n_seeds == 2
    with pytest.raises(TypeError, match="nonsense"):
        EvalConfig(["svamp"], nonsense=1)
    with pytest.raises(TypeError, match="not both"):
        EvalConfig(["svamp"], score=ScoreConfig(["trace"]), n_seeds=2)
    with pytest.raises(AttributeError):
        _ = cfg.nonsense  # type: ignore[attr-defined]  # an attribute no config has


def test_to_dict_is_flat_in_the_stored_order_and_pickles() -> None:
    cfg = EvalConfig(["triviaqa"], limit=10, estimators=["trace"], embedder_dtype="float32", dtype="float32")
    d = cfg.to_dict()
    assert tuple(d) == KEY_ORDER and d["estimators"] == ["trace"] and d["limit"] == 10 and d["n_boot"] == 1000
    assert d["estimators"] is not cfg.estimators  # a copy
    back = pickle.loads(pickle.dumps(cfg))
    assert back == cfg and back.n_seeds == 20
    assert legacy_identity(d | {"dtype": "auto", "model": None}) == cfg.identity() | {"model": "smollm2-135m-instruct"}


def test_validation_names_the_option_as_the_command_line_spells_it() -> None:
    assert set(EVAL_CONSTRAINTS) == {
        "limit",
        "dtype",
        "backend",
        "embedder_dtype",
        "batch_size",
        "max_new_tokens",
        "num_beams",
        "beam_max_new_tokens",
        "num_samples",
        "sample_temperature",
        "sample_seed",
        "shard_size",
        "on_error",
    }
    for kw, msg in (
        ({"num_beams": 1}, "num-beams must be a whole number in [2, 256], got 1"),
        ({"num_samples": 0}, "num-samples must be a whole number in [1, 1024], got 0"),
        ({"sample_temperature": 0.0}, "sample-temperature must be a finite number in [0.01, 100], got 0.0"),
        ({"batch_size": True}, "batch-size must be a whole number ≥ 1, got True"),
        ({"max_new_tokens": 0}, "max-new-tokens must be a whole number ≥ 1 or None, got 0"),
        ({"n_bins": 0}, "n-bins must be a whole number ≥ 1, got 0"),
        ({"embedder_dtype": "float16"}, "embedder-dtype must be one of auto, float32, bfloat16, got 'float16'"),
        ({"tasks": []}, "no tasks given"),
    ):
        with pytest.raises(ConfigError) as err:
            EvalConfig(**({"tasks": ["triviaqa"]} | kw)).validate()
        assert str(err.value).startswith(msg), str(err.value)
    assert issubclass(ConfigError, ValidationError) and issubclass(ConfigError, TracecalError)
    assert issubclass(ConfigError, ValueError)


def test_backend_is_validated_and_only_llama_cpp_changes_the_identity() -> None:
    hf = EvalConfig(["triviaqa"], limit=10)
    assert hf.backend == "auto" and hf.to_dict()["backend"] == "auto" and hf.backend_kind() == "hf"
    # auto and hf have the identity every run had before the option: no backend key, the resolved dtype
    assert hf.identity() == EvalConfig(["triviaqa"], limit=10, backend="hf").identity()
    from tracecal.backends.runtime import resolve_dtype

    # auto: this machine's (float32, or bfloat16 on a CPU with bf16 matrix units)
    assert "backend" not in hf.identity() and hf.identity()["dtype"] == resolve_dtype("auto")
    assert EvalConfig(["triviaqa"], model="http://127.0.0.1:9/v1").backend_kind() == "http"
    lc = EvalConfig(["triviaqa"], limit=10, backend="llamacpp")
    assert lc.backend_kind() == "llamacpp" and lc.validate() is lc
    assert lc.identity() == {"backend": "llamacpp"} | hf.identity() | {"dtype": None}  # the GGUF decides its dtype
    assert list(lc.identity())[0] == "backend"  # compared first: a mismatch names the backend
    for model in ("gemma3-270m", "/models/x.gguf"):
        EvalConfig(["triviaqa"], model=model, backend="llamacpp").validate()
    for kw, msg in (
        ({"backend": "nope"}, "backend must be one of auto, hf, llamacpp, got 'nope'"),
        ({"backend": "llamacpp", "dtype": "bfloat16"}, "dtype: --dtype applies to the HF backend"),
        ({"backend": "llamacpp", "model": "HuggingFaceTB/SmolLM2"}, "model: --backend llamacpp runs a .gguf file"),
        ({"backend": "llamacpp", "model": "http://h:8000/v1"}, "model: --backend llamacpp runs a .gguf file"),
        ({"backend": "hf", "model": "http://h:8000/v1"}, "backend: hf runs weights in this process"),
    ):
        with pytest.raises(ConfigError) as err:
            EvalConfig(["triviaqa"], **kw).validate()
        assert str(err.value).startswith(msg), str(err.value)


def test_embedder_dtype_enters_the_identity_only_as_bfloat16() -> None:
    """A float32 embedder leaves the identity as every run had it before the option (`IDENTITY_DEFAULTS`); bfloat16
    adds ``embedder_dtype``; ``auto`` resolves to the stored run's (float32 for one made before the option) or, for a
    new run, to this CPU's: bfloat16 with bf16 matrix units."""
    from tracecal.backends.runtime import cpu_has_bf16
    from tracecal.evaluation.config import IDENTITY_DEFAULTS, resolve_embedder_dtype

    old = EvalConfig(["triviaqa"], limit=10, embedder_dtype="float32")
    assert "embedder_dtype" not in old.identity() and IDENTITY_DEFAULTS["embedder_dtype"] == "float32"
    assert legacy_identity(old.to_dict()) == old.identity() | {"dtype": "float32"}
    bf = EvalConfig(["triviaqa"], limit=10, embedder_dtype="bfloat16")
    assert bf.identity() == old.identity() | {"embedder_dtype": "bfloat16"}
    lc = EvalConfig(["triviaqa"], limit=10, embedder_dtype="bfloat16", backend="llamacpp").identity()
    assert lc["embedder_dtype"] == "bfloat16" and lc["dtype"] is None
    assert resolve_embedder_dtype("auto", {}) == "float32"  # a stored identity without the key: the legacy float32
    assert resolve_embedder_dtype("auto", {"embedder_dtype": "bfloat16"}, bf16=False) == "bfloat16"
    assert [resolve_embedder_dtype("auto", bf16=b) for b in (True, False)] == ["bfloat16", "float32"]
    assert resolve_embedder_dtype("float32", {"embedder_dtype": "bfloat16"}, bf16=True) == "float32"  # given wins
    auto = EvalConfig(["triviaqa"], limit=10).identity()
    assert auto.get("embedder_dtype", "float32") == ("bfloat16" if cpu_has_bf16() else "float32")


def test_evaluate_passes_and_records_the_statistics_settings(tmp_path: Path) -> None:
    """`EvalConfig` carries n_boot, level, sel_alpha, sel_delta and sel_holdout into `ScoreConfig` (validated: a clear
    message, exit status 2, nothing written), and ``--score-only`` reuses the values recorded in the run's config."""
    from tracecal.cli.evaluate import evaluate_config as _evaluate_config

    sc = EvalConfig(["triviaqa"], n_boot=200, level=0.9, sel_alpha=0.3, sel_delta=0.05, sel_holdout=0.4).score
    assert (sc.n_boot, sc.level, sc.sel_alpha, sc.sel_delta, sc.sel_holdout) == (200, 0.9, 0.3, 0.05, 0.4)
    for kw, msg in (
        ({"sel_holdout": 1.0}, "sel-holdout"),
        ({"n_boot": -1}, "n-boot"),
        ({"level": 1.5}, "level"),
        ({"sel_alpha": 0.0}, "alpha"),
        ({"sel_delta": 2}, "delta"),
    ):
        with pytest.raises(ConfigError, match=msg):
            EvalConfig(["triviaqa"], **kw).validate()
    run = tmp_path / "run"
    for opt, msg in (("--sel-holdout", "sel-holdout"), ("--sel-alpha", "alpha"), ("--n-boot", "n-boot")):
        r = CliRunner().invoke(app, ["evaluate", "--run-dir", str(run), "--tasks", "triviaqa", opt, "-1"])
        assert r.exit_code == 2 and msg in r.output and "Traceback" not in r.output and not run.exists(), r.output
    write_synthetic_run(run, tasks=("triviaqa",), n_per_task=40, n_seeds=2)
    doc = json.loads((run / "config.json").read_text())
    doc["config"] |= {"n_boot": 7, "sel_alpha": 0.4, "sel_holdout": 0.25}
    (run / "config.json").write_text(json.dumps(doc))
    cfg = _evaluate_config(run, tasks="triviaqa", estimators="trace")  # outside a command: every stored value
    assert (cfg.n_boot, cfg.sel_alpha, cfg.sel_holdout, cfg.level) == (7, 0.4, 0.25, 0.95)


@pytest.mark.parametrize(("n", "cal_frac"), [(1, 0.35), (2, 0.35), (5, 0.2), (12, 0.01), (13, 0.5), (20, 0.97)])
def test_split_sizes_are_the_extremes_of_the_protocols_split(n: int, cal_frac: float) -> None:
    import numpy as np

    from tracecal.evaluation.config import split_sizes
    from tracecal.stats.splits import stratified_split

    sizes = [len(stratified_split(np.array([1] * n1 + [0] * (n - n1)), cal_frac, 0)[0]) for n1 in range(n + 1)]
    assert split_sizes(n, cal_frac) == (min(sizes), max(sizes))


def test_too_few_questions_to_split_name_the_options() -> None:
    from types import SimpleNamespace

    from tracecal.evaluation.config import check_splittable

    task = SimpleNamespace(name="t")
    check_splittable([(task, [0] * 12)], 0.35)  # fine
    for n, frac in ((1, 0.35), (12, 0.01), (12, 0.99)):
        with pytest.raises(ConfigError, match=f"t: {n} question.*--cal-frac {frac:g}.*--limit"):
            check_splittable([(task, [0] * n)], frac)


def test_an_estimator_the_settings_cannot_give_is_refused_before_any_work() -> None:
    """``--estimators sampling --num-samples 3``: refused when the config is checked (it failed at scoring, after
    every shard had been computed: "self-consistency needs 5 samples per question"); k ≤ the samples drawn passes."""
    with pytest.raises(ConfigError, match=r"self_consistency_k5, .*_max_k10 cannot be computed: .*needs 10"):
        EvalConfig(["svamp"], estimators=["trace", "sampling"], num_samples=3).validate()
    ok = EvalConfig(["svamp"], estimators=["trace", "self_consistency_k2"], num_samples=3).validate()
    assert "self_consistency_k2" in ok.score.estimators
