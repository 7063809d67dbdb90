"""The one JSON artefact format of every tracecal calibrator, and their base class `Calibrator`.

``cal.save(path)`` writes, and ``Cls.load(path)`` reads, one envelope (never pickle) ::

    {"format": "tracecal.calibrator", "format_version": 2, "class": "PlattCalibrator",
     "params": {...}, "state": {...}, "versions": {"tracecal": ..., "numpy": ..., "sklearn": ...},
     "provenance": {"model": ..., "dtype": ..., "tracecal": ..., "run": ...}}

``params`` are the ``__init__`` arguments, ``state`` the learned attributes (each class's ``_get_state``),
``provenance`` the answers it was fitted on (``cal.provenance``, `tracecal.traces.provenance`; null fields where
unknown; absent from older files). The class is looked up by name in a fixed registry (never imported by name):
`tracecal.calibrators.scalar.SCALAR_CLASSES` for the scalar calibrators, and
`tracecal.calibrators.CALIBRATOR_CLASSES` (`tracecal.calibrators.load_calibrator`) for all, TRACE+ included.
Every value is checked on load (`tracecal.calibrators.values`) — probabilities in [0, 1], finite weights and means
of magnitude at most `MAX_ABS_STATE`, positive scales, lengths consistent with the feature names, known kernels,
bounded file size and nesting — and anything else raises `CalibratorFileError` (a ``ValueError``) naming the
file and what to fix. The older layouts (TracePlus ``"format": "tracecal.TracePlus"`` version 1; scalar
``{"kind", "format_version": 1}``) still load.

Every calibrator declares what it reads (``reads``, one of `READS`): ``"traces"`` (the decoding traces: TRACE+ and
its variants), ``"score"`` (one confidence score per answer: Platt, isotonic, temperature) or ``"hidden"`` (traces
carrying hidden-state summaries: `tracecal.calibrators.probe.HiddenProbe`, which also declares the backend capability
that records them, ``needs``, and the options that ask for them, `Calibrator.backend_options`). `Calibrator.confidence`
is the one way a fitted calibrator is applied — by ``tracecal score``, ``tracecal score-answers``, the gateway, the
estimators that wrap a calibrator and the Python API — and `Calibrator.fit_answers` fits on what it reads, so a
class registered with `tracecal.calibrators.register_calibrator` is usable everywhere without touching any of them.

Hyper-parameters are declared once per class in ``_parameter_constraints`` (the one vocabulary of
`tracecal._validation`: `Interval`, `Options`, `Flag`, `ListOf`) and checked by its one call, `check_params`, in
``fit`` and on load; a bad value raises `tracecal.errors.ValidationError` (a
``ValueError``) naming the parameter, what it must be and what it got.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from tracecal._outputs import InputPaths, atomic_write
from tracecal._validation import Constraint, check_params
from tracecal.calibrators.values import (
    MAX_ABS_STATE,
    MAX_DEPTH,
    MAX_FILE_BYTES,
    Z_CLIP,
    CalibratorFileError,
    check_number,
    json_array,
    json_float,
    read_calibrator_json,
)
from tracecal.errors import ValidationError
from tracecal.signals.operators import trace_confidence
from tracecal.traces.provenance import provenance, read_provenance, traces_provenance
from tracecal.traces.trace import Trace, TraceBatch
from tracecal.version import __version__

__all__ = [
    "CalibratorFileError",
    "Calibrator",
    "read_calibrator_json",
    "check_number",
    "json_float",
    "json_array",
    "upgrade_legacy",
    "versions",
    "FORMAT",
    "FORMAT_VERSION",
    "MAX_ABS_STATE",
    "MAX_DEPTH",
    "Z_CLIP",
    "MAX_FILE_BYTES",
    "READS",
    "NO_HIDDEN",
]

FORMAT = "tracecal.calibrator"
FORMAT_VERSION = 2
"""Version of the envelope layout (1 was the per-class layouts that `upgrade_legacy` still reads)."""
READS = ("traces", "score", "hidden")
"""What a calibrator reads (`Calibrator.reads`): ``"traces"`` — the answers' decoding traces (a `TraceBatch` or a list
of `Trace`); ``"score"`` — one finite confidence score per answer (c_TRACE unless the caller gives another);
``"hidden"`` — a list of `Trace` carrying the hidden-state summaries of the model that wrote them (``trace.hidden``,
recorded by a backend with the ``hidden_states`` capability: ``generate`` / ``trace_answers`` with
``hidden_layers=cal.backend_options()["hidden_layers"]``), and their decoding traces for a fused reader."""
NO_HIDDEN = (
    "reads hidden states, which {where} do not hold: score answers with an HF model (`tracecal score-answers "
    "ANSWERS --model M --calibrator CAL`, or in Python traces from `model.trace_answers(..., **cal.backend_options())`)"
)
"""The one message for a hidden-state reader given traces without hidden states (``{where}``: what was given)."""
_LEGACY_KINDS = {"platt": "PlattCalibrator", "isotonic": "IsotonicCalibrator", "temperature": "TemperatureCalibrator"}
_REFIT = "refit the calibrator and save it again (the file was edited or corrupted)"


def versions() -> dict[str, str]:
    """Versions of tracecal, numpy and scikit-learn, written into every calibrator file."""
    import sklearn

    return {"tracecal": __version__, "numpy": np.__version__, "sklearn": sklearn.__version__}


def _is_traces(x: Any) -> bool:
    return isinstance(x, TraceBatch) or (isinstance(x, list | tuple) and all(isinstance(t, Trace) for t in x))


def _lengths(x: Sequence[Trace] | TraceBatch) -> np.ndarray:
    """Tokens per answer (no value check: the calibrator's own ``predict_proba`` checks the values)."""
    return x.lengths if isinstance(x, TraceBatch) else np.array([t.length for t in x], dtype=np.int64)


def _hidden_traces(name: str, traces: Sequence[Trace] | TraceBatch | None) -> list[Trace]:
    """The traces of a hidden-state reader, each carrying ``hidden``; `ValidationError` with `NO_HIDDEN` otherwise."""
    if traces is None:
        raise ValidationError(f"{name} reads the answers' traces with their hidden states: pass traces")
    if isinstance(traces, TraceBatch):
        raise ValidationError(f"{name} {NO_HIDDEN.format(where='the numbers of a TraceBatch')}")
    missing = sum(t.hidden is None for t in traces)
    if missing:
        where = f"{missing} of these {len(traces)} traces (trace files and traces recorded without hidden_layers)"
        raise ValidationError(f"{name} {NO_HIDDEN.format(where=where)}")
    return list(traces)


def _jsonable(params: Mapping[str, Any]) -> dict[str, Any]:
    def plain(v: Any) -> Any:
        if isinstance(v, tuple | list | np.ndarray):
            return [plain(x) for x in v]
        return v.item() if isinstance(v, np.generic) else v

    return {k: plain(v) for k, v in params.items()}


def upgrade_legacy(d: Mapping[str, Any]) -> Mapping[str, Any]:
    """The version-2 envelope for a dict in an older layout (TracePlus v1 files, scalar ``kind`` dicts)."""
    if d.get("format") == "tracecal.TracePlus":  # TracePlus.save before format_version 2: flat keys
        if d.get("version") != 1:
            raise CalibratorFileError(f"unsupported TRACE+ calibrator version {d.get('version')!r} (reads 1)")
        keys = ("feature_names", "means", "sds", "kept", "weights", "bias", "constant", "n_train", "base_rate")
        state = {k: d[k] for k in keys if k in d}
        old = {"tracecal": d.get("tracecal_version"), "sklearn": d.get("sklearn_version")}
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "class": "TracePlus",
            "params": d.get("params"),
            "state": state,
            "versions": old,
        }
    if "format" not in d and "kind" in d:  # ScalarCalibrator.to_dict before format_version 2
        if d["kind"] not in _LEGACY_KINDS:
            raise CalibratorFileError(f"unknown calibrator kind {d['kind']!r}; valid kinds: {sorted(_LEGACY_KINDS)}")
        if d.get("format_version") != 1:
            raise CalibratorFileError(f"unsupported format_version {d.get('format_version')!r} for a 'kind' dict")
        return {**d, "format": FORMAT, "format_version": FORMAT_VERSION, "class": _LEGACY_KINDS[d["kind"]]}
    return d


