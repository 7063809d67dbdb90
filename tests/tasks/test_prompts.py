"""`tracecal.tasks.prompts`: chat and base-model prompts of every built-in task."""

from __future__ import annotations

import pytest

from tests.tasks.helpers import MANIFEST_COUNTS, needs_data, rows
from tracecal.tasks import (
    get_task,
)


@needs_data
@pytest.mark.parametrize("name", sorted(MANIFEST_COUNTS))
def test_prompts_chat_and_base(name: str) -> None:
    task, ex = get_task(name), rows(name)[0]
    chat = task.prompt(ex, chat=True)
    assert isinstance(chat, list) and chat[0]["role"] == "user" and ex.question in chat[0]["content"]
    base = task.prompt(ex, chat=False)
    assert isinstance(base, str) and ex.question in base
    assert base.rstrip().endswith(("Answer:", "Antwort:"))
    assert task.stop_strings(chat=True) == ()
    assert "\n" in "".join(task.stop_strings(chat=False))
    if task.kind == "mc":
        assert "A. " + ex.choices[0] in chat[0]["content"] and "letter" in chat[0]["content"]
    if task.kind == "math":
        assert "The answer is N." in chat[0]["content"]
    if name == "triviaqa":
        assert "short answer" in chat[0]["content"]
        assert base == f"Question: {ex.question}\nAnswer:"
    if name == "mlqa":
        assert ex.context in chat[0]["content"] and "Deutsch" in chat[0]["content"]
