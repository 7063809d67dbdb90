"""Estimator interface and registry.

An estimator maps the stats the passes computed once per answer (`Inputs`) to one confidence per answer
(higher = more confident). Estimators are small stateless objects with parameters in ``__init__`` and a
declared set of ``stats`` they read (``surprisal``/``entropy`` from the trace, ``p_true``, ``beam``, ...);
the harness runs exactly the passes (`tracecal.passes`) that provide them.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import numpy as np

from tracecal._validation import Constraint, check_params, closest
from tracecal.errors import TracecalError, ValidationError
from tracecal.passes import PASSES, TOKEN, passes_for, provider_of, stat_kind
from tracecal.traces.trace import Trace, TraceBatch

TRACE_STATS = frozenset({"surprisal", "entropy"})


class MissingStatError(TracecalError, ValueError):
    """An estimator was asked to score inputs that lack a stat it reads (its pass did not run)."""


class Inputs:
    """Everything estimators may read, aligned by answer.

    Attributes:
        batch: the traces as ragged arrays (s_t, H_t).
        traces: the `Trace` objects (token strings, text) when available.
        stats: the other passes' stats by name: one value per answer (shape (B,)), a fixed-length vector per
            answer (shape (B, k)), or one value per answer token (flat, ragged like ``batch``).

    Stats are also attributes (``inputs.p_true``); a stat that is absent reads as None.
    """

    def __init__(
        self, batch: TraceBatch, traces: list[Trace] | None = None, stats: dict[str, Any] | None = None, **named: Any
    ) -> None:
        self.batch = batch
        self.traces = traces
        self.stats: dict[str, np.ndarray] = {}
        for k, v in {**(stats or {}), **named}.items():
            if v is not None:
                self.stats[k] = np.asarray(v, dtype=np.float64)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("batch", "traces", "stats"):
            raise AttributeError(name)
        return self.__dict__.get("stats", {}).get(name)

    def stat(self, name: str) -> np.ndarray:
        """The stat ``name``; `MissingStatError` naming the pass that provides it when it is absent."""
        if name not in self.stats:
            try:
                where = f"the {provider_of(name)!r} pass"
            except ValueError:
                where = "a pass that provides it"
            raise MissingStatError(f"stat {name!r} is missing: run {where} (select an estimator that reads it)")
        return self.stats[name]

    def __len__(self) -> int:
        return len(self.batch)

    def _is_token(self, name: str, x: np.ndarray) -> bool:
        try:
            return stat_kind(name) == TOKEN
        except ValueError:  # a stat no registered pass provides: ragged when it has one value per token
            return x.ndim == 1 and len(x) == len(self.batch.surprisal) != len(self.batch)

    def select(self, idx: np.ndarray) -> Inputs:
        """The same inputs for a subset of answers (e.g. the calibration split)."""
        idx = np.asarray(idx, dtype=np.int64)
        stats: dict[str, np.ndarray] = {}
        for k, x in self.stats.items():
            if self._is_token(k, x):
                stats[k] = TraceBatch(x, x, self.batch.offsets).select(idx).surprisal
            else:
                stats[k] = x[idx]
        traces = None if self.traces is None else [self.traces[i] for i in idx]
        return Inputs(self.batch.select(idx), traces, stats)


class Estimator:
    """Base class. Subclasses set ``name``, ``family``, ``stats`` and implement `score`.

    ``stats``: the stats `score` reads (besides the trace's ``surprisal``/``entropy``, which every estimator
    may read). ``self_calibrated`` estimators output probabilities fitted on the calibration split (TRACE+) and are not
    passed through the Platt calibrator; ``needs_fit`` ones choose a parameter on the calibration split.
    ``opt_in`` ones (the sampling estimators: K generations per question) are not in ``all`` nor the defaults
    (`default_estimators`); they run when named or selected by group. ``_parameter_constraints`` declares the
    constraint of each ``__init__`` parameter (`tracecal._validation`, as the calibrators do), checked by
    `check_params` (`get_estimator` calls it; a bad value raises `tracecal.errors.ValidationError` naming it).
    """

    name: ClassVar[str] = ""
    family: ClassVar[str] = ""
    stats: ClassVar[frozenset[str]] = TRACE_STATS
    description: ClassVar[str] = ""
    self_calibrated: ClassVar[bool] = False
    needs_fit: ClassVar[bool] = False
    substitute: ClassVar[str | None] = None  # named in reports when the original component was replaced
    opt_in: ClassVar[bool] = False  # left out of ``all`` and the defaults (a costly pass): selected by name or group
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {}

    @classmethod
    def refuses(cls, settings: Any) -> str | None:
        """Why this estimator cannot be computed from a run made with ``settings`` (an ``EvalConfig``: its
        ``num_samples``, ...), checked before any work starts; None when it can."""
        return None

    def fit(self, inputs: Inputs, y: np.ndarray) -> Estimator:
        return self

    def score(self, inputs: Inputs) -> np.ndarray:
        raise NotImplementedError

    def get_params(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if not k.endswith("_")}

    def check_params(self) -> Estimator:
        """``self`` when every parameter meets its declared constraint (`_parameter_constraints`); else
        `ValidationError` ``"<estimator>: <param> must be <what>, got <value>"``."""
        check_params(self.get_params(), self._parameter_constraints, rename=lambda p: f"{self.name}: {p}")
        return self

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({params})"


class FittedModelEstimator(Estimator):
    """An estimator that is a model fitted on the calibration split, its probability the confidence (TRACE+).

    Subclasses set ``model_class``, a calibrator class (`tracecal.calibrators.Calibrator`): built as
    ``model_class(**get_params())``, fitted on what it reads of the traces (``fit(model.input_of(inputs.batch), y)``:
    the traces, or c_TRACE for one that reads a score), scored with ``model.confidence(inputs.batch)`` (the one way a
    calibrator is applied); the fitted model is ``model_``. They are self-calibrated (not passed through the Platt
    calibrator).
    """

    self_calibrated = True
    needs_fit = True
    model_class: ClassVar[Any] = None

    def check_params(self) -> Estimator:
        """The parameters are the model's: checked against ``model_class``'s declared constraints."""
        if self.model_class is not None:
            own = self.get_params()
            cons = {k: c for k, c in self.model_class._parameter_constraints.items() if k in own}
            check_params(own, cons, rename=lambda p: f"{self.name}: {p}")
        return super().check_params()

    def fit(self, inputs: Inputs, y: np.ndarray) -> FittedModelEstimator:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # zero-token answers / single class: reported by harness
            model = self.model_class(**self.get_params())
            self.model_ = model.fit(model.input_of(inputs.batch), y)
        return self

    def score(self, inputs: Inputs) -> np.ndarray:
        return np.asarray(self.model_.confidence(inputs.batch))


REGISTRY: dict[str, type[Estimator]] = {}


def register(cls: type[Estimator]) -> type[Estimator]:
    if not cls.name or cls.name in REGISTRY:
        raise ValidationError(f"estimator name {cls.name!r} is empty or already registered")
    REGISTRY[cls.name] = cls
    return cls


class UnknownEstimatorError(TracecalError, ValueError):
    """An estimator name that is not registered (the message suggests the closest one)."""


def get_estimator(name: str, **params: Any) -> Estimator:
    """An estimator instance by registry name, its parameters checked (`Estimator.check_params`)."""
    if name not in REGISTRY:
        close = closest(name, REGISTRY)
        hint = f" Did you mean {close!r}?" if close else ""
        raise UnknownEstimatorError(f"unknown estimator {name!r}.{hint} Known: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[name](**params).check_params()


def passes_of(cls: type[Estimator]) -> set[str]:
    """The passes an estimator's stats come from (with their dependencies)."""
    return set(passes_for(cls.stats | TRACE_STATS))


