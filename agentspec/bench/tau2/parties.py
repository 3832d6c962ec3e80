"""The users of a tau2 episode: the scripted one (``agentspec evaluate``) and the LLM user simulator,
and tau2's conversation rules they follow (the greeting, the stop tokens, solo mode's ``done`` tool).

The agent is the executor's authority policy (it sees the conversation as
:func:`agentspec.runtime.policies.llm.history_messages` builds it).  The user
simulator sees the conversation with the roles swapped, plus its own tool
calls and results.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from agentspec.bench.protocol import done_tool
from agentspec.models import ModelClient
from agentspec.runtime import conversation
from agentspec.runtime.conversation import RunCall, ScriptedUser, UserTurn
from agentspec.types import Message, Requestor, ToolCall, ToolSpec

GREETING = "Hi! How can I help you today?"
"""The agent's first words in normal mode."""
USER_STOP_TOKENS = ("###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###")
"""A user text with any of these ends the episode (``user_stop``)."""
USER_STOP = USER_STOP_TOKENS[0]
"""What the scripted user says to end the episode."""
AGENT_STOP_TOKEN = "###STOP###"
"""How an agent stop is written in a tau2 trajectory (solo mode's ``done`` call becomes it)."""
DONE_TOOL = done_tool("Call this when the ticket is resolved or handed over.")


class Party(Protocol):
    """A user simulator: reads the trajectory so far, writes one message."""

    async def act(self, trajectory: list[Message]) -> Message: ...


@dataclass
class ScriptUser:
    """The user's side of a scripted normal-mode episode (:func:`script_turns`): one run of calls per turn, as
    :class:`~agentspec.runtime.conversation.ScriptedUser`; with ``stops``, its last turn ends the episode."""

    turns: list[list[ToolCall]]
    stops: bool = False
    opening: str = GREETING

    async def reply(self, conversation: list[Message], run: RunCall) -> UserTurn:
        # Which turn this is comes from the conversation, as ScriptedUser counts it (a resumed run continues).
        replies = sum(1 for m in conversation if m.role == "user" and not m.is_tool_call)
        turn = await ScriptedUser(self.turns, self.opening).reply(conversation, run)
        if not self.stops or replies < len(self.turns) - 1:
            return turn
        messages = [*turn.messages[:-1], Message(role="user", content=USER_STOP)]
        return UserTurn(USER_STOP, messages, stop=True)


def script_turns(calls: Sequence[tuple[Requestor, ToolCall]], end: Requestor) -> tuple[list[ToolCall], ScriptUser]:
    """Scripted calls as the agent's decisions and the user who makes the rest (:func:`scripted_turns`); when the
    user ends the episode and the script ends on the agent's side, the agent hands over once more and the user's
    last, empty turn stops."""
    decisions, turns = conversation.scripted_turns(calls)
    # The agent's and the user's calls are named apart (agent_i, user_j): the evaluator's replay pairs each call
    # with its result by id, across both sides.
    decisions = [d if d.name == conversation.SAY else d.model_copy(update={"id": f"agent_{i}"})
                 for i, d in enumerate(decisions)]
    count = iter(range(len(calls)))
    turns = [[call.model_copy(update={"id": f"user_{next(count)}"}) for call in turn] for turn in turns]
    if end == "user" and calls and calls[-1][0] == "assistant":
        decisions.append(conversation.say(conversation.HANDOVER, f"say_{len(decisions)}"))
        turns.append([])
    return decisions, ScriptUser(turns, stops=end == "user")


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
class LLMUser:
    """tau2's user simulator: a model over the OpenAI-compatible client, seeing the conversation as
    :func:`user_view` shows it."""

    client: ModelClient
    system_prompt: str
    tools: list[ToolSpec]
    temperature: float | None = None

    async def act(self, trajectory: list[Message]) -> Message:
        result = await self.client.chat(user_view(self.system_prompt, trajectory), tools=self.tools or None,
                                        temperature=self.temperature)
        return result.message.model_copy(update={"role": "user", "invalid_tool_calls": result.invalid_tool_calls})
