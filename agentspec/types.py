"""Core value types shared by every part of agentspec (pydantic v2).

The most important rule here is :class:`ToolCall` equality: two calls are the
same action iff their names and *canonical* arguments are equal.  Canonical
means sorted keys and JSON numbers compared by value **and** type, exactly as
the model emitted them, so ``2`` and ``2.0`` are different calls (SMC found
that this matters when a speculated call is confirmed by the authority)::

    >>> ToolCall(name="f", arguments={"b": 1, "a": 2}) == ToolCall(name="f", arguments={"a": 2, "b": 1})
    True
    >>> ToolCall(name="f", arguments={"x": 2}) == ToolCall(name="f", arguments={"x": 2.0})
    False
"""

from __future__ import annotations

import json
import math
import uuid
from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Requestor = Literal["assistant", "user"]


class Effect(str, Enum):
    """What executing a tool does to the world; decides where speculation may run it."""

    READ_ONLY = "read_only"
    """Reads state only; may be answered from any matching speculative execution."""
    IDEMPOTENT = "idempotent"
    """Changes state, but repeating it changes nothing more."""
    MUTATING = "mutating"
    """Changes state; runs only in a fork until committed.  The default (fail closed)."""
    EXTERNAL = "external"
    """Has effects outside the environment (money, messages, humans); never speculated."""

    @classmethod
    def parse(cls, value: str | Effect | None) -> Effect:
        """Map any spelling to an effect; unknown or missing means MUTATING."""
        if isinstance(value, Effect):
            return value
        try:
            return cls(str(value).lower())
        except ValueError:
            return cls.MUTATING


class ToolSpec(BaseModel):
    """A tool as a model sees it (name, description, JSON schema) plus its effect class."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    effect: Effect = Effect.MUTATING

    @model_validator(mode="before")
    @classmethod
    def _fail_closed(cls, data: Any) -> Any:
        if isinstance(data, dict) and "effect" in data:
            data = {**data, "effect": Effect.parse(data["effect"])}
        return data

    @classmethod
    def from_mcp(cls, tool: dict[str, Any], *, forkable: bool = False) -> ToolSpec:
        """Build a spec from an MCP tool description (``tools/list`` JSON, camelCase), reading its annotations.

        Fails closed, as the MCP specification's defaults say (``readOnlyHint=false``, ``destructiveHint=true``,
        ``openWorldHint=true``): only a tool that declares ``readOnlyHint: true`` is READ_ONLY (and may run
        speculatively).  Any other tool changes state agentspec cannot fork, so it is EXTERNAL (never speculated),
        unless ``forkable``: the server runs inside an agentspec sandbox whose files are its whole state, so its
        state-changing tools run in forks until committed (IDEMPOTENT with ``idempotentHint: true``, else
        MUTATING).  A hint counts only as the JSON boolean ``true``.
        """
        hints = tool.get("annotations") or {}
        if not isinstance(hints, dict):
            hints = {}
        if hints.get("readOnlyHint") is True:
            effect = Effect.READ_ONLY
        elif not forkable:
            effect = Effect.EXTERNAL
        elif hints.get("idempotentHint") is True:
            effect = Effect.IDEMPOTENT
        else:
            effect = Effect.MUTATING
        schema = tool.get("inputSchema") or {"type": "object", "properties": {}}
        return cls(name=tool["name"], description=tool.get("description") or "", parameters=schema, effect=effect)

    def openai_schema(self) -> dict[str, Any]:
        """The ``tools=[...]`` entry of an OpenAI chat request."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


