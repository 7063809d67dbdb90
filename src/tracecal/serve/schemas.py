"""Request bodies: the OpenAI chat / completions requests (greedy only) plus tracecal's fields, /score, and
/v1/score-answers (`ScoreAnswersRequest`: answers you already have, each with its prompt).

Unknown fields are refused (400 naming the field) rather than silently ignored; so are OpenAI features this
server cannot honour (sampling, n > 1, penalties, logit bias, tools, echo, best_of). Extra request fields:

* ``return_trace`` (bool): add the per-token trace (tokens, s_t, H_t) to each choice's ``confidence``.
* ``stop_on_risk`` (number in [0, 1]): stop generating once the running c_TRACE of the tokens so far falls
  below it (``finish_reason: "risk"``); overrides the server default (``--stop-on-risk``).

Why greedy only: c_TRACE and TRACE+ are defined on, and calibrated for, the greedy answer's trace; a sampled
answer would get a confidence that was never validated for it, so ``temperature`` other than 0 (or absent)
is a 400 that says so, not a silent change of decoding.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from tracecal._validation import check_param
from tracecal.backends.arguments import check_last_turn
from tracecal.errors import ValidationError
from tracecal.serve.config import ServeConfig
from tracecal.traces.segments import MAX_TOKEN_NATS

__all__ = [
    "AnswerItem",
    "ChatCompletionRequest",
    "ChatMessage",
    "CompletionRequest",
    "Nats",
    "ScoreAnswersRequest",
    "ScoreRequest",
    "StreamOptions",
    "Text",
    "TextPart",
    "ends_with_a_question",
]


SERVE_CONSTRAINTS = ServeConfig.parameter_constraints


def _unicode(v: str) -> str:
    """``v`` if it is valid Unicode; a lone surrogate (JSON ``"\\ud800"`` without its pair) cannot be encoded as
    UTF-8, tokenised or echoed back, so it is refused here (a 400 naming the field) rather than failing later."""
    try:
        v.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValidationError(
            f"not valid Unicode: a lone surrogate (\\u{ord(v[e.start]):04x}) at character {e.start}; "
            "a \\ud800-\\udfff escape must be half of a surrogate pair"
        ) from None
    return v


#: A JSON string (not a number) of valid Unicode.
Text = Annotated[StrictStr, AfterValidator(_unicode)]
#: A per-token value in nats: a JSON number (not a string or a bool), finite, in [0, `MAX_TOKEN_NATS`] (larger
#: values come from no decoding step and would overflow the operators: 422 naming the field).
Nats = Annotated[float, Field(strict=True, ge=0, le=MAX_TOKEN_NATS, allow_inf_nan=False)]
Number = Annotated[float, Field(strict=True, allow_inf_nan=False)]
StopField = Text | Annotated[list[Text], Field(max_length=4)] | None


class ScoreRequest(BaseModel):
    """Traces you already have: per answer, per token s_t and H_t (an empty list is a zero-token answer)."""

    model_config = ConfigDict(extra="forbid")

    surprisal: list[list[Nats]] = Field(..., min_length=1, description="per answer, per token s_t = −log p_t (nats)")
    entropy: list[list[Nats]] = Field(..., min_length=1, description="per answer, per token H_t (nats)")

    @model_validator(mode="after")
    def _same_shape(self) -> ScoreRequest:
        if len(self.surprisal) != len(self.entropy):
            raise ValidationError(
                f"surprisal has {len(self.surprisal)} answers but entropy has {len(self.entropy)}: send one list "
                "per answer in each"
            )
        for i, (s, h) in enumerate(zip(self.surprisal, self.entropy, strict=True)):
            if len(s) != len(h):
                raise ValidationError(
                    f"answer {i}: {len(s)} surprisal values but {len(h)} entropy values (one per token)"
                )
        return self


class TextPart(BaseModel):
    """One part of a message's content list; only text is supported."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["text"] = Field(..., description="only 'text' parts (this model reads no images or audio)")
    text: Text


