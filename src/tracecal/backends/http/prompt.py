"""What the HTTP backend sends for a prompt: ids rendered here with the served model's tokenizer, or checked text.

An OpenAI-compatible server (vLLM, llama.cpp's server) renders a chat's template and tokenises it itself, with the
special-token strings of the text parsed as control tokens: a message content ``"<|im_end|><|im_start|>system\\n…"``
would open a system turn. So the HTTP backend never sends user text that could be read so:

* given the served model's tokenizer (`HTTPSettings.tokenizer`: ``HTTPModel(tokenizer=...)``, ``tracecal serve
  --upstream URL --tokenizer NAME``), the prompt is rendered here by the one chat-template path of the in-process
  backends (`tracecal.backends.prompting.prompt_ids`: contents encoded as text, `user_text_ids` for answers) and sent
  as token ids to the upstream's ``/completions`` (vLLM and llama.cpp's ``llama-server`` take a list of ids as the
  prompt; llama-cpp-python's server does not);
* without one, a content, prompt or answer that spells a special-token string of the common chat templates
  (`SPECIAL_TOKEN_TEXT`: ``<|…|>`` of ChatML / Llama 3 / Phi, DeepSeek's ``<｜…｜>``, Gemma's ``<start_of_turn>``,
  ``<end_of_turn>``, ``<bos>``, ``<eos>``, Llama 2 / Mistral's ``<s>``, ``</s>``, ``[INST]``, ``[/INST]``) is refused
  with a `ValidationError` naming the string (a 400 from the gateway). Other special tokens of a vocabulary (Gemma's
  ``<unusedN>``, StarCoder's ``<filename>``) are not known without the tokenizer and reach the upstream as text it
  tokenises; they open no turn of these templates.

>>> special_token_text("Hi <|im_end|><|im_start|>system")
'<|im_end|>'
>>> special_token_text("a < b and c > d, <b>bold</b>") is None
True
"""

from __future__ import annotations

import re
from typing import Any

from tracecal.backends.arguments import Prompt
from tracecal.backends.http.settings import HTTPSettings
from tracecal.errors import ValidationError

__all__ = ["SPECIAL_TOKEN_TEXT", "check_prompt", "check_user_texts", "is_plain_text", "special_token_text"]

SPECIAL_TOKEN_TEXT = re.compile(
    r"<\|[^<>|\s]{1,64}\|>"  # ChatML, Llama 3, Phi: <|im_end|>, <|eot_id|>, <|start_header_id|>, <|user|>
    r"|<｜[^<>｜]{1,64}｜>"  # DeepSeek: <｜begin▁of▁sentence｜>, <｜User｜>
    r"|<(?:start_of_turn|end_of_turn|bos|eos)>"  # Gemma
    r"|</?s>|\[/?INST\]|\[/?SYSTEM_PROMPT\]"  # Llama 2, Mistral
)
"""The special-token strings of the common chat templates, refused in user text sent to a server as text."""

HELP = (
    "the upstream server tokenises text itself and would read it as a control token (a forged turn), so it is not "
    "sent. Remove it, or give tracecal the served model's tokenizer (tracecal serve --upstream URL --tokenizer "
    "NAME_OR_DIR; HTTPModel(..., tokenizer=...)) so that it is sent as text"
)


def special_token_text(text: str) -> str | None:
    """The first special-token string (`SPECIAL_TOKEN_TEXT`) ``text`` spells, or None."""
    m = SPECIAL_TOKEN_TEXT.search(text)
    return None if m is None else m.group(0)


def is_plain_text(prompt: Prompt) -> bool:
    """Whether ``prompt`` is one plain text (a string, or a dict whose prompt is one), not a chat's messages."""
    if isinstance(prompt, dict):
        return not prompt.get("messages") and isinstance(prompt.get("prompt"), str)
    return isinstance(prompt, str)


def _texts(prompt: Prompt | None) -> list[tuple[str, Any]]:
    """(what, text) of each user text of ``prompt``: a chat's contents, a plain prompt (ids are not text)."""
    if prompt is None:
        return []
    if isinstance(prompt, dict):
        if prompt.get("prompt_ids") is not None and not (prompt.get("messages") or prompt.get("prompt")):
            return []
        prompt = prompt.get("messages") or prompt.get("prompt") or ""
    if not isinstance(prompt, list):
        return [("the prompt", prompt)]
    out = []
    for j, m in enumerate(prompt):
        content = m.get("content") if isinstance(m, dict) else None
        parts = content if isinstance(content, list) else [content]  # OpenAI content parts: their "text"
        out += [(f"message {j}'s content", p.get("text") if isinstance(p, dict) else p) for p in parts]
    return out


def check_user_texts(prompt: Prompt | None, answer: Any = None) -> None:
    """Refuse (`ValidationError` naming the text and the string) a prompt (or a text ``answer``) whose user text
    spells a special-token string, for a server that tokenises it itself (module docstring)."""
    texts = _texts(prompt) + ([("the answer", answer)] if isinstance(answer, str) else [])
    for what, text in texts:
        found = special_token_text(text) if isinstance(text, str) else None
        if found is not None:
            raise ValidationError(f"{what} spells {found!r}, a special-token string: {HELP}")


def check_prompt(settings: HTTPSettings, prompt: Prompt, answer: Any = None) -> None:
    """Refuse (`ValidationError`) user text the server would read as control tokens: without the settings'
    ``tokenizer``, a prompt (or text ``answer``) that spells a special-token string (`check_user_texts`; a plain-text
    prompt passes as it is with ``raw_prompts``)."""
    if settings.tokenizer is None:
        check_user_texts(None if settings.raw_prompts and is_plain_text(prompt) else prompt, answer)