def default_estimators() -> list[str]:
    """What ``all`` (and no selection) means: every registered estimator but the `Estimator.opt_in` ones."""
    return [k for k, c in REGISTRY.items() if not c.opt_in]


def estimator_groups() -> dict[str, Callable[[type[Estimator]], bool]]:
    """Group names for `resolve_estimators`: ``trace-only``, one per pass (estimators that need it) and
    ``sampling`` (those of the ``samples`` pass)."""
    groups: dict[str, Callable[[type[Estimator]], bool]] = {"trace-only": lambda c: c.stats <= TRACE_STATS}
    for name in PASSES:
        if name != "traces":
            groups[name] = _needs_pass(name)
    if "samples" in PASSES:
        groups["sampling"] = _needs_pass("samples")
    return groups


def _needs_pass(name: str) -> Callable[[type[Estimator]], bool]:
    """Whether an estimator needs the pass ``name`` (for `estimator_groups`)."""
    return lambda c: name in passes_of(c)


def resolve_estimators(spec: str | Iterable[str] | None) -> list[str]:
    """Estimator names from a comma-separated spec; ``None``/``"all"`` = every registered estimator but the opt-in
    ones (`default_estimators`).

    Group names select families: ``trace-only`` and the name of a pass (``extra``, ``semantic``, ``beam``,
    ``samples`` alias ``sampling``: every estimator that reads a stat of that pass, opt-in ones included).
    """
    if spec is None or spec == "all":
        return default_estimators()
    names = spec.split(",") if isinstance(spec, str) else list(spec)
    groups = estimator_groups()
    out: list[str] = []
    for n in (x.strip() for x in names if x.strip()):
        if n == "all":
            out += [k for k in default_estimators() if k not in out]
        elif n in groups:
            out += [k for k, c in REGISTRY.items() if groups[n](c) and k not in out]
        else:
            get_estimator(n)  # validates with a helpful message
            if n not in out:
                out.append(n)
    if not out:
        raise UnknownEstimatorError("no estimators selected")
    return out


def needs_of(names: Iterable[str]) -> list[str]:
    """The passes the named estimators need, dependencies first (decides which passes a run performs)."""
    stats: set[str] = set(TRACE_STATS)
    for n in names:
        stats |= REGISTRY[n].stats
    return passes_for(sorted(stats))
