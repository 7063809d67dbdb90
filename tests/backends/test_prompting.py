"""The shared prompting of the in-process backends: prompt ids, chat formatting, the stop set."""

from __future__ import annotations

from typing import Any

import pytest

from tracecal.backends.defaults import tokenizer_stop_ids
from tracecal.backends.prompting import TokenizerBackend, prompt_ids


class _Fixed(TokenizerBackend):
    """A backend whose model declares EOS id 7."""

    def _model_eos_ids(self) -> list[int]:
        return [7]


def test_encoded_prompts_are_taken_as_given(tokenizer: Any) -> None:
    assert prompt_ids(tokenizer, {"prompt_ids": [3, 4, 5]}, chat=True) == [3, 4, 5]


def test_chat_string_equals_one_user_message(tokenizer: Any) -> None:
    as_text = prompt_ids(tokenizer, "What is 2+2?", chat=True)
    as_messages = prompt_ids(tokenizer, [{"role": "user", "content": "What is 2+2?"}], chat=False)
    assert as_text == as_messages
    assert prompt_ids(tokenizer, "What is 2+2?", chat=False) != as_text


def test_system_prompt_is_prepended_once(tokenizer: Any) -> None:
    plain = prompt_ids(tokenizer, "Hi", chat=True)
    with_system = prompt_ids(tokenizer, "Hi", chat=True, system_prompt="Be brief.")
    given = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert with_system != plain
    assert prompt_ids(tokenizer, given, chat=True, system_prompt="Other.") == with_system


def test_base_reads_settings_and_stop_set(tokenizer: Any) -> None:
    b = _Fixed(tokenizer, "m", None, None, 4)
    assert b.chat is bool(tokenizer.chat_template) and b.model_id == "m" and b.batch_size == 4
    assert b.stop_ids == tokenizer_stop_ids(tokenizer, [7]) and 7 in b.stop_ids
    assert b.encode_prompt("Hi") == prompt_ids(tokenizer, "Hi", b.chat)
    with pytest.raises(ValueError, match="batch_size"):
        _Fixed(tokenizer, "m", False, None, 0)


def test_the_model_eos_hook_is_required(tokenizer: Any) -> None:
    with pytest.raises(NotImplementedError):
        TokenizerBackend(tokenizer, "m", False, None, 1)
