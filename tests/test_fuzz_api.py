"""A fuzzing harness over the public Python API (the reliability issue): every callable of ``tracecal.__all__``, every
method of the model `load_model` returns (the `Backend` protocol's, named ``model.<method>``) and `record` (what
``tracecal.backends.user_generate`` exports for a user's own ``generate()``), all read from the package itself (a
new public function, class or backend method is covered without editing this file), each of its parameters fed
boundary and absurd values (negative, zero, huge, NaN, ±∞, empty, wrong type) while the other arguments keep the
valid values of `BASE`. The model methods run on the random-weight test model (tests/conftest.py's ``tiny_model``).

For each value the call must return (the value is accepted) or raise a `TracecalError` whose message names the
parameter (a path may be named by its value instead: ``traces file missing.parquet not found``); never another
exception type. A public callable with no entry in `BASE` fails the test ("add base arguments for X"): nothing
public goes unfuzzed silently. Exception classes are not fuzzed (any message makes one). `load_model` loads the
random-weight test model of tests/conftest.py, saved to a folder.

``TRACECAL_FUZZ_EXAMPLES`` sets the examples per parameter (default 6; docs/reliability.md reports a larger run).
"""

from __future__ import annotations

import inspect
import json
import math
import os
import re
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tracecal
from tests.fuzzing import fuzz_settings
from tracecal import Trace, TracecalError
from tracecal.backends.answers import ANSWER_OPTIONS
from tracecal.backends.base import Backend
from tracecal.backends.hf import HFModel
from tracecal.backends.user_generate import Recording, record

EXAMPLES = int(os.environ.get("TRACECAL_FUZZ_EXAMPLES", "6"))
#: Calls made, by outcome (``accepted``, ``refused``); written to ``$TRACECAL_FUZZ_REPORT`` (JSON) at the end when set
#: (the counts docs/reliability.md reports).
OUTCOMES: Counter[str] = Counter()


@dataclass(frozen=True)
class Base:
    """Valid arguments of one public callable: ``build(ctx)`` gives them as keywords (``ctx``: `Context`);
    ``keywords`` are the names its ``**kwargs`` takes (fuzzed too)."""

    build: Callable[[Context], dict[str, Any]]
    keywords: tuple[str, ...] = ()


@dataclass
class Context:
    """The files the base arguments name, in a scratch folder that is also the working folder; ``model()``: the
    tiny HF model whose methods are fuzzed."""

    root: Path
    model_dir: Callable[[], Path]
    model: Callable[[], Any]
    files: dict[str, Path] = field(default_factory=dict)


def _trace() -> Trace:
    return Trace(text="Paris", token_ids=[42, 7], surprisal=[0.1, 0.3], entropy=[0.5, 0.2], id="q1")


def _traces() -> list[Trace]:
    return [_trace(), Trace(text="", token_ids=[], surprisal=[], entropy=[], id="q2")]


#: Valid arguments per public callable (by its name in ``tracecal.__all__``).
BASE: dict[str, Base] = {
    "Trace": Base(lambda c: {"text": "Paris", "token_ids": [42, 7], "surprisal": [0.1, 0.3], "entropy": [0.5, 0.2]}),
    "TraceBatch": Base(lambda c: {"surprisal": [0.1, 0.3], "entropy": [0.5, 0.2], "offsets": [0, 1, 2]}),
    "TraceConfig": Base(lambda c: {}),
    "RiskSpan": Base(
        lambda c: {
            "token_start": 0,
            "token_end": 1,
            "char_start": 0,
            "char_end": 5,
            "risk": 0.5,
            "operator": "window_peak",
            "text": "Paris",
        }
    ),
    "TracePlus": Base(lambda c: {}),
    "export_jsonl": Base(lambda c: {"traces": _traces(), "path": c.root / "out.jsonl"}),
    "import_jsonl": Base(lambda c: {"path": c.files["jsonl"]}),
    "load_calibrator": Base(lambda c: {"path": c.files["calibrator"]}),
    "load_model": Base(
        lambda c: {"name_or_path": c.model_dir(), "backend": "hf", "batch_size": 2, "dtype": "float32"},
        keywords=("batch_size", "dtype", "threads"),  # tracecal.backends.get_backend("hf").options
    ),
    "load_traces": Base(lambda c: {"path": c.files["parquet"]}),
    "risk_profile": Base(lambda c: {"traces": _traces()}),
    "risk_spans": Base(lambda c: {"traces": _traces()}),
    "save_traces": Base(lambda c: {"traces": _traces(), "path": c.root / "out.parquet"}),
    "trace_confidence": Base(lambda c: {"traces": _traces()}),
    "trace_risk": Base(lambda c: {"traces": _traces()}),
}


