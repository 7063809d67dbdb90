"""Estimator interface and registry.

An estimator maps what a run computed once per answer (`Inputs`) to one confidence per answer (higher =
more confident). Estimators are small stateless objects with parameters in ``__init__`` and a declared
``needs`` set; the expensive statistics (trace, beam pass, embeddings, extra inference) are computed once
by the evaluation harness, only when a selected estimator needs them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from tracecal.trace import Trace, TraceBatch

TRACE = "trace"
BEAM = "beam"
EMBEDDER = "embedder"
EXTRA = "extra_inference"
NEEDS = (TRACE, BEAM, EMBEDDER, EXTRA)


@dataclass
class Inputs:
    """Everything estimators may read, aligned by answer.

    Attributes:
        batch: the traces as ragged arrays (s_t, H_t).
        traces: the `Trace` objects (token strings, text) when available.
        beam: (B, num_beams) length-normalised beam log-scores, best first (``needs={"beam"}``).
        tokensar_rel: per-token normalised relevance R̃_t, ragged like ``batch`` (``needs={"embedder"}``).
        mars_u: per-token importance u_t (sums to 1 per answer), ragged like ``batch``.
        p_true: P(True) per answer (``needs={"extra_inference"}``).
        verbalized: verbalised confidence per answer, in [0, 1].
    """

    batch: TraceBatch
    traces: list[Trace] | None = None
    beam: np.ndarray | None = None
    tokensar_rel: np.ndarray | None = None
    mars_u: np.ndarray | None = None
    p_true: np.ndarray | None = None
    verbalized: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.batch)

    def select(self, idx: np.ndarray) -> Inputs:
        """The same inputs for a subset of answers (e.g. the calibration split)."""
        idx = np.asarray(idx, dtype=np.int64)

        def rag(x: np.ndarray | None) -> np.ndarray | None:
            if x is None:
                return None
            return TraceBatch(x, x, self.batch.offsets).select(idx).surprisal

        return Inputs(
            batch=self.batch.select(idx),
            traces=None if self.traces is None else [self.traces[i] for i in idx],
            beam=None if self.beam is None else self.beam[idx],
            tokensar_rel=rag(self.tokensar_rel),
            mars_u=rag(self.mars_u),
            p_true=None if self.p_true is None else self.p_true[idx],
            verbalized=None if self.verbalized is None else self.verbalized[idx],
        )


class Estimator:
    """Base class. Subclasses set ``name``, ``family``, ``needs`` and implement `score`.

    ``self_calibrated`` estimators output probabilities fitted on the calibration split (TRACE+) and are not
    passed through the Platt calibrator; ``needs_fit`` ones choose a parameter on the calibration split.
    """

    name: ClassVar[str] = ""
    family: ClassVar[str] = ""
    needs: ClassVar[frozenset[str]] = frozenset({TRACE})
    description: ClassVar[str] = ""
    self_calibrated: ClassVar[bool] = False
    needs_fit: ClassVar[bool] = False
    substitute: ClassVar[str | None] = None  # named in reports when the original component was replaced

    def fit(self, inputs: Inputs, y: np.ndarray) -> Estimator:
        return self

    def score(self, inputs: Inputs) -> np.ndarray:
        raise NotImplementedError

    def get_params(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if not k.endswith("_")}

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({params})"


REGISTRY: dict[str, type[Estimator]] = {}


def register(cls: type[Estimator]) -> type[Estimator]:
    if not cls.name or cls.name in REGISTRY:
        raise ValueError(f"estimator name {cls.name!r} is empty or already registered")
    if not cls.needs <= set(NEEDS):
        raise ValueError(f"{cls.name}: unknown needs {set(cls.needs) - set(NEEDS)}")
    REGISTRY[cls.name] = cls
    return cls


class UnknownEstimatorError(ValueError):
    pass


def get_estimator(name: str, **params: Any) -> Estimator:
    """An estimator instance by registry name."""
    if name not in REGISTRY:
        import difflib

        close = difflib.get_close_matches(name, REGISTRY, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise UnknownEstimatorError(f"unknown estimator {name!r}.{hint} Known: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[name](**params)


def resolve_estimators(spec: str | list[str] | None) -> list[str]:
    """Estimator names from a comma-separated spec; ``None``/``"all"`` = every registered estimator.

    Group names select families: ``trace-only``, ``beam``, ``semantic``, ``extra`` (by declared needs).
    """
    if spec is None or spec == "all":
        return list(REGISTRY)
    names = spec.split(",") if isinstance(spec, str) else list(spec)
    groups: dict[str, Callable[[type[Estimator]], bool]] = {
        "trace-only": lambda c: c.needs == frozenset({TRACE}),
        "beam": lambda c: BEAM in c.needs,
        "semantic": lambda c: EMBEDDER in c.needs,
        "extra": lambda c: EXTRA in c.needs,
    }
    out: list[str] = []
    for n in (x.strip() for x in names if x.strip()):
        if n in groups:
            out += [k for k, c in REGISTRY.items() if groups[n](c) and k not in out]
        else:
            get_estimator(n)  # validates with a helpful message
            if n not in out:
                out.append(n)
    if not out:
        raise UnknownEstimatorError("no estimators selected")
    return out


def needs_of(names: list[str]) -> set[str]:
    """The union of the needs of the named estimators (decides which passes a run performs)."""
    return set().union(*(REGISTRY[n].needs for n in names)) if names else set()
