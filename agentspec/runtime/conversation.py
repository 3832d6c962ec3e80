"""Normal mode in the executor: a message to the user is a call, and the user's turn is its observation.

The executor's committed history is a list of (call, observation) steps.  In a
conversation the agent also writes text to a user, who answers after making
calls of its own (on a phone, say).  Both fit the same history:

* the agent's message is the call :data:`SAY` (``{"content": text}``), whose
  effect is ``external``: the speculator may predict it but never runs it,
  and no draft is built on top of it (what the user will answer is unknown);
* running it live plays the user's turn (:class:`User`): the user's own calls
  run on the live state, then its reply comes back as the observation's
  ``content``, with the turn's messages (calls, results, reply) in
  ``Observation.turn`` so the trajectory and the run log keep them.

Every call the user makes changes live state before the agent's next decision,
so every draft forked before the turn is discarded (the lineage moved on).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from agentspec.types import (
    Effect,
    InvalidToolCall,
    Message,
    Observation,
    Step,
    TerminationReason,
    ToolCall,
    ToolSpec,
    Trajectory,
)

SAY = "send_message_to_user"
"""The name of the call that is a message from the agent to the user."""

SAY_TOOL = ToolSpec(
    name=SAY,
    description="Send a message to the user (the user answers with their own message).",
    parameters={"type": "object", "properties": {"content": {"type": "string"}}, "required": ["content"]},
    effect=Effect.EXTERNAL,
)

RunCall = Callable[[ToolCall], Awaitable[Observation]]
"""Runs one of the user's calls on the live state."""


def say(text: str, call_id: str | None = None) -> ToolCall:
    """The agent's message ``text`` to the user, as a call."""
    call = ToolCall(name=SAY, arguments={"content": text})
    return call.model_copy(update={"id": call_id}) if call_id else call


@dataclass
class UserTurn:
    """What the user did between two agent messages."""

    reply: str
    """The user's answer (the observation's content)."""
    messages: list[Message] = field(default_factory=list)
    """The whole turn as trajectory messages: the user's calls and their results, then the reply."""
    stop: bool = False
    """The user ended the conversation."""
    error: bool = False
    """The user simulator failed to answer (an empty message): the episode ends with a user error."""


class User(Protocol):
    """A user simulator (normal mode).  ``opening`` is the agent's first message, sent before it decides."""

    opening: str

    async def reply(self, conversation: list[Message], run: RunCall) -> UserTurn:
        """The user's turn after the last message of ``conversation`` (the agent's), running its calls with ``run``."""
        ...


def turn_observation(call: ToolCall, turn: UserTurn) -> Observation:
    """The observation of a :data:`SAY` call: the reply, with the turn's messages kept."""
    return Observation(call_id=call.id, name=SAY, content=turn.reply, requestor="user", turn=tuple(turn.messages))


def conversation(steps: Sequence[Step] | Sequence[tuple[ToolCall, Observation | None]]) -> list[Message]:
    """Committed steps as the trajectory's messages: agent text and the user's turns, agent calls and results."""
    messages: list[Message] = []
    for step in steps:
        call, observation = (step.call, step.observation) if isinstance(step, Step) else step
        if call.name == SAY:
            messages.append(Message(role="assistant", content=str(call.arguments.get("content", ""))))
            if observation is not None:
                messages.extend(observation.turn)
            continue
        messages.append(Message(role="assistant", tool_calls=[call]))
        if observation is not None:
            messages.append(Message.from_observation(observation))
    return messages


HANDOVER = "Please go ahead on your phone."
"""What a scripted agent says when the next gold calls are the user's."""
DONE_REPLY = "Done, what next?"
"""What a scripted user answers once it has made its calls."""


def scripted_turns(actions: Sequence[tuple[str, ToolCall]]) -> tuple[list[ToolCall], list[list[ToolCall]]]:
    """A gold script split into the agent's decisions and the user's turns, for oracle runs in normal mode.

    The agent makes its runs of calls and hands over (:data:`HANDOVER`) before each run of user calls; the
    user's first turn (after the opening) makes any calls the script starts with, each later turn the next
    run.  The agent ends the episode after its last decision."""
    runs: list[tuple[str, list[ToolCall]]] = []
    for requestor, call in actions:
        if runs and runs[-1][0] == requestor:
            runs[-1][1].append(call)
        else:
            runs.append((requestor, [call]))
    turns: list[list[ToolCall]] = [runs.pop(0)[1] if runs and runs[0][0] == "user" else []]
    decisions: list[ToolCall] = []
    for requestor, calls in runs:
        if requestor == "user":
            decisions.append(say(HANDOVER, f"say_{len(decisions)}"))
            turns.append(calls)
        else:  # ids by position in the decisions: unique, as replays pair each call with its result by id
            start = len(decisions)
            decisions.extend(c.model_copy(update={"id": f"gold_{start + i}"}) for i, c in enumerate(calls))
    return decisions, turns


@dataclass
class ScriptedUser:
    """Plays the user's side of a gold script (see :func:`scripted_turns`): one run of calls per turn."""

    turns: list[list[ToolCall]]
    opening: str

    async def reply(self, conversation: list[Message], run: RunCall) -> UserTurn:
        # The turn's number comes from the conversation, not a counter: a resumed run continues where it was.
        replies = sum(1 for m in conversation if m.role == "user" and not m.is_tool_call)
        calls = self.turns[replies] if replies < len(self.turns) else []
        messages: list[Message] = []
        for call in calls:
            messages.append(Message(role="user", tool_calls=[call]))
            messages.append(Message.from_observation(await run(call)))
        messages.append(Message(role="user", content=DONE_REPLY))
        return UserTurn(DONE_REPLY, messages)


def steps_trajectory(task_id: str, steps: Sequence[Step], termination: TerminationReason) -> Trajectory:
    """Committed steps as a trajectory: the :func:`conversation`, with unusable model output kept as such."""
    trajectory = Trajectory(task_id=task_id, termination=termination)
    for step in steps:
        if step.source == "invalid":
            bad = InvalidToolCall(id=step.call.id, name=step.call.name, raw_arguments="", error=step.observation.content)
            trajectory.messages += [Message(role="assistant", invalid_tool_calls=[bad]), Message.from_observation(step.observation)]
        else:
            trajectory.messages += conversation([step])
    trajectory.num_errors = sum(int(m.error) for m in trajectory.messages if m.role == "tool")
    trajectory.steps = len(trajectory.messages)
    return trajectory