PROMPT_IDS = [[1, 2, 3]]

#: Valid arguments of the model's methods (``model.<name>``: a method of the `Backend` protocol) and of `record`.
BASE |= {
    "model.generate": Base(lambda c: {"prompts": ["Hi"], "max_new_tokens": 3}),
    "model.trace_answers": Base(lambda c: {"prompts": ["Hi"], "answers": ["Paris"]}, keywords=ANSWER_OPTIONS),
    "model.beam_scores": Base(lambda c: {"prompts": ["Hi"], "num_beams": 2, "max_new_tokens": 3}),
    "model.encode_prompt": Base(lambda c: {"prompt": "Hi"}),
    "model.next_token_logprobs": Base(lambda c: {"prompt_ids": PROMPT_IDS, "token_ids": [4, 5]}),
    "model.teacher_forced": Base(lambda c: {"prompt_ids": PROMPT_IDS[0], "answer_ids": [4, 5]}),
    "record": Base(lambda c: {}),
}


def model_methods() -> list[str]:
    """The methods of the `Backend` protocol (what every loaded model has), read from it."""
    return sorted(n for n, v in vars(Backend).items() if inspect.isfunction(v) and not n.startswith("_"))


def record_and_generate(
    distribution: str = "temperature", top_logprobs: int = 0, on_step: Any = None, model_id: str | None = None
) -> Any:
    """`record` as a user runs it: ``with record(model, tokenizer, **options): model.generate(...)`` on the tiny
    model (its parameters are `Recording`'s: `test_the_harness_covers_every_public_callable` checks it)."""
    tiny = _TINY[0]
    ids = tiny.tokenizer("Hi", return_tensors="pt").input_ids
    opts = {"distribution": distribution, "top_logprobs": top_logprobs, "on_step": on_step, "model_id": model_id}
    with record(tiny.model, tiny.tokenizer, **opts) as rec:
        tiny.model.generate(ids, max_new_tokens=3, do_sample=False, pad_token_id=tiny.tokenizer.eos_token_id)
    return rec


_TINY: list[Any] = []


def public_callables(ctx: Context | None = None) -> dict[str, Any]:
    """Every callable of ``tracecal.__all__`` but the exception classes, every method of a loaded model (the
    unbound `HFModel` method without ``ctx``; bound to the tiny model with it) and `record`, by name."""
    out: dict[str, Any] = {}
    for name in tracecal.__all__:
        obj = getattr(tracecal, name)
        if callable(obj) and not (isinstance(obj, type) and issubclass(obj, BaseException)):
            out[name] = obj
    for name in model_methods():
        out[f"model.{name}"] = getattr(ctx.model() if ctx else HFModel, name)
    out["record"] = record_and_generate
    return out


def parameters(name: str, fn: Any) -> dict[str, str]:
    """The parameters of ``fn`` to fuzz, with their annotation as text: every named one, plus the `Base`
    keywords its ``**kwargs`` takes."""
    out: dict[str, str] = {}
    for p in inspect.signature(fn).parameters.values():
        if p.name == "self":
            continue
        if p.kind is p.VAR_KEYWORD:
            out |= {k: "Any" for k in (BASE[name].keywords if name in BASE else ())}
        elif p.kind is not p.VAR_POSITIONAL:
            out[p.name] = str(p.annotation)
    return out


def base_of(name: str, ctx: Context) -> dict[str, Any]:
    """The valid arguments of the public callable ``name``; an AssertionError saying to add them when `BASE` has
    none (a new public callable is never skipped)."""
    assert name in BASE, f"add base arguments for {name} to BASE in tests/test_fuzz_api.py (a new public callable)"
    return BASE[name].build(ctx)


def cases() -> list[tuple[str, str]]:
    """(callable, parameter) for every fuzzed parameter; ``(name, "")`` for a callable with no `BASE` entry."""
    out = []
    for name, fn in public_callables().items():
        params = parameters(name, fn) if name in BASE else {"": ""}
        out += [(name, p) for p in params]
    return out


NAN, INF = math.nan, math.inf
NUMBERS = [-1, 0, -0.0, 1, 0.5, -1e-300, 1e308, 10**30, -(10**30), 2**63, NAN, INF, -INF, np.float64(NAN), np.int64(-1)]
TEXTS = ["", " ", "nan", "-1", "x" * 5000, "\x00", "\ud800", "a,b", "\x1b[2J", "é"]
PATHS = [
    "",
    ".",
    "..",
    "/",
    "/dev/null",
    "missing.parquet",
    "x" * 300,
    "a\x00b",
    "afile",
    "dir",
    "afile/x",
    "~nobody/x",
]
SEQUENCES: list[Any] = [[], (), [[]], [None], [NAN], [INF], [-1.0], [1e308], ["x"], [[0.1, 0.2]], range(3)]
ARRAYS = [np.array([]), np.array([NAN]), np.zeros((2, 2)), np.array(["a"]), np.array([2**62])]
WRONG: list[Any] = [None, True, {}, object(), b"x", "abc", 1.5, [1], {"a": 1}, -1, [_trace]]
#: Generated path text stays in the scratch folder (tracecal may write it): no separator, no ``~``.
SAFE = st.characters(blacklist_characters="/~", blacklist_categories=("Cs",))


