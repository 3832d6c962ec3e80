"""The OpenAI chat-completions request, as validated pydantic values, and the JSON error answer.

Only what the server uses is modelled; unknown fields are ignored (clients
send many).  A body that does not validate becomes a 400 :class:`APIError`
naming the first bad field (tool definitions are :mod:`agentspec.engine.grammar`'s
:class:`ToolDef`, re-exported here)::

    >>> ChatRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "Hi"}]}).max_tokens is None
    True
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agentspec.engine.grammar import FunctionDef, ToolDef, render_call

__all__ = [
    "APIError", "ChainCall", "ChainRequest", "ChainStep", "ChatMessage", "ChatRequest", "FunctionDef", "HintDelivery",
    "MAX_CHAIN_STEPS", "MAX_HINTS", "MAX_HINTS_BYTES", "MAX_HINT_BYTES", "MAX_PROMPT_LOGPROBS", "MAX_TOKEN_COUNT",
    "SEED_RANGE", "ToolDef", "check_hint_sizes", "parse_chain_request", "parse_hint_delivery", "parse_request",
]


SEED_RANGE = (-(2**63), 2**64 - 1)
"""The seeds ``torch.Generator.manual_seed`` accepts; anything else would overflow inside the engine."""

MAX_TOKEN_COUNT = 2**31 - 1
"""An upper bound for token counts (no context is this long; the context check gives the precise message)."""

MAX_CHAIN_STEPS = 16
"""Steps one ``verify_chain`` request may carry (more: 400 ``chain_too_long``); a macro is a few calls long."""

MAX_PROMPT_LOGPROBS = 20
"""The most alternatives ``prompt_logprobs`` asks for per prompt token (vLLM's cap for ``top_logprobs`` too)."""

MAX_HINTS = 8
"""Hints one field of a request or delivery may hold (``agentspec_hints``, ``agentspec_predicted_calls``,
``predicted_calls``); more is a 400."""

MAX_HINT_BYTES = 32 * 1024
"""The largest hint (a text, or a predicted call as the tool grammar writes it), in UTF-8 bytes; more is a 413.
A hint is indexed when it arrives (about 0.1 s per 32 kB) and read by every draft tree of its request."""

MAX_HINTS_BYTES = 128 * 1024
"""All hints of one request body or one delivery together, in UTF-8 bytes; more is a 413.  A running request's
box takes at most :data:`agentspec.decoding.drafter.MAX_BOX_BYTES` over its life (deliveries past it: 413)."""


class APIError(Exception):
    """An OpenAI-style error answer: HTTP ``status`` and ``{"error": {message, type, param, code}}``."""

    def __init__(
        self, status: int, message: str, *, type: str = "invalid_request_error", code: str | None = None,
        param: str | None = None, headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body = {"error": {"message": message, "type": type, "param": param, "code": code}}
        self.headers = headers or {}
        """Response headers that go with the error (``Retry-After`` on a 429)."""


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class CallFunction(_Lenient):
    name: str
    arguments: str | dict[str, Any] = "{}"


class CallDef(_Lenient):
    id: str | None = None
    type: Literal["function"] = "function"
    function: CallFunction


class ChatMessage(_Lenient):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    tool_calls: list[CallDef] | None = None
    tool_call_id: str | None = None
    name: str | None = None

    @model_validator(mode="after")
    def _has_content(self) -> ChatMessage:
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ValueError(f"a {self.role} message needs content")
        return self

    def text(self) -> str:
        """The content as one string (text parts joined; other part types are not supported)."""
        if isinstance(self.content, str) or self.content is None:
            return self.content or ""
        texts = []
        for part in self.content:
            if part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ValueError(f"unsupported content part of type {part.get('type')!r}")
            texts.append(part["text"])
        return "".join(texts)


class NamedChoice(_Lenient):
    type: Literal["function"] = "function"
    function: dict[str, str]


class PredictedCall(BaseModel):
    """A call predicted for the answer (``agentspec_predicted_calls``), and who predicted it."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=256)
    arguments: dict[str, Any] = Field(default_factory=dict)
    source: Literal["speculator", "macro"] = "speculator"

    def as_hint(self) -> tuple[str, str]:
        """The call as the tool grammar writes it, and its draft source (``hint.speculator``)."""
        return render_call(self.name, self.arguments), f"hint.{self.source}"


class HintDelivery(BaseModel):
    """``POST /v1/agentspec/hints``: calls predicted for a request that is already running (by its
    ``agentspec_request_id``), such as a speculator's next call that was ready only after the request started."""

    model_config = ConfigDict(extra="forbid")

    request_id: str = Field(min_length=1, max_length=128)
    predicted_calls: list[PredictedCall] = Field(min_length=1, max_length=MAX_HINTS)

    def hints(self) -> list[tuple[str, str, str]]:
        """``(field, text, source)`` of each predicted call, rendered as the tool grammar writes it."""
        return [(f"predicted_calls.{i}", *call.as_hint()) for i, call in enumerate(self.predicted_calls)]


class ChainCall(BaseModel):
    """A chain step's call: the function and its arguments (rendered as the tool grammar writes calls)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=256)
    arguments: dict[str, Any] = Field(default_factory=dict)


class ChainStep(BaseModel):
    """One pre-executed step: the call, and the messages the conversation appends once it is committed (the
    assistant message carrying the call, then the tool results)."""

    model_config = ConfigDict(extra="forbid")

    call: ChainCall
    messages: list[ChatMessage] = Field(default_factory=list)


class ChainRequest(_Lenient):
    """``POST /v1/agentspec/verify_chain``: does the model, deciding greedily, make these calls in turn?

    ``messages`` and ``tools`` are exactly what a chat request for the first decision would carry; step k is
    decided after ``messages`` plus the messages of steps 0..k-1 (the wire format: issue 29).
    """

    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[ToolDef] = Field(min_length=1)
    chain: list[ChainStep] = Field(min_length=1, max_length=MAX_CHAIN_STEPS)


class ChatRequest(_Lenient):
    """The fields of ``POST /v1/chat/completions`` the server honours."""

    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[ToolDef] | None = None
    tool_choice: Literal["auto", "none", "required"] | NamedChoice | None = None
    parallel_tool_calls: bool | None = None
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKEN_COUNT)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKEN_COUNT)
    temperature: float = Field(default=1.0, ge=0, le=2, allow_inf_nan=False)
    top_p: float = Field(default=1.0, gt=0, le=1, allow_inf_nan=False)
    seed: int | None = Field(default=None, ge=SEED_RANGE[0], le=SEED_RANGE[1])
    """Any value the sampler's generator takes (a 64-bit integer, signed or not)."""
    stop: str | list[str] | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    prompt_logprobs: int | None = Field(default=None, ge=0, le=MAX_PROMPT_LOGPROBS)
    """vLLM's extension: per prompt token its log probability and rank, and the ``prompt_logprobs`` likeliest."""
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    n: int = Field(default=1, ge=1, le=1)
    ignore_eos: bool = False
    """vLLM's extension: keep generating past end-of-sequence (benchmarks)."""
    priority: int = Field(default=0, ge=-MAX_TOKEN_COUNT, le=MAX_TOKEN_COUNT)
    """vLLM's extension: lower is served first.  Here a request above 0 runs only while no request of a better
    priority is in progress on any of the server's models (:mod:`agentspec.engine.priority`)."""
    agentspec_hints: list[str] | None = Field(default=None, max_length=MAX_HINTS)
    """Predicted completion texts for the ToolSpec decoder to draft from (agentspec.decoding.hint_drafter)."""
    agentspec_predicted_calls: list[PredictedCall] | None = Field(default=None, max_length=MAX_HINTS)
    """Calls a speculator predicts this answer makes: drafted as the tool grammar writes them (``hint.speculator``,
    ``hint.macro``).  Like every hint they change how fast the answer comes, never what it is."""
    continue_final_message: bool = False
    """vLLM's extension: the last (assistant) message is unfinished; generation continues its text."""
    add_generation_prompt: bool = True
    """vLLM's extension: open a new assistant turn after the messages (off with ``continue_final_message``)."""
    agentspec_request_id: str | None = Field(default=None, min_length=1, max_length=128)
    """A client-chosen id under which other requests can send this one hints while it runs."""
    agentspec_hint_for: str | None = Field(default=None, min_length=1, max_length=128)
    """The ``agentspec_request_id`` of a running request that gets this request's text as a hint (SPORK probes)."""

    @field_validator("stop")
    @classmethod
    def _stops(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list) and (len(value) > 4 or not all(value)):
            raise ValueError("stop takes at most 4 non-empty strings")
        return value

    def hints(self) -> list[tuple[str, str, str]]:
        """``(field, text, source)`` of each hint: the client's texts, then the predicted calls as rendered."""
        texts = [(f"agentspec_hints.{i}", text, "hint.client") for i, text in enumerate(self.agentspec_hints or [])]
        calls = [(f"agentspec_predicted_calls.{i}", *call.as_hint())
                 for i, call in enumerate(self.agentspec_predicted_calls or [])]
        return texts + calls

    @property
    def stops(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])

    @property
    def token_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    @property
    def forced_function(self) -> str | None:
        """The function a named ``tool_choice`` requires, if any."""
        return self.tool_choice.function.get("name") if isinstance(self.tool_choice, NamedChoice) else None

    @property
    def requires_call(self) -> bool:
        return bool(self.tools) and (self.tool_choice == "required" or self.forced_function is not None)

    @property
    def tools_active(self) -> bool:
        return bool(self.tools) and self.tool_choice != "none"


def _json_object(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object of Unicode text; a 400 :class:`APIError` otherwise."""
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise APIError(400, f"the request body is not valid JSON: {exc}") from None
    except RecursionError:
        raise APIError(400, "the request body is nested too deeply") from None
    if not isinstance(data, dict):
        raise APIError(400, "the request body must be a JSON object")
    try:
        # A "\ud800" escape decodes to a lone surrogate, which no tokenizer (nor UTF-8) can take.
        json.dumps(data, ensure_ascii=False).encode()
    except UnicodeEncodeError as exc:
        bad = exc.object[exc.start : exc.end]
        raise APIError(400, f"the request body holds text that is not Unicode: {exc.reason} ({bad!a})") from None
    return data


def parse_request(raw: bytes) -> ChatRequest:
    """Validate a request body; raise a 400 :class:`APIError` naming what is wrong."""
    data = _json_object(raw)
    try:
        request = ChatRequest.model_validate(data)
    except ValidationError as exc:
        raise _invalid("request", exc) from None
    _check_tool_choice(request)
    _check_continuation(request)
    if request.prompt_logprobs is not None and request.stream:
        raise APIError(400, "prompt_logprobs is answered in a whole response: it needs stream false",
                       param="prompt_logprobs")
    check_hint_sizes(request.hints())
    return request


def parse_chain_request(raw: bytes) -> ChainRequest:
    """Validate a ``verify_chain`` body; a 400 :class:`APIError` naming the field (``chain_too_long`` past
    :data:`MAX_CHAIN_STEPS` steps, before the steps are even read)."""
    data = _json_object(raw)
    chain = data.get("chain")
    if isinstance(chain, list) and len(chain) > MAX_CHAIN_STEPS:
        raise APIError(400, f"the chain has {len(chain)} steps; at most {MAX_CHAIN_STEPS} are verified at once",
                       code="chain_too_long", param="chain")
    try:
        return ChainRequest.model_validate(data)
    except ValidationError as exc:
        raise _invalid("chain verification request", exc) from None


def parse_hint_delivery(raw: bytes) -> HintDelivery:
    """Validate a hint delivery body; raise a 400 :class:`APIError` naming what is wrong."""
    try:
        delivery = HintDelivery.model_validate_json(raw)
    except ValidationError as exc:
        raise _invalid("hint delivery", exc) from None
    check_hint_sizes(delivery.hints())
    return delivery


def check_hint_sizes(hints: list[tuple[str, str, str]]) -> None:
    """A 413 naming the field when a hint passes :data:`MAX_HINT_BYTES`, or all ``(field, text, source)`` together
    pass :data:`MAX_HINTS_BYTES`: drafting from a hint costs its request time, so hints are bounded like bodies."""
    total = 0
    for where, text, _ in hints:
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > MAX_HINT_BYTES:
            raise APIError(413, f"{where} is {size} bytes as a hint; a hint may have at most {MAX_HINT_BYTES}",
                           code="hints_too_large", param=where)
        total += size
    if total > MAX_HINTS_BYTES:
        fields = ", ".join(dict.fromkeys(where.rsplit(".", 1)[0] for where, _, _ in hints))
        raise APIError(413, f"the hints ({fields}) have {total} bytes together; at most {MAX_HINTS_BYTES} are taken",
                       code="hints_too_large", param=fields)


def _invalid(what: str, exc: ValidationError) -> APIError:
    """A 400 naming the first field of ``what`` that did not validate."""
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "body"
    return APIError(400, f"invalid {what}: {where}: {first['msg']}", param=where)


def _check_continuation(request: ChatRequest) -> None:
    if not request.continue_final_message:
        return
    last = request.messages[-1]
    if request.add_generation_prompt:
        raise APIError(400, "continue_final_message needs add_generation_prompt false", param="add_generation_prompt")
    if last.role != "assistant" or last.tool_calls:
        raise APIError(400, "continue_final_message needs a last assistant message with text and no tool_calls",
                       param="messages")


def _check_tool_choice(request: ChatRequest) -> None:
    if request.tool_choice in ("required",) and not request.tools:
        raise APIError(400, "tool_choice 'required' needs tools", param="tool_choice")
    name = request.forced_function
    if request.tool_choice is not None and isinstance(request.tool_choice, NamedChoice):
        known = [tool.function.name for tool in request.tools or []]
        if name not in known:
            message = f"tool_choice names function {name!r}, which is not among the tools"
            raise APIError(400, message, param="tool_choice")
