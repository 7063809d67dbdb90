"""Helpers every backend shares (`tracecal.backends.base`): argument checks, prompt checks, the stop-string rule,
character offsets, the trace of a locally decoded answer, and the exception classes."""

from __future__ import annotations

import pytest

from tracecal.backends.arguments import (
    GenerateArgs,
    PromptTooLongError,
    check_batch_size,
    check_generate_args,
    check_positive_int,
    check_prompts,
)
from tracecal.backends.base import (
    BackendUnsupportedError,
    char_offsets,
    decoded_prefixes,
    local_trace,
    name_trace,
    stop_string_hit,
)
from tracecal.errors import TracecalError, ValidationError


# ------------------------------------------------------------------------------------------ stop-string rule
@pytest.mark.parametrize(
    ("text", "stops", "hit"),
    [
        ("\n", ("\n",), False),  # only whitespace so far: not an answer yet
        (" \n", ("\n",), False),
        ("\n\n ", ("\n",), False),
        ("\nParis", ("\n",), False),
        ("\nParis\n", ("\n",), True),  # the newline after the answer ends it
        (" Paris\n", ("\n",), True),
        ("Paris", ("\n",), False),
        ("", ("\n",), False),
        ("\n\n", ("\n\n", "\nQuestion:"), False),  # math stops: leading blank lines are not the end
        ("\n\n7", ("\n\n", "\nQuestion:"), False),
        ("\n\n7\n\n", ("\n\n", "\nQuestion:"), True),
        ("\n\nQuestion: x", ("\n\n", "\nQuestion:"), True),  # reaches past the leading whitespace
        ("Paris. Question", ("Question",), True),  # stops with content work as before
        (" is is", (" is is",), True),  # leading whitespace inside a stop string that reaches the content
        (" is", (" is is",), False),
        ("Paris\n", (), False),
    ],
)
def test_stop_strings_count_only_after_the_answer_began(text: str, stops: tuple[str, ...], hit: bool) -> None:
    assert stop_string_hit(text, stops) is hit


# ------------------------------------------------------------------------------------------ argument checks
def test_check_positive_int_keeps_its_messages() -> None:
    assert check_positive_int(3, "n") == 3
    with pytest.raises(ValidationError, match=r"n must be a positive integer \(≥ 1\), got 0"):
        check_positive_int(0, "n")
    with pytest.raises(ValueError, match=r"n must be a positive integer, got True \(bool\)"):
        check_positive_int(True, "n")
    assert check_batch_size(None, 7) == 7 and check_batch_size(2, 7) == 2


def test_check_generate_args() -> None:
    args = check_generate_args("hi", 4, None, 8)
    assert args == GenerateArgs(["hi"], 4, 8, 0)
    assert check_generate_args(["a", "b"], 4, 2, 8, ids=["x", "y"], top_logprobs=3).top_logprobs == 3
    with pytest.raises(ValidationError, match="ids must have one entry per prompt: 1 ids for 2 prompts"):
        check_generate_args(["a", "b"], 4, None, 8, ids=["x"])
    with pytest.raises(ValidationError, match="prompts is empty"):
        check_generate_args([], 4, None, 8)
    with pytest.raises(ValidationError, match=r"prompt 0, message 0: expected"):
        check_prompts([[{"role": "user"}]])


def test_char_offsets_tile_the_text_across_a_split_character() -> None:
    offsets, strings = char_offsets(["", "ab", "ab\ufffd", "abé"], "abé")
    assert offsets.tolist() == [0, 2, 2] and strings == ["ab", "", "é"]


def test_local_trace_and_name_trace() -> None:
    class Tok:
        def batch_decode(self, seqs):  # type: ignore[no-untyped-def]
            return ["".join("xyz"[i] for i in s) for s in seqs]

    prefixes = decoded_prefixes(Tok(), [0, 1, 2])
    assert prefixes == ["", "x", "xy", "xyz"] and decoded_prefixes(Tok(), []) == [""]
    t = local_trace(prefixes[:3], [0, 1, 2], [0.1, 0.2, 0.3], [1.0, 1.1, 1.2], [5], "eos", "m", {"k": 1})
    assert t.text == "xy" and t.token_ids.tolist() == [0, 1] and t.surprisal.tolist() == [0.1, 0.2]
    assert t.entropy_kind == "exact" and t.stop_reason == "eos" and t.offsets.tolist() == [0, 1]
    named = name_trace(t, [{"role": "user", "content": "q"}], 3, None)
    assert named.prompt == "user: q" and named.id == "3" and name_trace(t, "p", 0, ["a"]).id == "a"


def test_every_backend_error_is_a_tracecal_error() -> None:
    from tracecal.backends.hf import ModelLoadError
    from tracecal.backends.http.client import HTTPBackendError, LogprobsUnavailableError
    from tracecal.backends.llamacpp_load import LlamaCppMissingError
    from tracecal.backends.servers import ServerExitedError, ServerTimeoutError

    for cls, builtin in [
        (PromptTooLongError, ValueError),
        (BackendUnsupportedError, NotImplementedError),
        (ModelLoadError, RuntimeError),
        (HTTPBackendError, RuntimeError),
        (LogprobsUnavailableError, ValueError),
        (LlamaCppMissingError, ImportError),
        (ServerExitedError, RuntimeError),
        (ServerTimeoutError, TimeoutError),
    ]:
        assert issubclass(cls, TracecalError) and issubclass(cls, builtin), cls
