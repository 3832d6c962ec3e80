"""What a model endpoint answers, as agentspec values (pydantic).

:class:`ChatResult` is the answer of :meth:`ModelClient.chat`;
:meth:`ModelClient.stream_chat` yields :class:`TextDelta` and
:class:`ToolCallDelta` events as tokens arrive, then the same
:class:`ChatResult`.
"""

from __future__ import annotations

from typing import Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field

from agentspec.types import InvalidToolCall, Message

__all__ = [
    "ChatResult",
    "InvalidToolCall",
    "StreamEvent",
    "TextDelta",
    "TokenLogprob",
    "ToolCallDelta",
    "TopLogprob",
    "Usage",
]


class Usage(BaseModel):
    """Token counts reported by the endpoint (``cached_tokens`` only when reported)."""

    model_config = ConfigDict(frozen=True)

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int | None = None
    forwards: int | None = None
    """Target-model forwards the answer took (``agentspec serve --decoder toolspec`` reports them)."""
    hint_tokens: int | None = None
    """Tokens accepted from a speculator's predicted calls (draft source ``hint.speculator``), when reported."""


class TopLogprob(BaseModel):
    """One alternative token at a position, with its log probability."""

    model_config = ConfigDict(frozen=True)

    token: str
    logprob: float
    bytes: list[int] | None = None


class TokenLogprob(BaseModel):
    """The sampled token at one position, its log probability and the alternatives."""

    model_config = ConfigDict(frozen=True)

    token: str
    logprob: float
    bytes: list[int] | None = None
    top_logprobs: list[TopLogprob] = Field(default_factory=list)


class ChatResult(BaseModel):
    """One assistant turn: the message, unusable tool calls, and metadata.

    ``message.tool_calls`` holds only calls with valid JSON-object arguments;
    the others are in ``invalid_tool_calls``.  ``reasoning`` is the separate
    reasoning text some servers return (``reasoning_content``), if any.
    """

    message: Message
    invalid_tool_calls: list[InvalidToolCall] = Field(default_factory=list)
    finish_reason: str | None = None
    usage: Usage | None = None
    logprobs: list[TokenLogprob] | None = None
    reasoning: str | None = None
    latency_s: float = 0.0
    model: str = ""


class TextDelta(BaseModel):
    """New assistant text received while streaming."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["text"] = "text"
    text: str


class ToolCallDelta(BaseModel):
    """A piece of a native tool call received while streaming.

    ``index`` identifies the call within the turn; ``id`` and ``name`` come
    with its first piece, ``arguments`` is the next fragment of its JSON text.
    """

    model_config = ConfigDict(frozen=True)

    kind: Literal["tool_call"] = "tool_call"
    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


StreamEvent: TypeAlias = TextDelta | ToolCallDelta | ChatResult