def kind(annotation: str) -> str:
    """What a parameter takes, read from its annotation: number, path, text, sequence or other."""
    if re.search(r"\b(int|float)\b", annotation) and not re.search(r"Sequence|tuple\[", annotation):
        return "number"
    if "PathLike" in annotation:
        return "path"
    if re.search(r"\bstr\b", annotation) and not re.search(r"list\[str\]|Sequence", annotation):
        return "text"
    if re.search(r"Sequence|Iterable|list|tuple|ndarray|TraceBatch", annotation):
        return "sequence"
    return "other"


def values(annotation: str) -> st.SearchStrategy[Any]:
    """Boundary and absurd values for a parameter annotated ``annotation`` (always some of another type)."""
    wrong = st.sampled_from(WRONG)
    k = kind(annotation)
    if k == "number":
        return st.one_of(st.sampled_from(NUMBERS), st.integers(), st.floats(), wrong)
    if k == "path":
        return st.one_of(st.sampled_from(PATHS), st.text(SAFE, max_size=30), wrong)
    if k == "text":
        return st.one_of(st.sampled_from(TEXTS), st.text(max_size=30), wrong)
    if k == "sequence":
        floats = st.lists(st.floats(), max_size=4)
        return st.one_of(st.sampled_from(SEQUENCES + ARRAYS), floats, floats.map(np.array), wrong)
    return st.one_of(wrong, st.sampled_from(NUMBERS + TEXTS[:4] + SEQUENCES[:3]))


def _shown(value: Any) -> set[str]:
    """How a message may show a path value: as given, escaped, absolute, expanded."""
    if not isinstance(value, str | os.PathLike):
        return set()
    text = os.fspath(value)
    forms = {text, repr(text)[1:-1], re.sub("[\x00-\x1f\x7f-\x9f]", lambda m: repr(m.group())[1:-1], text)}
    if "\x00" not in text:
        forms |= {os.path.abspath(text or "."), os.path.expanduser(text)}
    return {f for f in forms if f.strip()} or {"."}


def names(param: str, annotation: str, value: Any, message: str) -> bool:
    """Whether ``message`` names ``param`` (as written, with spaces or dashes; an item of a plural one by its index:
    ``prompt 0`` of ``prompts``), or, for a path, its value."""
    spelt = {param, param.replace("_", " "), param.replace("_", "-")}
    if any(re.search(rf"(?<![A-Za-z_]){re.escape(s)}(?![A-Za-z_])", message) for s in spelt):
        return True
    if param.endswith("s") and re.search(rf"(?<![A-Za-z_]){re.escape(param[:-1])} \d+", message):
        return True
    return kind(annotation) == "path" and any(f in message for f in _shown(value))


def check_call(name: str, fn: Any, kwargs: dict[str, Any], param: str, annotation: str) -> str:
    """Call ``fn(**kwargs)`` and assert what the user sees: ``accepted`` (it returned) or ``refused`` (a
    `TracecalError` naming ``param``); any other exception fails, naming the call."""
    value = kwargs[param]
    call = f"tracecal.{name}(..., {param}={value!r:.80})"
    try:
        fn(**kwargs)
    except TracecalError as e:
        assert names(param, annotation, value, str(e)), f"{call}: the message does not name {param!r}: {e}"
        OUTCOMES["refused"] += 1
        return "refused"
    except Exception as e:  # noqa: BLE001  # what the harness is for: any other type is the failure
        pytest.fail(f"{call} raised {type(e).__name__}, not a TracecalError: {e!s:.300}")
    OUTCOMES["accepted"] += 1
    return "accepted"