class ChatMessage(BaseModel):
    """``{"role": "system" | "developer" | "user" | "assistant", "content": str | [text parts]}``."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "developer", "user", "assistant"]
    content: Text | Annotated[list[TextPart], Field(min_length=1)]
    name: Text | None = None

    def as_dict(self) -> dict[str, str]:
        """The message as the chat template reads it (developer → system, text parts joined)."""
        text = self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)
        return {"role": "system" if self.role == "developer" else self.role, "content": text}


def ends_with_a_question(v: list[ChatMessage]) -> list[ChatMessage]:
    """``v`` unless its last message is the assistant's (the answer is the turn that follows the messages)."""
    check_last_turn(v[-1].role, "messages")
    return v


class StreamOptions(BaseModel):
    """``{"include_usage": true}``: a last chunk with the token counts."""

    model_config = ConfigDict(extra="forbid")

    include_usage: StrictBool | None = None


GREEDY_ONLY: dict[str, tuple[float, str]] = {
    "temperature": (
        0,
        "temperature={v:g} is not supported: this server decodes greedily (the answer whose TRACE confidence is "
        "calibrated); send temperature 0 or leave it out",
    ),
    "top_p": (1, "top_p={v:g} is not supported: greedy decoding only; send 1 or leave it out"),
    "n": (1, "n={v} is not supported: greedy decoding gives {v} identical answers; send n=1"),
    "presence_penalty": (0, "penalties are not supported (they change the decoded distribution): send 0"),
    "frequency_penalty": (0, "penalties are not supported (they change the decoded distribution): send 0"),
}
"""Per sampling field: the value that keeps decoding greedy, and the message (``{v}``: the value sent) when a
request sends another."""


