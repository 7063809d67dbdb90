"""The settings of an evaluation: `EvalConfig`, holding the scoring settings (`ScoreConfig`) it hands the protocol.

Each setting's constraint is declared once, beside its field (`tracecal.evaluation.protocol.setting`; collected
in `EVAL_CONSTRAINTS` and `SCORE_CONSTRAINTS`) and checked by `tracecal._validation`: `EvalConfig.validate`
raises `ConfigError` naming the setting as the command line spells it (``--cal-frac``: ``cal-frac``), before
anything is written.

>>> cfg = EvalConfig(tasks=["triviaqa"], n_seeds=5, shard_size=32)
>>> cfg.score.n_seeds, cfg.n_seeds, cfg.shard_size
(5, 5, 32)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np

from tracecal._validation import SEED, Interval, Options, check_params, from_source
from tracecal.backends import runtime
from tracecal.backends.answers import TEMPERATURE
from tracecal.backends.arguments import NUM_BEAMS, NUM_SAMPLES
from tracecal.backends.registry import (
    DEFAULT_BACKEND,
    DTYPE,
    IN_PROCESS,
    RegisteredBackends,
    get_backend,
    resolve_backend,
)
from tracecal.backends.runtime import DTYPES, resolve_dtype
from tracecal.errors import ValidationError
from tracecal.estimators import REGISTRY, default_estimators, resolve_estimators
from tracecal.evaluation.protocol import SCORE_CONSTRAINTS, ScoreConfig, constraints_of, setting
from tracecal.passes.semantic import EMBEDDER_DTYPES as _EMBEDDER_DTYPES

__all__ = [
    "EvalConfig",
    "ConfigError",
    "UnknownSettingError",
    "BACKENDS",
    "DTYPES",
    "EMBEDDER_DTYPES",
    "DEFAULT_MODEL_NAME",
    "IDENTITY_DEFAULTS",
    "EVAL_CONSTRAINTS",
    "is_url",
    "resolve_dtype",
    "resolve_embedder_dtype",
    "legacy_identity",
    "split_sizes",
    "stored_setting",
    "check_splittable",
]

BACKENDS = RegisteredBackends(IN_PROCESS)
"""The values of ``--backend``, read from the backend registry (`tracecal.backends.registry`): ``auto`` is the
Hugging Face backend (a ``.gguf`` file included: dequantised, as before this option existed), or the backend that
claims ``--model`` (the HTTP backend for an ``http(s)://`` URL); or a registered backend that runs its weights in this
process (``hf``; ``llamacpp`` runs a ``.gguf`` file, or a named model's, in llama.cpp)."""
EMBEDDER_DTYPES = ("auto", *_EMBEDDER_DTYPES)
"""The values of ``--embedder-dtype`` (the sentence embedder of TokenSAR / MARS): ``bfloat16`` runs its matrix
products in bf16 (`tracecal.passes.semantic.Autocast`); ``auto`` is the run directory's own (`resolve_embedder_dtype`),
and for a new run bfloat16 on a CPU with bf16 matrix units (`tracecal.backends.runtime.cpu_has_bf16`), else float32."""
IDENTITY_DEFAULTS = {"backend": DEFAULT_BACKEND, "embedder_dtype": "float32"}
"""The value an identity key takes where an identity lacks it. Only a backend declared ``in_identity`` (llama.cpp)
writes ``backend`` into its identity, so every run directory made without the option (and every new HF or HTTP run)
keeps the identity it had, and a llama.cpp run never resumes one of them, nor they it. Likewise only a bf16 embedder
writes ``embedder_dtype``: a run made before the option (a float32 embedder) keeps its identity."""
DEFAULT_MODEL_NAME = "smollm2-135m-instruct"
SCORE_FIELDS = tuple(f.name for f in fields(ScoreConfig))
_POSITIVE = Interval(int, 1, None)

KEY_ORDER = (
    "tasks",
    "limit",
    "model",
    "dtype",
    "backend",
    "embedder_dtype",
    "estimators",
    "n_seeds",
    "cal_frac",
    "calibrator",
    "n_bins",
    "batch_size",
    "max_new_tokens",
    "num_beams",
    "beam_max_new_tokens",
    "num_samples",
    "sample_temperature",
    "sample_seed",
    "chat",
    "shard_size",
    "on_error",
    "data_dir",
    "seed",
    "n_boot",
    "level",
    "sel_alpha",
    "sel_delta",
    "sel_holdout",
    "min_per_class",
)
"""The order of the keys of `EvalConfig.to_dict` (as every ``config.json`` and ``results.json`` has it)."""


class ConfigError(ValidationError):
    """An evaluation setting is invalid (found before anything is written)."""


class UnknownSettingError(ConfigError, TypeError):
    """`EvalConfig` was given a keyword it does not know, or ``score`` together with its settings (a ``TypeError``,
    as Python's own for an unexpected keyword, and a `ConfigError`)."""


def stored_setting(stored: dict[str, Any], key: str, run: Any) -> Any:
    """The value of setting ``key`` in a run's ``config.json`` (its ``config`` dict ``stored``; run directory ``run``),
    checked against the setting's one declared constraint (`EVAL_CONSTRAINTS`, `SCORE_CONSTRAINTS`): a bad value
    raises `ConfigError` ``"config.json of RUN: <key> must be <what>, got <value>"``, the file named as its source."""
    value = stored[key]
    source = from_source(f"config.json of {run}")
    if key == "tasks" and not (isinstance(value, list) and all(isinstance(t, str) for t in value)):
        raise ConfigError(f"{source(key)} must be a list of task names, got {value!r}")
    constraints = EVAL_CONSTRAINTS | SCORE_CONSTRAINTS
    if key in constraints:
        check_params({key: value}, {key: constraints[key]}, ConfigError, source)
    return value


def cli_name(name: str) -> str:
    """A setting as the command line spells it: ``cal_frac`` → ``cal-frac``."""
    return name.replace("_", "-")


@dataclass(init=False)
class EvalConfig:
    """Everything that defines an evaluation. `identity` lists what a run directory's stored shards depend on.

    The scoring settings (estimators, n_seeds, cal_frac, calibrator, n_bins, seed, n_boot, level, sel_*) live in
    ``score`` (a `ScoreConfig`); they are accepted as keywords and read (and set) as attributes here too.
    """

    tasks: list[str]
    limit: int | None = setting(None, (_POSITIVE, None))
    model: str | None = None
    dtype: str = setting("auto", Options(*DTYPES))
    backend: str = setting("auto", BACKENDS)
    embedder_dtype: str = setting("auto", Options(*EMBEDDER_DTYPES))
    batch_size: int = setting(16, _POSITIVE)
    max_new_tokens: int | None = setting(None, (_POSITIVE, None))
    num_beams: int = setting(5, NUM_BEAMS)
    beam_max_new_tokens: int | None = setting(32, (_POSITIVE, None))
    num_samples: int = setting(10, NUM_SAMPLES)
    sample_temperature: float = setting(1.0, TEMPERATURE)  # the bound of every backend's sampling
    sample_seed: int = setting(0, SEED)
    chat: bool | None = None
    shard_size: int = setting(64, _POSITIVE)
    on_error: str = setting("skip", Options("skip", "raise"))
    data_dir: str | None = None
    score: ScoreConfig = field(default_factory=lambda: ScoreConfig(default_estimators()))

    IDENTITY_KEYS = (
        "limit",
        "model",
        "dtype",
        "max_new_tokens",
        "chat",
        "shard_size",
        "num_beams",
        "beam_max_new_tokens",
        "num_samples",
        "sample_temperature",
        "sample_seed",
    )

    def __init__(self, tasks: list[str], score: ScoreConfig | None = None, **settings: Any) -> None:
        """``settings``: this config's fields and `ScoreConfig`'s (``estimators`` defaults to every registered
        estimator but the opt-in ones: `default_estimators`), or ``score`` whole."""
        scoring = {k: settings.pop(k) for k in SCORE_FIELDS if k in settings}
        own = {f.name: f for f in fields(EvalConfig) if f.name not in ("tasks", "score")}
        if unknown := sorted(set(settings) - set(own)):
            raise UnknownSettingError(f"EvalConfig got unexpected keyword argument(s): {', '.join(unknown)}")
        if score is not None and scoring:
            raise UnknownSettingError(f"EvalConfig takes score or its settings, not both ({', '.join(scoring)})")
        self.tasks = tasks
        for name, f in own.items():
            object.__setattr__(self, name, settings.get(name, f.default))
        if score is None:
            score = ScoreConfig(scoring.pop("estimators", default_estimators()), **scoring)
        self.score = score

    def __getattr__(self, name: str) -> Any:
        """The scoring settings read through to ``score`` (``cfg.n_seeds`` is ``cfg.score.n_seeds``)."""
        score = self.__dict__.get("score")
        if score is None or name not in SCORE_FIELDS:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return getattr(score, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in SCORE_FIELDS:
            setattr(self.score, name, value)
        else:
            object.__setattr__(self, name, value)

    def to_dict(self) -> dict[str, Any]:
        """Every setting in one flat dict (the ``config`` of ``config.json`` and ``results.json``)."""
        flat = asdict(self)
        flat |= flat.pop("score")
        return {k: flat[k] for k in KEY_ORDER}

    def validate(self) -> EvalConfig:
        """Check every value (and resolve task and estimator names); `ConfigError` says what to fix."""
        from tracecal.calibrators import make_calibrator
        from tracecal.tasks import get_tasks

        check_params(asdict(self), EVAL_CONSTRAINTS, ConfigError, cli_name)
        check_params(self.score.to_dict(), SCORE_CONSTRAINTS, ConfigError, cli_name)
        try:
            make_calibrator(self.score.calibrator)
        except (ValueError, KeyError) as e:
            raise ConfigError(f"calibrator: {e}") from e
        self._check_backend()
        if not self.tasks:
            raise ConfigError("no tasks given: pass --tasks, e.g. --tasks triviaqa,svamp")
        try:
            self.tasks = [t.ref for t in get_tasks(self.tasks)]  # built-in names, or absolute paths of user files
        except (ValueError, FileNotFoundError) as e:
            raise ConfigError(str(e)) from e
        self.score.estimators = resolve_estimators(self.score.estimators)
        refused = {name: why for name in self.score.estimators if (why := REGISTRY[name].refuses(self))}
        if refused:  # before any shard is computed (it failed at scoring, after every shard)
            names, why = ", ".join(refused), list(refused.values())[-1]
            raise ConfigError(f"estimators: {names} cannot be computed: the last {why}; change the option or the list")
        return self

    def _check_backend(self) -> None:
        """`ConfigError` for a ``--backend`` that cannot run ``--model`` / ``--dtype`` (before any model loads), as
        the backend declares (`tracecal.backends.registry.BackendSpec`: ``dtype``, ``check_model``)."""
        if self.backend == "auto":
            return
        spec = get_backend(self.backend)
        if self.dtype != "auto" and not spec.can(DTYPE):
            raise ConfigError(f"dtype: {spec.why_not(DTYPE)}")
        if spec.check_model is not None and (problem := spec.check_model(self.model)):
            raise ConfigError(f"model: {problem}")
        if is_url(self.model):
            raise ConfigError(
                f"backend: {self.backend} runs weights in this process, {self.model} is a server: use --backend auto"
            )

    def backend_kind(self) -> str:
        """The backend that computes the run: ``--backend``, or for ``auto`` the one that claims ``--model`` (``http``
        for a URL) else ``hf`` (`tracecal.backends.registry.resolve_backend`)."""
        return resolve_backend(self.backend, self.model)

    def identity(self) -> dict[str, Any]:
        """What the stored outputs depend on; the dtype resolved (``auto``: `tracecal.backends.runtime.resolve_dtype`,
        bfloat16 on a GPU or a CPU with bf16 matrix units, else float32; `evaluate` first pins it to a resumed run's).

        A run on a backend declared ``in_identity`` adds ``backend: <name>`` (a llama.cpp run: its answers differ from
        the HF backend's), its dtype None where the backend takes no ``--dtype`` (the GGUF's quantisation decides);
        every other run's identity has no ``backend`` (`IDENTITY_DEFAULTS`).
        A bf16 embedder adds ``embedder_dtype: bfloat16`` (the semantic pass's similarities differ); a float32 one
        adds nothing (`IDENTITY_DEFAULTS`). ``embedder_dtype=auto`` is resolved for a new run (`evaluate` resolves
        it against the run directory first: `resolve_embedder_dtype`)."""
        ident = {k: getattr(self, k) for k in self.IDENTITY_KEYS}
        ident["model"] = self.model or DEFAULT_MODEL_NAME
        if (emb := resolve_embedder_dtype(self.embedder_dtype)) != IDENTITY_DEFAULTS["embedder_dtype"]:
            ident["embedder_dtype"] = emb
        spec = get_backend(self.backend_kind())
        # a backend without a dtype (llama.cpp: the GGUF's own; a server's) resolves auto as before the CPU rule
        dtype = resolve_dtype(self.dtype, bf16=None if spec.can(DTYPE) else False)
        if spec.in_identity:
            return {"backend": spec.name} | ident | {"dtype": dtype if spec.can(DTYPE) else None}
        ident["dtype"] = dtype
        return ident


EVAL_CONSTRAINTS = constraints_of(EvalConfig)
"""The constraints of the settings `EvalConfig` holds itself (the scoring ones: `SCORE_CONSTRAINTS`)."""


def is_url(model: str | None) -> bool:
    """Whether ``model`` names a server (the HTTP backend) rather than weights a worker loads."""
    return str(model or "").startswith(("http://", "https://"))


def resolve_embedder_dtype(dtype: str, stored: dict[str, Any] | None = None, bf16: bool | None = None) -> str:
    """The embedder's dtype a setting means: ``auto`` is the one of the run directory whose stored identity is
    ``stored`` (a run made before the option: float32, `IDENTITY_DEFAULTS`), so resuming never changes it; for a
    new run (``stored`` None) bfloat16 where the CPU has bf16 matrix units (``bf16``; default
    `tracecal.backends.runtime.cpu_has_bf16`), else float32."""
    if dtype != "auto":
        return dtype
    if stored is not None:
        return str(stored.get("embedder_dtype", IDENTITY_DEFAULTS["embedder_dtype"]))
    return "bfloat16" if (runtime.cpu_has_bf16() if bf16 is None else bf16) else "float32"


def legacy_identity(config: dict[str, Any]) -> dict[str, Any]:
    """The identity of a run directory written before identities were stored (its dtype ran on a CPU)."""
    ident = {k: config[k] for k in EvalConfig.IDENTITY_KEYS if k in config}
    if "model" in ident:
        ident["model"] = ident["model"] or DEFAULT_MODEL_NAME
    if ident.get("dtype", "auto") == "auto":
        ident["dtype"] = "float32"
    return ident


def split_sizes(n: int, cal_frac: float) -> tuple[int, int]:
    """The smallest and largest calibration split `tracecal.stats.splits.stratified_split` can draw from ``n``
    answers, over every number n₁ of correct ones: round(f·n₀) + round(f·n₁) when both classes have ≥ 2 answers,
    else round(f·n) (f = ``cal_frac``; round half to even, as ``round``)."""
    n1 = np.arange(n + 1)
    n0 = n - n1
    cal = np.where(np.minimum(n0, n1) < 2, np.round(cal_frac * n), np.round(cal_frac * n0) + np.round(cal_frac * n1))
    return int(cal.min()), int(cal.max())


def check_splittable(tasks: Sequence[tuple[Any, Sequence[Any]]], cal_frac: float) -> None:
    """Refuse (`ConfigError`, before anything is generated) a task whose questions cannot be split into a
    calibration and an evaluation part of ≥ 1 answer each whatever the labels turn out to be (`split_sizes`)."""
    for task, exs in tasks:
        lo, hi = split_sizes(len(exs), cal_frac)
        if lo < 1 or hi > len(exs) - 1:
            raise ConfigError(
                f"{task.name}: {len(exs)} question(s) are too few to split with --cal-frac {cal_frac:g} (the "
                f"calibration split could hold {lo if lo < 1 else hi} of {len(exs)}; each part needs ≥ 1 answer): "
                "raise --limit (or add questions), or choose a --cal-frac nearer 0.5"
            )
