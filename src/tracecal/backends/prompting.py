"""What the in-process backends (HF, llama.cpp) share: a transformers tokenizer that builds every prompt.

Both feed their model the ids `prompt_ids` gives (the chat template with the generation prompt, or plain text)
and stop on the same set (`tracecal.backends.defaults.tokenizer_stop_ids`), so the same prompt gives the same
input ids and the same stopping rule on either backend.

User text is text: only the chat template's own markup may become a control token (`control_token_ids`: the
tokenizer's special tokens, and the added tokens the template writes). A message content or a plain prompt that
spells one (``"<|im_end|><|im_start|>system\\n…"``) gets the ids of those characters as text, so no client and no
prompt file can forge a turn; content without such a string gets exactly the ids ``apply_chat_template`` gives.
Strings that are not valid Unicode (a lone surrogate such as ``"\\ud800"``) are refused with a ValueError.

>>> prompt_ids(None, {"prompt_ids": [5, 6]}, chat=True)  # already encoded: taken as it is
[5, 6]
"""

from __future__ import annotations

import re
import uuid
import weakref
from collections.abc import Iterable, Sequence
from typing import Any

from tracecal._validation import check_text
from tracecal.backends.arguments import Prompt, check_positive_int, check_prompt
from tracecal.backends.defaults import tokenizer_stop_ids
from tracecal.errors import ValidationError

__all__ = ["TokenizerBackend", "control_token_ids", "given_ids", "prompt_ids", "text_ids", "user_text_ids"]

_ROLE = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,31}")
_CONTROL: weakref.WeakKeyDictionary[Any, tuple[int, frozenset[int]]] = weakref.WeakKeyDictionary()


def control_token_ids(tokenizer: Any) -> frozenset[int]:
    """The ids that only markup may produce: every special token of ``tokenizer`` (its special added tokens and
    ``all_special_ids``) and every non-whitespace added token its chat template writes (e.g. Qwen's
    ``<tool_call>``). Cached per tokenizer (recomputed when its vocabulary grows)."""
    size = len(tokenizer)
    hit = _CONTROL.get(tokenizer)
    if hit is not None and hit[0] == size:
        return hit[1]
    template = str(getattr(tokenizer, "chat_template", None) or "")
    ids = {int(i) for i in getattr(tokenizer, "all_special_ids", ())}
    for i, tok in getattr(tokenizer, "added_tokens_decoder", {}).items():
        content = str(tok.content)
        if getattr(tok, "special", False) or (content in template and not content.isspace()):
            ids.add(int(i))
    out = frozenset(ids)
    _CONTROL[tokenizer] = (size, out)
    return out


def _as_plain_text(tokenizer: Any, text: str) -> list[int]:
    """The ids of ``text`` with no added token matched (special or not): the tokenizer's normalizer,
    pre-tokenizer and model only (transformers' own ``_encode_without_added_tokens``); a slow tokenizer's
    ``split_special_tokens`` otherwise. Stateless: never flips the shared tokenizer's settings."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return [int(i) for i in tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True)]
    if backend.normalizer is not None:
        text = backend.normalizer.normalize_str(text)
    pieces = [p for p, _ in backend.pre_tokenizer.pre_tokenize_str(text)] if backend.pre_tokenizer else [text]
    return [int(t.id) for p in pieces for t in backend.model.tokenize(p)]


def text_ids(tokenizer: Any, text: str, user: Sequence[tuple[int, int]], add_special_tokens: bool = False) -> list[int]:
    """The token ids of ``text``, where the character spans ``user`` (start, end) are user text: a control token
    (`control_token_ids`) that overlaps one is replaced by the ids of its characters as plain text. Every other
    token is the tokenizer's own, so a text whose user spans spell no control token gets exactly
    ``tokenizer(text)``'s ids."""
    control = control_token_ids(tokenizer)
    try:
        enc = tokenizer(text, add_special_tokens=add_special_tokens, return_offsets_mapping=True)
    except NotImplementedError:  # a slow tokenizer has no offsets: only text that spells no control token
        ids = [int(i) for i in tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"]]
        blank = "".join("x" if any(s <= k < e for s, e in user) else c for k, c in enumerate(text))
        if [i for i in ids if i in control] != _control_sequence(tokenizer, blank, add_special_tokens):
            raise ValidationError(
                "the text spells a control token, which this (slow) tokenizer cannot keep as text"
            ) from None
        return ids
    out: list[int] = []
    for i, (a, b) in zip(enc["input_ids"], enc["offset_mapping"], strict=True):
        if int(i) in control and any(a < end and start < b for start, end in user):
            out.extend(_as_plain_text(tokenizer, text[a:b]))
        else:
            out.append(int(i))
    return out


def user_text_ids(tokenizer: Any, text: str, what: str = "the text") -> list[int]:
    """The ids of ``text`` given by a user (an answer to score, a plain prompt part), without BOS / EOS: valid
    Unicode (`check_text`, else `ValidationError` naming ``what``) and wholly user text (`text_ids`), so a
    special-token string it spells (``"<|im_end|>"``) is encoded as its characters, never as a control token."""
    text = check_text(text, what)
    return text_ids(tokenizer, text, [(0, len(text))])


def _render(tokenizer: Any, messages: list[dict[str, str]]) -> str:
    return str(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False))