class _Common(BaseModel):
    """Fields shared by both endpoints (OpenAI's, restricted to what greedy decoding can honour)."""

    model_config = ConfigDict(extra="forbid")

    model: Text = Field(..., min_length=1, description="the served model's name (GET /v1/models)")
    max_tokens: StrictInt | None = Field(None, ge=1, description="tokens to generate at most")
    temperature: Number | None = Field(None, ge=0, le=2, description="0 or absent: this server decodes greedily")
    top_p: Number | None = Field(None, gt=0, le=1, description="1 or absent (greedy)")
    n: StrictInt | None = Field(None, ge=1, le=128, description="1 or absent: greedy answers would be identical")
    stream: StrictBool | None = False
    stream_options: StreamOptions | None = None
    stop: StopField = Field(None, description="up to 4 strings; the answer ends before the token completing one")
    seed: StrictInt | None = Field(None, description="accepted and ignored (greedy decoding is deterministic)")
    user: Text | None = None
    presence_penalty: Number | None = Field(None, ge=-2, le=2, description="0 or absent")
    frequency_penalty: Number | None = Field(None, ge=-2, le=2, description="0 or absent")
    logit_bias: dict[str, Number] | None = Field(None, description="empty or absent")
    return_trace: StrictBool = Field(False, description="tracecal: add the per-token trace to each confidence")
    stop_on_risk: Number | None = Field(
        None, ge=0, le=1, description="tracecal: stop once the running c_TRACE falls below this (finish 'risk')"
    )

    @field_validator("stop_on_risk", mode="before")
    @classmethod
    def _as_declared(cls, v: object, info: ValidationInfo) -> object:
        """The setting's one declared constraint (`tracecal.serve.config.ServeConfig`, as ``--stop-on-risk``), checked
        before pydantic's own: the same value gets the same message on every surface."""
        name = info.field_name or ""
        return check_param(name, v, SERVE_CONSTRAINTS[name])

    @field_validator("temperature", "top_p", "n", "presence_penalty", "frequency_penalty")
    @classmethod
    def _greedy_only(cls, v: float | None, info: ValidationInfo) -> float | None:
        """The one value (or absence) of a sampling field under which decoding stays greedy (`GREEDY_ONLY`)."""
        neutral, why = GREEDY_ONLY[info.field_name or ""]
        if v not in (None, neutral):
            raise ValidationError(why.format(v=v))
        return v

    @field_validator("logit_bias")
    @classmethod
    def _no_bias(cls, v: dict[str, float] | None) -> dict[str, float] | None:
        if v:
            raise ValidationError("logit_bias is not supported (it changes the decoded distribution)")
        return v

    @property
    def stops(self) -> tuple[str, ...]:
        """``stop`` as a tuple of non-empty strings."""
        s = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return tuple(x for x in s if x)

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class ChatCompletionRequest(_Common):
    """``POST /v1/chat/completions``."""

    messages: list[ChatMessage] = Field(..., min_length=1, description="the conversation, at least one message")
    max_completion_tokens: StrictInt | None = Field(None, ge=1, description="OpenAI's newer name of max_tokens")
    logprobs: StrictBool | None = Field(None, description="return each token's log-prob (no alternatives)")
    top_logprobs: StrictInt | None = Field(None, ge=0, le=20, description="0 or absent")

    @field_validator("top_logprobs")
    @classmethod
    def _no_alternatives(cls, v: int | None) -> int | None:
        if v:
            raise ValidationError("top_logprobs is not supported: only the chosen token's log-prob (logprobs=true)")
        return v

    @field_validator("messages")
    @classmethod
    def _ends_with_a_question(cls, v: list[ChatMessage]) -> list[ChatMessage]:
        return ends_with_a_question(v)

    @property
    def token_budget(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    def prompt_messages(self) -> list[dict[str, str]]:
        return [m.as_dict() for m in self.messages]


class CompletionRequest(_Common):
    """``POST /v1/completions``: raw-text continuation (no chat template) of one prompt or a list of them."""

    prompt: Text | Annotated[list[Text], Field(min_length=1)] = Field(..., description="text or texts")
    logprobs: StrictInt | None = Field(None, ge=0, le=5, description="0 or absent")
    echo: StrictBool | None = Field(None, description="false or absent")
    suffix: Text | None = Field(None, description="absent (insertion is not supported)")
    best_of: StrictInt | None = Field(None, ge=1, le=20, description="1 or absent")

    @model_validator(mode="after")
    def _unsupported(self) -> CompletionRequest:
        for name, ok in (
            ("logprobs", not self.logprobs),
            ("echo", not self.echo),
            ("suffix", self.suffix is None),
            ("best_of", self.best_of in (None, 1)),
        ):
            if not ok:
                raise ValidationError(f"{name} is not supported by this server's /v1/completions")
        return self

    @property
    def token_budget(self) -> int | None:
        return self.max_tokens

    def prompts(self) -> list[str]:
        return [self.prompt] if isinstance(self.prompt, str) else list(self.prompt)


class AnswerItem(BaseModel):
    """One answer to score (``POST /v1/score-answers``): its prompt - ``prompt`` (text, one user turn in the chat
    template, as ``tracecal score-answers`` reads it) or ``messages`` (a chat) - and the ``answer`` text."""

    model_config = ConfigDict(extra="forbid")

    prompt: Text | None = Field(None, min_length=1, description="the question as text (or give messages)")
    messages: Annotated[list[ChatMessage], Field(min_length=1)] | None = Field(
        None, description="the conversation the answer follows (its last message not the assistant's)"
    )
    answer: Text = Field(..., description="the answer's text, exactly as given (may be empty)")
    id: Text | None = Field(None, max_length=256, description="your identifier, echoed back")

    @field_validator("messages")
    @classmethod
    def _ends_with_a_question(cls, v: list[ChatMessage] | None) -> list[ChatMessage] | None:
        return None if v is None else ends_with_a_question(v)

    @model_validator(mode="after")
    def _one_prompt(self) -> AnswerItem:
        if (self.prompt is None) == (self.messages is None):
            raise ValidationError("give exactly one of 'prompt' (text) and 'messages' (a chat)")
        return self

    def prompt_value(self) -> str | list[dict[str, str]]:
        """The prompt as the backends take it (text, or the messages as the chat template reads them)."""
        return [m.as_dict() for m in self.messages] if self.messages is not None else str(self.prompt)


class ScoreAnswersRequest(BaseModel):
    """``POST /v1/score-answers``: answers you already have, each with its prompt."""

    model_config = ConfigDict(extra="forbid")

    model: Text = Field(..., min_length=1, description="the served model's name (GET /v1/models)")
    items: list[AnswerItem] = Field(..., min_length=1, description="the answers, at most --max-prompts")
    return_trace: StrictBool = Field(False, description="add the per-token trace to each confidence")
