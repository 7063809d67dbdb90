"""What the in-process backends (HF, llama.cpp) share: a transformers tokenizer that builds every prompt.

Both feed their model the ids `prompt_ids` gives (the chat template with the generation prompt, or plain text)
and stop on the same set (`tracecal.backends.defaults.tokenizer_stop_ids`), so the same prompt gives the same
input ids and the same stopping rule on either backend.

>>> prompt_ids(None, {"prompt_ids": [5, 6]}, chat=True)  # already encoded: taken as it is
[5, 6]
"""

from __future__ import annotations

from typing import Any

from tracecal.backends.base import Prompt, check_positive_int
from tracecal.backends.defaults import tokenizer_stop_ids

__all__ = ["TokenizerBackend", "prompt_ids"]


def prompt_ids(tokenizer: Any, prompt: Prompt, chat: bool, system_prompt: str | None = None) -> list[int]:
    """The token ids fed to the model for ``prompt``, the one chat-template path of every local backend
    (`HFModel.encode_prompt` and the llama.cpp backend call it, so both feed the model the same ids).
    A dict with ``prompt_ids`` is taken as already encoded; message lists (and plain strings when ``chat``)
    go through the tokenizer's chat template with the generation prompt; plain text otherwise."""
    if isinstance(prompt, dict) and prompt.get("prompt_ids") is not None:
        return [int(i) for i in prompt["prompt_ids"]]
    if isinstance(prompt, dict):
        prompt = prompt.get("messages") or prompt.get("prompt") or ""
    if isinstance(prompt, list):
        messages = list(prompt)
    elif chat:
        messages = [{"role": "user", "content": prompt}]
    else:
        return list(tokenizer(prompt, add_special_tokens=True)["input_ids"])
    if system_prompt and messages[0].get("role") != "system":
        messages = [{"role": "system", "content": system_prompt}, *messages]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if hasattr(ids, "keys"):
        ids = ids["input_ids"]
    return [int(i) for i in ids]


class TokenizerBackend:
    """The prompting half of a local backend: its tokenizer, chat formatting, default batch size and stop ids.

    Subclasses set their model first, then call ``__init__`` (which reads the model's EOS ids through
    ``_model_eos_ids``) and add what their engine needs.
    """

    def __init__(self, tokenizer: Any, model_id: str, chat: bool | None, system_prompt: str | None, batch_size: int):
        self.tokenizer = tokenizer
        self.model_id = model_id
        self.chat = bool(getattr(tokenizer, "chat_template", None)) if chat is None else chat
        self.system_prompt = system_prompt
        self.batch_size = check_positive_int(batch_size, "batch_size")
        self.stop_ids = self._stop_token_ids()

    def _model_eos_ids(self) -> list[int]:
        """The model's own EOS ids (its generation config, the GGUF's metadata)."""
        raise NotImplementedError

    def _stop_token_ids(self) -> list[int]:
        """The stop set: the model's EOS ids, the tokenizer's EOS and the end-of-turn tokens of its vocabulary."""
        return tokenizer_stop_ids(self.tokenizer, self._model_eos_ids())

    def encode_prompt(self, prompt: Prompt) -> list[int]:
        """The exact ids fed to the model (:func:`prompt_ids`): chat template for chat models, plain text otherwise;
        a dict with ``prompt_ids`` is taken as already encoded (e.g. to re-run a stored trace's prompt)."""
        return prompt_ids(self.tokenizer, prompt, self.chat, self.system_prompt)