def _check_json_value(value: Any) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("tool call arguments must be finite JSON numbers")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError("tool call argument keys must be strings")
            _check_json_value(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _check_json_value(item)


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no whitespace; ``2`` and ``2.0`` stay distinct."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:12]


class ToolCall(BaseModel):
    """One call of a tool.  Equality and hashing ignore ``id`` (see module docstring)."""

    model_config = ConfigDict(frozen=True)

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    id: str = Field(default_factory=new_call_id)

    @model_validator(mode="after")
    def _json_only(self) -> ToolCall:
        _check_json_value(self.arguments)
        return self

    def canonical(self) -> str:
        """The canonical text of this call: the basis of equality."""
        return canonical_json({"name": self.name, "arguments": self.arguments})

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ToolCall):
            return NotImplemented
        return self.canonical() == other.canonical()

    def __hash__(self) -> int:
        return hash(self.canonical())


class Observation(BaseModel):
    """The result of executing one tool call."""

    model_config = ConfigDict(frozen=True)

    call_id: str
    name: str
    content: str
    error: bool = False
    requestor: Requestor = "assistant"
    isolation: str | None = None
    """None: the tool ran with everything its backend promises.  Otherwise the opt-ins that weakened it,
    comma-separated: ``unconfined`` (``confinement="none"``), ``no-disk-limit``, ``no-pids-limit``."""
    turn: tuple[Message, ...] = ()
    """Normal mode: what the user did before answering a message from the agent (its calls, their results,
    its reply), kept for the trajectory; empty for every tool call."""


class InvalidToolCall(BaseModel):
    """A tool call the model wrote that cannot be executed (arguments not a JSON object).

    Kept, never dropped: the executor answers it with an error observation.
    """

    model_config = ConfigDict(frozen=True)

    id: str = Field(default_factory=new_call_id)
    name: str
    raw_arguments: str
    error: str


class Message(BaseModel):
    """One message of a conversation.

    ``role`` is who wrote it.  Tool results are messages with role ``tool``,
    carrying the ``tool_call_id`` they answer and who asked (``requestor``).
    """

    role: Literal["system", "assistant", "user", "tool"]
    content: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    invalid_tool_calls: list[InvalidToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None
    requestor: Requestor | None = None
    error: bool = False

    @property
    def is_tool_call(self) -> bool:
        return bool(self.tool_calls or self.invalid_tool_calls)

    @classmethod
    def from_observation(cls, obs: Observation) -> Message:
        return cls(role="tool", content=obs.content, tool_call_id=obs.call_id, requestor=obs.requestor, error=obs.error)


class Step(BaseModel):
    """One committed step of an agent's trajectory: the call, its observation, and how it was committed.

    ``source`` says who decided it: ``authority`` (executed live), ``sa`` (a confirmed speculative
    draft), ``macro`` (committed by a macro without asking the authority), ``spork`` (an early-dispatched
    probe), ``reuse`` (a read-only call answered from a draft) or ``invalid`` (unusable model output).
    ``effect_id`` identifies the effect in the run log (exactly-once across resumes).
    """

    index: int
    call: ToolCall
    observation: Observation
    source: Literal["authority", "sa", "macro", "reuse", "invalid", "spork"] = "authority"
    effect_id: str = ""
    macro_id: str | None = None


class TerminationReason(str, Enum):
    AGENT_STOP = "agent_stop"
    USER_STOP = "user_stop"
    MAX_STEPS = "max_steps"
    TOO_MANY_ERRORS = "too_many_errors"
    AGENT_ERROR = "agent_error"
    USER_ERROR = "user_error"


class Trajectory(BaseModel):
    """A whole episode: the messages in order and how it ended."""

    task_id: str
    messages: list[Message] = Field(default_factory=list)
    steps: int = 0
    num_errors: int = 0
    termination: TerminationReason | None = None
    error_detail: str | None = None

    def tool_calls(self) -> list[tuple[Requestor, ToolCall]]:
        """Every tool call made, in order, with who made it."""
        calls: list[tuple[Requestor, ToolCall]] = []
        for message in self.messages:
            if message.role in ("assistant", "user"):
                calls.extend((message.role, call) for call in message.tool_calls)
        return calls


Observation.model_rebuild()
