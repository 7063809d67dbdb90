"""`tracecal.backends.arguments`: each check refuses a bad value with a `ValidationError` naming the argument (what
every backend's ``generate`` / ``trace_answers`` / ``teacher_forced`` / ``next_token_logprobs`` calls first).
The same checks, fuzzed over every backend method of a loaded model: tests/test_fuzz_api.py."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tracecal.backends.arguments import (
    check_generate_args,
    check_hidden_layers,
    check_id_lists,
    check_ids,
    check_last_turn,
    check_more,
    check_prompts,
    check_stop_strings,
    check_token_ids,
)
from tracecal.errors import ValidationError


@pytest.mark.parametrize(
    ("call", "said"),
    [
        (lambda: check_ids(True, 1), "ids must be a list"),
        (lambda: check_ids(["a", "b"], 1), "ids must have one entry per prompt"),
        (lambda: check_ids([None], 1), r"ids\[0\] must be a str"),
        (lambda: check_stop_strings(5), "stop_strings must be a list"),
        (lambda: check_stop_strings(["", "x"]), r"stop_strings\[0\] must be a non-empty string"),
        (lambda: check_hidden_layers(True), "hidden_layers"),
        (lambda: check_hidden_layers("all"), "hidden_layers must be 'auto'"),
        (lambda: check_hidden_layers([0]), "hidden_layers must be a non-empty list"),
        (lambda: check_more({"progress": -1}), "progress must be a function"),
        (lambda: check_more({"on_token": "x"}), "on_token must be a function"),
        (lambda: check_token_ids([1.5], "answer_ids", 10), "answer_ids must hold whole numbers"),
        (lambda: check_token_ids([10], "answer_ids", 10), r"answer_ids: 10 is not a token id of this model \[0, 10\)"),
        (lambda: check_token_ids([], "prompt_ids", 10, min_len=1), "prompt_ids must hold at least 1"),
        (lambda: check_id_lists([[1], []], "prompt_ids", 10), r"prompt_ids\[1\] must hold at least 1"),
        (lambda: check_id_lists([], "prompt_ids", 10), "prompt_ids must be a non-empty list"),
        (lambda: check_prompts([]), "prompts is empty"),
        (lambda: check_generate_args(["Hi"], 0, None, 4), "max_new_tokens must be a positive integer"),
        (lambda: check_last_turn("assistant", "prompt 0"), "prompt 0: the last message is the assistant's"),
    ],
)
def test_each_check_names_what_it_refuses(call: Any, said: str) -> None:
    with pytest.raises(ValidationError, match=said):
        call()


def test_good_values_pass_through() -> None:
    assert check_token_ids(np.array([3.0, 4.0]), "token_ids", 10) == [3, 4]
    assert check_id_lists([[1, 2], (3,)], "prompt_ids", 10) == [[1, 2], [3]]
    assert check_stop_strings("\n") == ["\n"] and check_stop_strings(None) == []
    check_ids(["a", 7], 2)
    check_hidden_layers("auto")
    check_hidden_layers([1, 3])
    check_more({"progress": print, "stop_strings": ("Q:",), "hidden_layers": None})
    chat = [{"role": "user", "content": "Hi"}]
    assert check_prompts([chat, "text"]) == [chat, "text"]
    with pytest.raises(ValidationError, match="prompt 0: the last message is the assistant's"):
        check_prompts([[*chat, {"role": "assistant", "content": "Hello"}]])
