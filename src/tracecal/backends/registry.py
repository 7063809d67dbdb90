"""The backends as one family: each is a name, a loader and the capabilities it declares (`register_backend`).

`tracecal.backends.load_model` loads through the registry, and what once checked a backend's name reads its
declaration instead: which passes a run can compute (a pass `requires` capabilities), what ``--backend`` accepts
(`backend_names`), what a run's identity records, which load keywords the harness passes, how a report names the
weights, whether SECL can train on it. Adding a backend is one `register_backend` call; nothing else changes.

Capabilities (`CAPABILITIES`; a backend that lacks one still has the method and raises
`tracecal.backends.base.BackendUnsupportedError`, and `BackendSpec.why_not` says why in one line):

* ``beams``: beam search scores (``beam_scores``);
* ``exact_entropy``: H_t over the whole vocabulary (not a top-k estimate);
* ``gradients``: gradient steps through the weights (SECL's LoRA training);
* ``hidden_states``: the network's hidden states (SECL's probe);
* ``batching``: several prompts decoded at once (a batch, or concurrent requests);
* ``teacher_forced``: traces of given answers (``trace_answers``);
* ``next_token_logprobs``: log-probs of given next tokens (``next_token_logprobs``: P(True));
* ``in_process``: the weights run in this process (what ``evaluate --backend`` / ``serve --backend`` name);
* ``dtype``: the weight dtype is chosen by ``--dtype``.

>>> from tracecal.backends.registry import get_backend, resolve_backend
>>> resolve_backend("auto", "http://127.0.0.1:8000/v1"), resolve_backend("auto", "model.gguf")
('http', 'hf')
>>> get_backend("llamacpp").can("beams"), get_backend("hf").can("beams")
(False, True)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tracecal._validation import Options
from tracecal.errors import ValidationError

__all__ = [
    "BATCHING",
    "BEAMS",
    "CAPABILITIES",
    "DEFAULT_BACKEND",
    "DTYPE",
    "EXACT_ENTROPY",
    "GRADIENTS",
    "HIDDEN_STATES",
    "IN_PROCESS",
    "NEXT_TOKEN_LOGPROBS",
    "REGISTRY",
    "TEACHER_FORCED",
    "BackendSpec",
    "RegisteredBackends",
    "backend_choices",
    "backend_names",
    "backend_of",
    "get_backend",
    "register_backend",
    "resolve_backend",
]

BEAMS = "beams"
EXACT_ENTROPY = "exact_entropy"
GRADIENTS = "gradients"
HIDDEN_STATES = "hidden_states"
BATCHING = "batching"
TEACHER_FORCED = "teacher_forced"
NEXT_TOKEN_LOGPROBS = "next_token_logprobs"
IN_PROCESS = "in_process"
DTYPE = "dtype"
SAMPLING = "sampling"
CAPABILITIES: dict[str, str] = {
    BEAMS: "beam search scores (beam_scores)",
    EXACT_ENTROPY: "exact entropy over the whole vocabulary",
    GRADIENTS: "gradient steps through its weights (LoRA training)",
    HIDDEN_STATES: "hidden states of the network",
    BATCHING: "batched decoding of several prompts at once",
    TEACHER_FORCED: "traces of given answers (trace_answers)",
    NEXT_TOKEN_LOGPROBS: "log-probs of given next tokens (next_token_logprobs)",
    IN_PROCESS: "weights in this process",
    DTYPE: "choice of weight dtype (--dtype)",
    SAMPLING: "K sampled answers per prompt in one batch, each with its trace (sample_answers)",
}
"""Every capability a backend may declare, with what it means (the module docstring): ``the <name> backend has no
<meaning>`` says why a backend cannot do one it does not declare (`BackendSpec.why_not`)."""
DEFAULT_BACKEND = "hf"
"""The backend ``backend="auto"`` picks for a reference no registered backend claims."""


@dataclass(frozen=True)
class BackendSpec:
    """One registered backend (`register_backend` builds it).

    Attributes:
        name: the ``backend=`` value; loader: ``loader(name_or_path, **options)`` → the backend object.
        capabilities: what it can do (keys of `CAPABILITIES`).
        label: what runs the model, as a message names it (``"llama.cpp (the GGUF run by llama-cpp-python)"``).
        help: a few words for the command line's ``--backend`` help ("" for none).
        options: the `load_model` keywords the harness may pass it (``batch_size``, ``dtype``, ``n_threads``).
        claims: ``claims(name_or_path)`` true where ``backend="auto"`` should pick it (a server for a URL).
        check_model: what is wrong with a model reference for it, or None (checked before anything loads).
        in_identity: a run's identity names it (its answers differ from those of the default backend).
        weights: how a report names the weights it runs where no ``--dtype`` applies (None: the dtype).
        lacks: for a capability it lacks, the one line saying why and what to use instead.
    """

    name: str
    loader: Callable[..., Any]
    capabilities: frozenset[str]
    label: str
    help: str = ""
    options: frozenset[str] = frozenset({"batch_size"})
    claims: Callable[[str | None], bool] | None = None
    check_model: Callable[[str | None], str | None] | None = None
    in_identity: bool = False
    weights: str | None = None
    lacks: Mapping[str, str] = field(default_factory=dict)

    def can(self, *capabilities: str) -> bool:
        """True when it declares every one of ``capabilities``."""
        return set(capabilities) <= self.capabilities

    def why_not(self, capability: str) -> str:
        """Why it cannot do ``capability``: its own line (``lacks``), else one naming the backend."""
        return self.lacks.get(capability) or f"the {self.name} backend has no {CAPABILITIES[capability]}"


REGISTRY: dict[str, BackendSpec] = {}
"""Every backend by name, in registration order (`register_backend`)."""


def register_backend(
    name: str, loader: Callable[..., Any], capabilities: Iterable[str], label: str, **declared: Any
) -> BackendSpec:
    """Register a backend: ``load_model(ref, backend=name, **options)`` then calls ``loader(ref, **options)``, and
    the harness reads ``capabilities`` (keys of `CAPABILITIES`) and the other declarations (`BackendSpec`'s
    attributes, as keywords) wherever it once checked a backend's name. Returns the spec.

    `ValidationError` for an empty, reserved (``auto``) or taken name, an unknown capability, or a ``lacks`` line
    for a capability it declares.
    """
    caps = frozenset(capabilities)
    if not isinstance(name, str) or not name or name == "auto" or name in REGISTRY:
        raise ValidationError(f"backend name {name!r} is empty, reserved or already registered")
    if unknown := sorted(caps - set(CAPABILITIES)):
        raise ValidationError(f"backend {name!r}: unknown capabilities {unknown}; known: {', '.join(CAPABILITIES)}")
    if both := sorted(caps & set(declared.get("lacks", {}))):
        raise ValidationError(f"backend {name!r} declares {both} and says why it lacks them: drop one")
    if "options" in declared:
        declared["options"] = frozenset(declared["options"])
    spec = BackendSpec(name, loader, caps, label, **declared)
    REGISTRY[name] = spec
    return spec


def backend_names(*capabilities: str) -> tuple[str, ...]:
    """The registered backends that declare every one of ``capabilities``, in registration order."""
    return tuple(n for n, spec in REGISTRY.items() if spec.can(*capabilities))


def backend_choices(*capabilities: str) -> tuple[str, ...]:
    """``auto`` and `backend_names` (the values a ``--backend`` option accepts)."""
    return ("auto", *backend_names(*capabilities))


def _choose(choices: tuple[str, ...]) -> str:
    return f"{', '.join(choices[:-1])} or {choices[-1]}" if len(choices) > 1 else choices[0]


def get_backend(name: str) -> BackendSpec:
    """The spec of a registered backend; `ValidationError` naming the registered ones otherwise."""
    if not isinstance(name, str) or name not in REGISTRY:
        raise ValidationError(f"unknown backend {name!r}; choose {_choose(backend_choices())}")
    return REGISTRY[name]


def resolve_backend(backend: str, name_or_path: Any = None) -> str:
    """The backend ``backend`` names: itself when registered, for ``auto`` the first registered backend that claims
    ``name_or_path`` (a server for an ``http(s)://`` URL), else `DEFAULT_BACKEND`."""
    if backend != "auto":
        return get_backend(backend).name
    ref = None if name_or_path is None else str(name_or_path)
    return next((n for n, s in REGISTRY.items() if s.claims is not None and s.claims(ref)), DEFAULT_BACKEND)


def backend_of(model: Any) -> str | None:
    """The registered backend a loaded model object belongs to (its class's ``backend_name``), or None."""
    name = getattr(type(model), "backend_name", None)
    return name if isinstance(name, str) and name in REGISTRY else None


class RegisteredBackends(Options):
    """A constraint (`tracecal._validation`): ``auto`` or a registered backend with every one of ``capabilities``,
    read when checked (a backend registered later is accepted)."""

    capabilities: tuple[str, ...]

    def __init__(self, *capabilities: str) -> None:
        super().__init__()
        object.__setattr__(self, "capabilities", capabilities)

    @property
    def choices(self) -> tuple[str, ...]:
        return backend_choices(*self.capabilities)

    def accepts(self, value: Any) -> bool:
        return isinstance(value, str) and value in self.choices

    def describe(self) -> str:
        return f"one of {', '.join(self.choices)}"