# ---------------------------------------------------------------------------------------- the base class


class Calibrator(BaseEstimator):
    """Base of every tracecal calibrator: the sklearn conventions and the one JSON artefact format.

    Subclasses declare ``reads`` (`READS`: what ``fit`` and ``predict_proba`` take, traces or one score per
    answer), implement ``fit`` / ``predict_proba`` and the persistence hooks ``_get_state`` (plain JSON
    of the learned state) and ``_set_state`` (the inverse, checking every value and raising
    `CalibratorFileError`); ``_parameter_constraints`` declares each hyper-parameter's constraint (checked by
    ``_check_params``: ``ValueError`` naming the parameter) and ``_params_from_json`` undoes JSON's type
    changes (a tuple comes back as a list).
    """

    reads: ClassVar[str] = ""
    needs: ClassVar[frozenset[str]] = frozenset()
    """The backend capabilities (`tracecal.backends.registry.CAPABILITIES`) that produce what it reads from answers
    (a hidden-state reader: ``hidden_states``); a surface whose backend lacks one refuses the calibrator."""
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {}
    provenance: dict[str, str | None] | None = None  # the answers it was fitted on (`tracecal.traces.provenance`)

    # ---- the one way in: what it reads, and P(correct) --------------------------------------------
    def input_of(self, traces: Sequence[Trace] | TraceBatch | None = None, score: Any = None) -> Any:
        """What ``fit`` / ``predict_proba`` read for these answers: the traces as given (``reads == "traces"``), or
        one score per answer as a float array (``"score"``): ``score`` when given, else c_TRACE = exp(−R) of the
        traces (docs/method.md §2; NaN for a zero-token answer). `ValidationError` when what it reads is missing or the
        score has not one value per answer."""
        if self.reads not in READS:
            raise ValidationError(f"{type(self).__name__}.reads must be one of {READS}, got {self.reads!r}")
        if traces is not None and not _is_traces(traces):
            raise ValidationError(f"traces must be a TraceBatch or a list of Trace, got {type(traces).__name__}")
        if self.reads == "traces":
            if traces is None:
                raise ValidationError(f"{type(self).__name__} reads the answers' traces: pass traces")
            return traces
        if self.reads == "hidden":
            return _hidden_traces(type(self).__name__, traces)
        if score is None:
            if traces is None:
                raise ValidationError(f"{type(self).__name__} reads one score per answer: pass score (or traces)")
            return trace_confidence(traces)
        s = np.asarray(score, dtype=np.float64)
        if s.ndim != 1 or (traces is not None and len(s) != len(traces)):
            want = "(n,)" if traces is None else f"({len(traces)},)"
            raise ValidationError(f"score must hold one number per answer, shape {want}, got shape {s.shape}")
        return s

    def fit_answers(self, traces: Sequence[Trace] | TraceBatch | None, y: Any, score: Any = None) -> Calibrator:
        """Fit on labelled answers (``y`` ∈ {0, 1}): ``fit(input_of(traces, score), y)``, recording whose answers they
        are (``provenance``: model and dtype) when given as `Trace` objects. Returns ``self``."""
        self.fit(self.input_of(traces, score), y)
        if isinstance(traces, list | tuple) and traces:
            self.provenance = traces_provenance(traces, None)
        return self

    def fit(self, X: Any, y: Any) -> Calibrator:
        """Fit on what the calibrator reads (`reads`) and labels ``y``; subclasses implement it."""
        raise NotImplementedError

    def confidence(self, traces: Sequence[Trace] | TraceBatch | None = None, score: Any = None) -> np.ndarray:
        """P(correct) ∈ [0, 1] per answer from this fitted calibrator, what it reads taken by `input_of`: NaN for a
        zero-token answer (and, for a score reader, a non-finite score). The one entry ``tracecal score``,
        ``score-answers``, the gateway, the estimators and the Python API apply a calibrator through."""
        x = self.input_of(traces, score)
        if self.reads != "score":
            p = np.asarray(self.predict_proba(x), dtype=np.float64)
            if p.shape != (len(x),):
                raise ValidationError(f"{type(self).__name__}.predict_proba gave shape {p.shape} for {len(x)} answers")
            return np.where(_lengths(x) == 0, np.nan, p)
        p = np.full(len(x), np.nan)
        ok = np.isfinite(x)
        if ok.any():
            p[ok] = self.predict_proba(x[ok])
        return p

    def predict_proba(self, X: Any) -> np.ndarray:
        """P(correct) per answer of what the calibrator reads (`reads`); subclasses implement it."""
        raise NotImplementedError

    def backend_options(self) -> dict[str, Any]:
        """The keywords a backend's ``generate`` / ``trace_answers`` must get for the traces to carry what this fitted
        calibrator reads (a hidden-state reader: ``hidden_layers``); ``{}`` for one that reads the traces alone."""
        return {}

    def _check_params(self) -> None:
        """Raise ``ValueError`` saying which hyper-parameter is invalid (called by ``fit`` and on load)."""
        check_params(self.get_params(deep=False), self._parameter_constraints)

    @classmethod
    def _params_from_json(cls, params: dict[str, Any]) -> dict[str, Any]:
        return params

    def _get_state(self) -> dict[str, Any]:
        raise NotImplementedError

    def _set_state(self, state: Mapping[str, Any]) -> None:
        raise NotImplementedError

    @classmethod
    def _loadable(cls) -> Mapping[str, type[Calibrator]]:
        """The classes ``cls.load`` accepts, by class name: ``cls`` itself unless overridden."""
        return {cls.__name__: cls}

    def _check_fitted(self) -> None:
        msg = "this %(name)s is not fitted yet: call fit(...) first, or load a fitted one with %(name)s.load(path)"
        check_is_fitted(self, msg=msg)

    # ---- persistence -----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The JSON envelope ``{"format", "format_version", "class", "params", "state", "versions", "provenance"}``."""
        self._check_fitted()
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "class": type(self).__name__,
            "params": _jsonable(self.get_params(deep=False)),
            "state": self._get_state(),
            "versions": versions(),
            "provenance": self.provenance or provenance(None, None, None),
        }

    @classmethod
    def from_dict(
        cls, d: Any, source: str = "calibrator", registry: Mapping[str, type[Calibrator]] | None = None
    ) -> Calibrator:
        """Rebuild a fitted calibrator from `to_dict` output (or an older layout, see `upgrade_legacy`).

        The class named in ``d["class"]`` is looked up in ``registry`` (default ``cls._loadable()``:
        ``cls`` itself, or the fixed registry of a base class); every parameter and state value is checked.
        Predictions of the result are bit-identical to the saved calibrator's. Raises
        `CalibratorFileError` whose message starts with ``source`` (e.g. the file name).
        """
        try:
            if not isinstance(d, Mapping):
                raise CalibratorFileError(f"expected a JSON object (a dict), got {type(d).__name__}")
            return cls._from_envelope(upgrade_legacy(d), cls._loadable() if registry is None else registry)
        except CalibratorFileError as e:
            raise CalibratorFileError(f"{source}: {e}") from e

    @classmethod
    def _from_envelope(cls, d: Mapping[str, Any], registry: Mapping[str, type[Calibrator]]) -> Calibrator:
        if d.get("format") != FORMAT:
            raise CalibratorFileError(f"not a calibrator file (format={d.get('format')!r}, expected {FORMAT!r})")
        version = d.get("format_version")
        if version != FORMAT_VERSION:
            hint = "upgrade tracecal" if isinstance(version, int) and version > FORMAT_VERSION else "refit and save"
            raise CalibratorFileError(
                f"unsupported calibrator format_version {version!r} (this tracecal reads {FORMAT_VERSION}): {hint}"
            )
        name = d.get("class")
        if not isinstance(name, str) or name not in registry:
            raise CalibratorFileError(
                f"the file holds a {name!r} calibrator; {cls.__name__}.load reads {sorted(registry)} "
                "(tracecal.load_calibrator(path) reads every calibrator class)"
            )
        klass = registry[name]
        params, state = d.get("params"), d.get("state")
        if not isinstance(params, Mapping) or not isinstance(state, Mapping):
            raise CalibratorFileError(f"'params' and 'state' must be JSON objects; {_REFIT}")
        try:
            obj = klass(**klass._params_from_json(dict(params)))
            obj._check_params()
        except (TypeError, ValueError) as exc:
            raise CalibratorFileError(f"bad params for {name}: {exc}; {_REFIT}") from exc
        try:
            obj._set_state(state)
        except (TypeError, ValueError, KeyError) as exc:  # CalibratorFileError is a ValueError
            raise CalibratorFileError(f"invalid {name} state: {exc}; {_REFIT}") from exc
        obj.provenance = read_provenance(d.get("provenance"), CalibratorFileError)
        return obj

    def save(self, path: str | os.PathLike[str], inputs: InputPaths = ()) -> Path:
        """Write the fitted calibrator as JSON (`to_dict`), atomically and never over one of ``inputs``
        (`tracecal._outputs.atomic_write`); returns the path."""
        text = json.dumps(self.to_dict(), indent=2, allow_nan=False)
        path = Path(path)
        atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"), inputs)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str], registry: Mapping[str, type[Calibrator]] | None = None) -> Calibrator:
        """Read a calibrator written by `save` (see `from_dict`); corrupt or foreign files raise
        `CalibratorFileError` naming the file and what to fix; a missing file raises ``FileNotFoundError``."""
        return cls.from_dict(read_calibrator_json(path), str(path), registry)