def _control_sequence(tokenizer: Any, text: str, add_special_tokens: bool = False) -> list[int]:
    control = control_token_ids(tokenizer)
    return [int(i) for i in tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"] if int(i) in control]


def _chat_ids(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    """The chat template's ids of ``messages`` with each content encoded as user text (`text_ids`).

    The template is rendered twice: with the contents, and with a unique mark in place of each content, which
    locates every content's characters in the rendered text. A template that changes a content (e.g. trims it) is
    rendered as it is when no content adds a control token, and with the contents verbatim otherwise."""
    real = _render(tokenizer, messages)
    nonce = uuid.uuid4().hex
    marks = [f"TRACECAL{nonce}M{k}E" for k in range(len(messages))]
    skeleton = _render(tokenizer, [{**m, "content": mark} for m, mark in zip(messages, marks, strict=True)])
    pieces: list[str] = [skeleton]
    spans: list[tuple[int, int]] = []
    for mark, m in zip(marks, messages, strict=True):
        pieces = [q for p in pieces for q in _split_keep(p, mark, m["content"])]
    text, pos = "", 0
    for p in pieces:
        if isinstance(p, _Content):
            spans.append((pos, pos + len(p)))
        text += p
        pos += len(p)
    if text != real and _control_sequence(tokenizer, real) == _control_sequence(tokenizer, skeleton):
        return [int(i) for i in tokenizer(real, add_special_tokens=False)["input_ids"]]
    return text_ids(tokenizer, text, spans)


class _Content(str):
    """A piece of the rendered chat that is a message's content (user text)."""


def _split_keep(piece: str, mark: str, content: str) -> list[str]:
    if isinstance(piece, _Content) or mark not in piece:
        return [piece]
    parts = piece.split(mark)
    out: list[str] = [parts[0]]
    for p in parts[1:]:
        out += [_Content(content), p]
    return out


def _messages(prompt: list[Any], system_prompt: str | None) -> list[dict[str, str]]:
    """``role`` and ``content`` of each message (other keys are not rendered), roles checked (a word: a role is
    markup the template writes as it is), contents checked as text."""
    messages = []
    for j, m in enumerate(prompt):
        role = m.get("role") if isinstance(m, dict) else None
        if not isinstance(role, str) or not _ROLE.fullmatch(role):
            raise ValidationError(
                f"message {j}: role must be a word such as 'user' (letters, digits, _ or -), got {role!r:.40}"
            )
        messages.append({"role": role, "content": check_text(m.get("content"), f"message {j}'s content")})
    if system_prompt and (not messages or messages[0]["role"] != "system"):
        messages = [{"role": "system", "content": check_text(system_prompt, "system_prompt")}, *messages]
    return messages


def given_ids(tokenizer: Any, ids: Iterable[Any], what: str = "prompt_ids") -> list[int]:
    """Token ids given by a user (a prompt's ``prompt_ids``, an answer), each a token of ``tokenizer`` (in [0,
    len(tokenizer))), else a `ValidationError` naming ``what`` and the first that is not (the model's embedding would
    fail on it with an IndexError)."""
    out = [int(i) for i in ids]
    size = None if tokenizer is None else len(tokenizer)
    bad = [i for i in out if i < 0 or (size is not None and i >= size)]
    if bad:
        where = "" if size is None else f" [0, {size})"
        raise ValidationError(f"{what}: {bad[0]} is not a token id of this tokenizer{where}")
    return out


def prompt_ids(tokenizer: Any, prompt: Prompt, chat: bool, system_prompt: str | None = None) -> list[int]:
    """The token ids fed to the model for ``prompt``, the one chat-template path of every local backend
    (`HFModel.encode_prompt` and the llama.cpp backend call it, so both feed the model the same ids).
    A dict with ``prompt_ids`` is taken as already encoded; message lists (and plain strings when ``chat``)
    go through the tokenizer's chat template with the generation prompt; plain text otherwise (with the
    tokenizer's BOS). Contents and plain text are user text: a control token they spell is encoded as its
    characters (module docstring); a lone surrogate or an odd role is a `ValidationError`."""
    if isinstance(prompt, dict) and prompt.get("prompt_ids") is not None:
        return given_ids(tokenizer, prompt["prompt_ids"])
    if isinstance(prompt, dict):
        prompt = prompt.get("messages") or prompt.get("prompt") or ""
    if isinstance(prompt, list):
        messages = _messages(prompt, system_prompt)
    elif chat:
        messages = _messages([{"role": "user", "content": prompt}], system_prompt)
    else:
        text = check_text(prompt, "the prompt")
        return text_ids(tokenizer, text, [(0, len(text))], add_special_tokens=True)
    return _chat_ids(tokenizer, messages)


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
        a dict with ``prompt_ids`` is taken as already encoded (e.g. to re-run a stored trace's prompt); a prompt of
        another form is refused (`check_prompt`, naming ``prompt``)."""
        check_prompt(prompt, "prompt")
        return prompt_ids(self.tokenizer, prompt, self.chat, self.system_prompt)
