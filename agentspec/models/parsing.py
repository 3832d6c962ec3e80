"""Pure conversions between agentspec values and OpenAI chat JSON.

Nothing here does I/O: :class:`~agentspec.models.ModelClient` sends what
:func:`to_openai_messages` builds and turns what comes back into a
:class:`~agentspec.models.ChatResult` with :func:`parse_completion`.

Many local servers write tool calls as text instead of returning them
natively; :func:`extract_tool_calls` recovers them::

    >>> calls, rest = extract_tool_calls('Sure.<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>')
    >>> calls, rest
    ([{'name': 'f', 'arguments': {'x': 1}}], 'Sure.')
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import ValidationError

from agentspec.errors import ModelOutputError
from agentspec.models.result import (
    ChatResult,
    InvalidToolCall,
    TextDelta,
    TokenLogprob,
    ToolCallDelta,
    Usage,
)
from agentspec.types import Message, ToolCall, new_call_id

__all__ = [
    "StreamAssembler",
    "extract_tool_calls",
    "parse_completion",
    "parse_tool_call",
    "to_openai_messages",
]

_TAG = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_FENCE = re.compile(r"```[ \t]*(?:json)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)
_INNER_FENCE = re.compile(r"^```[ \t]*(?:json)?\s*|\s*```$", re.IGNORECASE)
_NAME = re.compile(r'"name"\s*:\s*"([^"]*)"')


# ---------------------------------------------------------------- requests


def to_openai_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """Our messages as the ``messages=[...]`` of an OpenAI chat request.

    Tool results become ``role: tool`` messages; assistant tool calls carry
    their arguments as JSON text.  A ``user`` message with tool calls has no
    OpenAI form (flip roles before sending a user simulator's view), so it
    raises :class:`ValueError`.
    """
    return [_to_openai_message(message) for message in messages]


def _to_openai_message(message: Message) -> dict[str, Any]:
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id or "", "content": message.content or ""}
    if not message.is_tool_call:
        return {"role": message.role, "content": message.content or ""}
    if message.role != "assistant":
        raise ValueError(f"a {message.role} message cannot carry tool calls in an OpenAI request")
    calls = [(call.id, call.name, json.dumps(call.arguments, ensure_ascii=False)) for call in message.tool_calls]
    # Invalid calls were answered with error observations; the model must see what it wrote.
    calls += [(bad.id, bad.name, bad.raw_arguments) for bad in message.invalid_tool_calls]
    return {
        "role": "assistant",
        "content": message.content,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
            for call_id, name, arguments in calls
        ],
    }


# ---------------------------------------------------------------- text tool calls


def extract_tool_calls(text: str) -> tuple[list[dict[str, Any]], str]:
    """Find tool calls written as text; return them and the text left over.

    Recognises ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
    blocks (a final unclosed block too), fenced ```json blocks holding one
    such object or a list of them, and a text that is nothing but such JSON
    (``"parameters"`` is accepted for ``"arguments"``).  Each call is
    ``{"name", "arguments"}`` (plus ``"id"`` when the object has one).  A ``<tool_call>`` block that is not a valid call
    is still returned, as ``{"name", "arguments": <raw text>, "error"}``, so
    it cannot vanish; a fenced block that is not a call stays in the text::

        >>> extract_tool_calls('```json\\n[{"name": "a", "arguments": {}}]\\n```')
        ([{'name': 'a', 'arguments': {}}], '')
        >>> extract_tool_calls("<tool_call>{oops</tool_call>")[0][0]["error"]
        'not a JSON tool call: Expecting property name enclosed in double quotes'
    """
    calls: list[dict[str, Any]] = []

    def take_tag(match: re.Match[str]) -> str:
        calls.extend(_tag_calls(match.group(1)))
        return ""

    def take_fence(match: re.Match[str]) -> str:
        found = _as_calls(_loads(match.group(1)))
        if found is None:
            return match.group(0)
        calls.extend(found)
        return ""

    rest = _TAG.sub(take_tag, text)
    rest = _FENCE.sub(take_fence, rest).strip()
    if not calls and rest.startswith(("{", "[")):
        bare = _as_calls(_loads(rest))
        if bare is not None:
            return bare, ""
    return calls, rest


def _tag_calls(body: str) -> list[dict[str, Any]]:
    raw = _INNER_FENCE.sub("", body.strip())
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        return [_bad_tag(raw, f"not a JSON tool call: {exc.msg}")]
    found = _as_calls(value)
    if found is None:
        return [_bad_tag(raw, 'expected {"name": ..., "arguments": {...}}')]
    return found


def _bad_tag(raw: str, error: str) -> dict[str, Any]:
    name = _NAME.search(raw)
    return {"name": name.group(1) if name else "", "arguments": raw, "error": error}


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


def _as_calls(value: Any) -> list[dict[str, Any]] | None:
    """``value`` as a list of calls, or None if it is not (a list of) call objects."""
    items = value if isinstance(value, list) else [value]
    if not items or not all(_is_call(item) for item in items):
        return None
    return [_call_dict(item) for item in items]


def _is_call(item: Any) -> bool:
    return (
        isinstance(item, dict)
        and isinstance(item.get("name"), str)
        and ("arguments" in item or "parameters" in item)
    )


def _call_dict(item: dict[str, Any]) -> dict[str, Any]:
    call = {"name": item["name"], "arguments": item["arguments"] if "arguments" in item else item["parameters"]}
    if isinstance(item.get("id"), str):
        call["id"] = item["id"]
    return call


# ---------------------------------------------------------------- responses


def parse_tool_call(call_id: str | None, name: str | None, arguments: Any) -> ToolCall | InvalidToolCall:
    """One call as a :class:`ToolCall`, or an :class:`InvalidToolCall` saying why not.

    ``arguments`` may be JSON text (as endpoints send it; empty text means
    ``{}``) or an already decoded value; it must be a JSON object of finite
    values.
    """
    call_id = call_id or new_call_id()
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    if not name:
        return InvalidToolCall(id=call_id, name="", raw_arguments=raw, error="the tool call has no function name")
    value = arguments
    if isinstance(arguments, str):
        try:
            value = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            error = f"arguments are not valid JSON: {exc}"
            return InvalidToolCall(id=call_id, name=name, raw_arguments=raw, error=error)
    if not isinstance(value, dict):
        error = f"arguments must be a JSON object, got {type(value).__name__}"
        return InvalidToolCall(id=call_id, name=name, raw_arguments=raw, error=error)
    try:
        return ToolCall(id=call_id, name=name, arguments=value)
    except ValidationError as exc:
        return InvalidToolCall(id=call_id, name=name, raw_arguments=raw, error=str(exc.errors()[0]["msg"]))


def parse_completion(data: dict[str, Any], *, text_tool_calls: bool, latency_s: float = 0.0) -> ChatResult:
    """A ``chat.completion`` body (as a dict) as a :class:`ChatResult`.

    With ``text_tool_calls`` (tools were offered and the client allows it),
    calls written as text are extracted when there are no native calls.
    Raises :class:`ModelOutputError` when the body has no choice.
    """
    choices = data.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        raise ModelOutputError(f"the endpoint answered without choices: {json.dumps(data)[:300]}")
    choice = choices[0]
    message = choice.get("message") or {}
    content = message.get("content")
    parsed = [_native_call(call) for call in message.get("tool_calls") or []]
    if text_tool_calls and not parsed and content:
        found, rest = extract_tool_calls(content)
        if found:
            parsed = [_text_call(call) for call in found]
            content = rest or None
    return ChatResult(
        message=Message(role="assistant", content=content, tool_calls=[c for c in parsed if isinstance(c, ToolCall)]),
        invalid_tool_calls=[c for c in parsed if isinstance(c, InvalidToolCall)],
        finish_reason=choice.get("finish_reason"),
        usage=_usage(data.get("usage")),
        logprobs=_logprobs(choice.get("logprobs")),
        reasoning=message.get("reasoning_content") or message.get("reasoning") or None,
        latency_s=latency_s,
        model=data.get("model") or "",
    )


def _native_call(call: dict[str, Any]) -> ToolCall | InvalidToolCall:
    function = call.get("function") or {}
    return parse_tool_call(call.get("id"), function.get("name"), function.get("arguments"))


def _text_call(call: dict[str, Any]) -> ToolCall | InvalidToolCall:
    if "error" in call:
        return InvalidToolCall(
            id=new_call_id(), name=call["name"], raw_arguments=call["arguments"], error=call["error"]
        )
    return parse_tool_call(call.get("id"), call["name"], call["arguments"])


def _usage(usage: Any) -> Usage | None:
    if not isinstance(usage, dict):
        return None
    details = usage.get("prompt_tokens_details") or {}
    given = usage.get("agentspec_decoding")
    decoding = given if isinstance(given, dict) else {}
    by_source = decoding.get("accepted_by_source")
    accepted = by_source if isinstance(by_source, dict) else None
    return Usage(
        prompt_tokens=usage.get("prompt_tokens") or 0,
        completion_tokens=usage.get("completion_tokens") or 0,
        cached_tokens=details.get("cached_tokens"),
        forwards=decoding.get("target_forwards"),
        hint_tokens=sum(n for s, n in accepted.items() if s.startswith("hint.speculator")) if accepted is not None else None,
    )


def _logprobs(logprobs: Any) -> list[TokenLogprob] | None:
    if not isinstance(logprobs, dict) or logprobs.get("content") is None:
        return None
    return [
        TokenLogprob.model_validate({**item, "top_logprobs": item.get("top_logprobs") or []})
        for item in logprobs["content"]
    ]


# ---------------------------------------------------------------- streaming


class StreamAssembler:
    """Collects ``chat.completion.chunk`` dicts into deltas and one final body.

    :meth:`feed` returns the events a chunk carries; :meth:`completion` builds
    the ``chat.completion`` dict those chunks add up to, for
    :func:`parse_completion`.
    """

    def __init__(self) -> None:
        self._content: list[str] = []
        self._reasoning: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._logprobs: list[dict[str, Any]] | None = None
        self._finish_reason: str | None = None
        self._usage: dict[str, Any] | None = None
        self._model = ""

    def feed(self, chunk: dict[str, Any]) -> list[TextDelta | ToolCallDelta]:
        """Absorb one chunk; return its text and tool-call deltas."""
        self._model = chunk.get("model") or self._model
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        events: list[TextDelta | ToolCallDelta] = []
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) == 0:
                events.extend(self._feed_choice(choice))
        return events

    def _feed_choice(self, choice: dict[str, Any]) -> list[TextDelta | ToolCallDelta]:
        self._finish_reason = choice.get("finish_reason") or self._finish_reason
        logprobs = choice.get("logprobs")
        if isinstance(logprobs, dict) and logprobs.get("content") is not None:
            self._logprobs = (self._logprobs or []) + list(logprobs["content"])
        delta = choice.get("delta") or {}
        self._reasoning.append(delta.get("reasoning_content") or delta.get("reasoning") or "")
        events: list[TextDelta | ToolCallDelta] = []
        if delta.get("content"):
            self._content.append(delta["content"])
            events.append(TextDelta(text=delta["content"]))
        for piece in delta.get("tool_calls") or []:
            events.append(self._feed_call(piece))
        return events

    def _feed_call(self, piece: dict[str, Any]) -> ToolCallDelta:
        index = piece.get("index", len(self._calls))
        function = piece.get("function") or {}
        call = self._calls.setdefault(index, {"id": None, "name": None, "arguments": []})
        call["id"] = call["id"] or piece.get("id")
        call["name"] = call["name"] or function.get("name")
        call["arguments"].append(function.get("arguments") or "")
        return ToolCallDelta(
            index=index, id=piece.get("id"), name=function.get("name"), arguments=function.get("arguments") or ""
        )

    def completion(self) -> dict[str, Any]:
        """The ``chat.completion`` dict equivalent to the chunks fed so far."""
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self._content) or None}
        if self._calls:
            message["tool_calls"] = [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": "".join(c["arguments"])},
                }
                for _, c in sorted(self._calls.items())
            ]
        if "".join(self._reasoning):
            message["reasoning_content"] = "".join(self._reasoning)
        choice = {"index": 0, "message": message, "finish_reason": self._finish_reason}
        if self._logprobs is not None:
            choice["logprobs"] = {"content": self._logprobs}
        return {"object": "chat.completion", "model": self._model, "choices": [choice], "usage": self._usage}
