"""The parties of a tau2 episode: scripted ones (oracle, evaluate) and LLM ones (agent, user simulator).

Each party sees the trajectory from its own side.  The LLM agent sees its
own messages as ``assistant`` and the user's text as ``user``; the user's tool
calls and their results are hidden from it.  The user simulator sees the
conversation with the roles swapped, plus its own tool calls and results.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from agentspec.bench.tau2.orchestrator import AGENT_STOP_TOKEN, DONE_TOOL
from agentspec.models import ModelClient
from agentspec.runtime import conversation
from agentspec.types import Message, Requestor, ToolCall, ToolSpec

HANDOVER = {"assistant": conversation.HANDOVER, "user": conversation.DONE_REPLY}


@dataclass
class Script:
    """Tool calls to make in order, each by one party, and who ends the episode."""

    calls: deque[tuple[Requestor, ToolCall]]
    end: Requestor = "assistant"
    solo: bool = False

    @classmethod
    def of(cls, calls: Iterable[tuple[Requestor, ToolCall]], end: Requestor = "assistant", solo: bool = False) -> Script:
        return cls(deque(calls), end, solo)


@dataclass
class ScriptedParty:
    """Plays its side of a :class:`Script`: its own calls, hand-overs, and the final stop.

    Two scripted parties share one script; whoever holds the turn either makes
    the next call (if it is theirs), hands the turn over with a short text, or
    stops the episode when the script is done and the end is theirs.
    """

    role: Requestor
    script: Script
    stops: list[Message] = field(default_factory=list)

    async def act(self, trajectory: list[Message]) -> Message:
        script = self.script
        if script.calls and (script.solo or script.calls[0][0] == self.role):
            _, call = script.calls.popleft()
            return Message(role=self.role, tool_calls=[call])
        if not script.calls and script.end == self.role:
            return self._stop()
        return Message(role=self.role, content=HANDOVER[self.role])

    def _stop(self) -> Message:
        if self.script.solo:
            message = Message(role="assistant", tool_calls=[ToolCall(name=DONE_TOOL.name)])
        else:
            message = Message(role=self.role, content=AGENT_STOP_TOKEN)
        self.stops.append(message)
        return message

    def is_stop(self, message: Message) -> bool:
        return any(message is stop or message.content == stop.content for stop in self.stops)


def agent_view(system_prompt: str, trajectory: Sequence[Message]) -> list[Message]:
    """The conversation as the agent sees it."""
    view = [Message(role="system", content=system_prompt)]
    for message in trajectory:
        if message.role == "assistant" or (message.role == "tool" and message.requestor == "assistant"):
            view.append(message)
        elif message.role == "user" and not message.is_tool_call:
            view.append(message)
    return view


def user_view(system_prompt: str, trajectory: Sequence[Message]) -> list[Message]:
    """The conversation as the user simulator sees it: roles swapped, agent tool traffic hidden."""
    view = [Message(role="system", content=system_prompt)]
    for message in trajectory:
        if message.role == "assistant" and not message.is_tool_call and message.content:
            view.append(Message(role="user", content=message.content))
        elif message.role == "user":
            view.append(message.model_copy(update={"role": "assistant"}))
        elif message.role == "tool" and message.requestor == "user":
            view.append(message)
    return view


@dataclass
class LLMParty:
    """An agent or user simulator driven by a model over the OpenAI-compatible client."""

    role: Literal["assistant", "user"]
    client: ModelClient
    system_prompt: str
    tools: list[ToolSpec]
    tool_choice: str | None = None
    temperature: float | None = None

    async def act(self, trajectory: list[Message]) -> Message:
        view = agent_view if self.role == "assistant" else user_view
        result = await self.client.chat(
            view(self.system_prompt, trajectory),
            tools=self.tools or None,
            tool_choice=self.tool_choice if self.tools else None,
            temperature=self.temperature,
        )
        message = result.message
        return message.model_copy(update={"role": self.role, "invalid_tool_calls": result.invalid_tool_calls})

    def is_stop(self, message: Message) -> bool:
        # tau2's standard LLM agent never ends the conversation; the user does.
        return False