@pytest.fixture(scope="module")
def context(request: pytest.FixtureRequest) -> Any:
    """A scratch working folder holding a traces Parquet file, a traces JSONL file, a TRACE+ calibrator file, a
    plain file ``afile`` and a folder ``dir``; the tiny model is saved there on first use."""
    root = Path(tempfile.mkdtemp(prefix="tracecal-fuzz-api-"))
    mp = pytest.MonkeyPatch()
    mp.chdir(root)
    saved: list[Path] = []

    def model_dir() -> Path:
        if not saved:
            tiny = request.getfixturevalue("tiny_model")
            tiny.model.save_pretrained(root / "tiny-model")
            tiny.tokenizer.save_pretrained(root / "tiny-model")
            saved.append(root / "tiny-model")
        return saved[0]

    def model() -> Any:
        if not _TINY:
            _TINY.append(request.getfixturevalue("tiny_model"))
        return _TINY[0]

    ctx = Context(root, model_dir, model)
    model()
    traces = [Trace(f"a{i}", [i], [0.1 * i], [0.2 + 0.1 * (i % 3)], id=f"q{i}") for i in range(12)]
    ctx.files["parquet"] = tracecal.save_traces(traces, root / "in" / "traces.parquet")
    ctx.files["jsonl"] = tracecal.export_jsonl(traces, root / "in" / "traces.jsonl")
    cal = tracecal.TracePlus().fit(traces, np.array([i % 2 for i in range(12)]))
    cal.save(root / "in" / "cal.json")
    ctx.files["calibrator"] = root / "in" / "cal.json"
    yield ctx
    if os.environ.get("TRACECAL_FUZZ_REPORT"):
        Path(os.environ["TRACECAL_FUZZ_REPORT"]).write_text(json.dumps(dict(OUTCOMES)))
    mp.undo()
    shutil.rmtree(root, ignore_errors=True)


def _reset(root: Path) -> None:
    """The scratch folder as `context` made it (what a call wrote removed; ``afile`` and ``dir`` present)."""
    for p in root.iterdir():
        if p.name not in ("in", "tiny-model"):
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    (root / "afile").write_text("a plain file\n")
    (root / "dir").mkdir()


@pytest.mark.parametrize(("name", "param"), cases())
def test_every_public_parameter_refuses_absurd_values_by_name(name: str, param: str, context: Context) -> None:
    base = base_of(name, context)
    fn = public_callables(context)[name]
    annotation = parameters(name, fn)[param]

    @fuzz_settings(EXAMPLES)
    @given(value=values(annotation))
    def run(value: Any) -> None:
        _reset(context.root)
        check_call(name, fn, base | {param: value}, param, annotation)

    run()


def test_the_base_arguments_are_accepted(context: Context) -> None:
    """Every `BASE` entry is a valid call (so a refusal in the fuzz test is about the fuzzed value)."""
    for name, fn in public_callables(context).items():
        if name in BASE and name != "load_model":  # (load_model's: by every accepted example of its fuzz cases)
            fn(**BASE[name].build(context))


def test_a_new_public_callable_without_base_arguments_fails(monkeypatch: pytest.MonkeyPatch, context: Context) -> None:
    """The harness reads ``tracecal.__all__``: a public function added there is a case at once, and without
    base arguments its test fails saying what to add."""

    def brand_new(x: int = 1) -> int:
        return x

    monkeypatch.setattr(tracecal, "brand_new", brand_new, raising=False)
    monkeypatch.setattr(tracecal, "__all__", [*tracecal.__all__, "brand_new"])
    assert ("brand_new", "") in cases()
    with pytest.raises(AssertionError, match="add base arguments for brand_new"):
        test_every_public_parameter_refuses_absurd_values_by_name("brand_new", "", context)


def test_the_harness_fails_on_another_exception_or_an_unnamed_parameter() -> None:
    """`check_call` can fail: a bare ValueError, or a TracecalError that does not name the parameter."""

    def bare(k: int) -> None:
        raise ValueError("k must be positive")

    def unnamed(k: int) -> None:
        raise tracecal.ValidationError("must be positive")

    def named(k: int) -> None:
        raise tracecal.ValidationError(f"k must be positive, got {k}")

    with pytest.raises(pytest.fail.Exception, match="raised ValueError, not a TracecalError"):
        check_call("bare", bare, {"k": -1}, "k", "int")
    with pytest.raises(AssertionError, match="does not name 'k'"):
        check_call("unnamed", unnamed, {"k": -1}, "k", "int")
    assert check_call("named", named, {"k": -1}, "k", "int") == "refused"
    assert check_call("ok", lambda k: None, {"k": -1}, "k", "int") == "accepted"


def test_the_harness_covers_every_public_callable() -> None:
    covered = {name for name, _ in cases()}
    assert covered == set(public_callables())
    assert {"trace_confidence", "load_model", "save_traces", "TracePlus"} <= covered
    assert ("load_model", "batch_size") in cases() and ("risk_spans", "k") in cases()
    assert ("model.trace_answers", "temperature") in cases() and ("record", "top_logprobs") in cases()
    assert {f"model.{m}" for m in ("generate", "trace_answers", "teacher_forced")} <= covered
    recording = set(inspect.signature(Recording.__init__).parameters) - {"self", "model", "tokenizer"}
    assert recording == set(inspect.signature(record_and_generate).parameters)
