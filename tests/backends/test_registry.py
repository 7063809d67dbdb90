"""`tracecal.backends.registry`: backends registered with a loader and declared capabilities; what the harness reads."""

from __future__ import annotations

from typing import Any

import pytest

from tracecal.backends.registry import (
    BEAMS,
    CAPABILITIES,
    DTYPE,
    IN_PROCESS,
    REGISTRY,
    RegisteredBackends,
    backend_choices,
    backend_names,
    backend_of,
    get_backend,
    register_backend,
    resolve_backend,
)
from tracecal.errors import ValidationError


@pytest.fixture()
def scratch() -> Any:
    """Registers backends named ``scratch*`` for one test and removes them after."""
    yield register_backend
    for name in [n for n in REGISTRY if n.startswith("scratch")]:
        del REGISTRY[name]


def test_the_builtin_backends_declare_what_the_name_checks_knew() -> None:
    assert backend_choices() == ("auto", "hf", "http", "llamacpp")
    assert backend_names(IN_PROCESS) == ("hf", "llamacpp") and backend_names(DTYPE) == ("hf",)
    assert backend_names(BEAMS) == ("hf",) and backend_names(IN_PROCESS, BEAMS) == ("hf",)
    assert [n for n, s in REGISTRY.items() if s.in_identity] == ["llamacpp"]
    assert get_backend("llamacpp").weights == "GGUF weights in llama.cpp" and get_backend("hf").weights is None
    assert get_backend("http").why_not(BEAMS) == "an OpenAI-compatible server returns no beam scores: use --backend hf"
    assert get_backend("llamacpp").why_not("gradients") == f"the llamacpp backend has no {CAPABILITIES['gradients']}"
    check: Any = get_backend("llamacpp").check_model
    assert check("m.gguf") is None and "runs a .gguf file or a named model" in check("http://h/m.gguf")


def test_auto_resolves_to_the_backend_that_claims_the_reference() -> None:
    assert resolve_backend("auto", "https://h:8000/v1") == "http" and resolve_backend("auto", None) == "hf"
    assert resolve_backend("auto", "x.gguf") == "hf" and resolve_backend("llamacpp", "x.gguf") == "llamacpp"
    with pytest.raises(ValidationError, match="unknown backend 'onnx'; choose auto, hf, http or llamacpp"):
        resolve_backend("onnx")


def test_a_registered_backend_joins_every_choice(scratch: Any) -> None:
    class Model:
        backend_name = "scratch"

    constraint = RegisteredBackends(IN_PROCESS)
    assert not constraint.accepts("scratch") and constraint.describe() == "one of auto, hf, llamacpp"
    spec = scratch("scratch", lambda ref, **kw: (ref, kw), {IN_PROCESS}, "a scratch model", lacks={BEAMS: "no beams"})
    assert constraint.accepts("scratch") and "scratch" in backend_names(IN_PROCESS)
    assert spec.loader("m", batch_size=2) == ("m", {"batch_size": 2}) and spec.why_not(BEAMS) == "no beams"
    assert backend_of(Model()) == "scratch" and backend_of(object()) is None
    from tracecal.backends import load_model

    assert load_model("m", backend="scratch", batch_size=3) == ("m", {"batch_size": 3})  # type: ignore[comparison-overlap]


@pytest.mark.parametrize(
    ("name", "caps", "extra", "message"),
    [
        ("", set(), {}, "empty, reserved or already registered"),
        ("auto", set(), {}, "empty, reserved or already registered"),
        ("hf", set(), {}, "empty, reserved or already registered"),
        ("scratch", {"telepathy"}, {}, "unknown capabilities \\['telepathy'\\]"),
        ("scratch", {BEAMS}, {"lacks": {BEAMS: "no"}}, "says why it lacks them"),
    ],
)
def test_a_backend_that_breaks_the_contract_is_refused(
    scratch: Any, name: str, caps: set, extra: dict, message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        scratch(name, lambda ref, **kw: None, caps, "x", **extra)
