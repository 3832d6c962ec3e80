"""The tau2 orchestrator: who speaks next, where tool calls go, and when an episode ends.

Routing (normal mode): an agent text goes to the user, a user text to the
agent, and any message with tool calls (text included) to the environment,
whose results go back to the caller.  One step is one agent message, one user
message, or one environment response; a sync runs after every step.  The
episode ends on a stop, after ``max_steps`` steps, or once ``max_errors`` tool
errors have accumulated, checked after each step whose next recipient is not
the environment (later reasons override earlier ones, as in tau2).

Solo mode: no user and no greeting; the agent must call a tool every turn,
routes calls to either side by name, and ends by calling ``done``, which is
rewritten to the text ``###STOP###`` (any other calls in that message are
dropped unexecuted).
"""

from __future__ import annotations

import time
from typing import Literal, Protocol

from agentspec.bench.protocol import done_tool
from agentspec.types import Message, Observation, Requestor, TerminationReason, ToolCall, ToolSpec, Trajectory

GREETING = "Hi! How can I help you today?"
USER_STOP_TOKENS = ("###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###")
AGENT_STOP_TOKEN = "###STOP###"
DONE_TOOL = done_tool("Call this when the ticket is resolved or handed over.")


class Tau2Environment(Protocol):
    solo: bool

    def tool_specs(self, requestor: Requestor = "assistant") -> list[ToolSpec]: ...

    def execute(self, call: ToolCall, requestor: Requestor = "assistant") -> Observation: ...

    def sync(self) -> None: ...


class Party(Protocol):
    """An agent or a user simulator: reads the trajectory so far, writes one message."""

    async def act(self, trajectory: list[Message]) -> Message: ...

    def is_stop(self, message: Message) -> bool:
        """Whether this message ends the episode (only scripted agents may stop in normal mode)."""
        ...


Next = Literal["assistant", "user", "env"]


class Orchestrator:
    """Runs one episode of a party (agent) against a user (or none, in solo mode) and an environment."""

    def __init__(
        self,
        task_id: str,
        env: Tau2Environment,
        agent: Party,
        user: Party | None,
        *,
        max_steps: int = 200,
        max_errors: int = 10,
    ) -> None:
        if not env.solo and user is None:
            raise ValueError("normal mode needs a user simulator; use solo mode to run without one")
        self.env, self.agent, self.user = env, agent, user
        self.max_steps, self.max_errors = max_steps, max_errors
        self.trajectory = Trajectory(task_id=task_id)
        self.timings = {"agent_s": 0.0, "user_s": 0.0, "env_s": 0.0}

    async def run(self) -> Trajectory:
        """Play the episode to its end and return the trajectory."""
        if self.env.solo:
            nxt: Next = "assistant"
        else:
            self.trajectory.messages.append(Message(role="assistant", content=GREETING))
            nxt = "user"
        while self.trajectory.termination is None:
            nxt = await self._step(nxt)
        return self.trajectory

    async def _step(self, nxt: Next) -> Next:
        traj = self.trajectory
        stopped: TerminationReason | None = None
        if nxt == "env":
            caller = self._last_caller()
            started = time.perf_counter()
            self._execute(traj.messages[-1], caller)
            self.timings["env_s"] += time.perf_counter() - started
            following: Next = caller
        else:
            party = self.agent if nxt == "assistant" else self.user
            assert party is not None
            started = time.perf_counter()
            message = await party.act(list(traj.messages))
            self.timings["agent_s" if nxt == "assistant" else "user_s"] += time.perf_counter() - started
            message, following, stopped = self._route(nxt, party, message)
            traj.messages.append(message)
        traj.steps += 1
        self.env.sync()
        if following != "env":
            self._check_termination(stopped)
        return following

    def _route(self, sender: Requestor, party: Party, message: Message) -> tuple[Message, Next, TerminationReason | None]:
        message = message.model_copy(update={"role": sender})
        if self.env.solo and sender == "assistant":
            if any(call.name == DONE_TOOL.name for call in message.tool_calls):
                return Message(role="assistant", content=AGENT_STOP_TOKEN), "user", TerminationReason.AGENT_STOP
            if not message.is_tool_call:
                return message, "user", TerminationReason.AGENT_ERROR
            return message, "env", None
        if message.is_tool_call:
            return message, "env", None
        if not message.content:
            error = TerminationReason.AGENT_ERROR if sender == "assistant" else TerminationReason.USER_ERROR
            return message, "user" if sender == "assistant" else "assistant", error
        if sender == "user":
            stop = any(token in message.content for token in USER_STOP_TOKENS)
            return message, "assistant", TerminationReason.USER_STOP if stop else None
        stop = party.is_stop(message)
        return message, "user", TerminationReason.AGENT_STOP if stop else None

    def _execute(self, message: Message, caller: Requestor) -> None:
        for call in message.tool_calls:
            observation = self.env.execute(call, caller)
            self._record(observation)
        for bad in message.invalid_tool_calls:
            content = f"Error: the arguments of {bad.name!r} are not a valid JSON object ({bad.error})"
            self._record(Observation(call_id=bad.id, name=bad.name, content=content, error=True, requestor=caller))

    def _record(self, observation: Observation) -> None:
        self.trajectory.messages.append(Message.from_observation(observation))
        self.trajectory.num_errors += int(observation.error)

    def _last_caller(self) -> Requestor:
        role = self.trajectory.messages[-1].role
        assert role in ("assistant", "user"), "the environment only answers tool-call messages"
        return role

    def _check_termination(self, stopped: TerminationReason | None) -> None:
        traj = self.trajectory
        reason = stopped
        if traj.steps >= self.max_steps:
            reason = TerminationReason.MAX_STEPS
        if traj.num_errors >= self.max_errors:
            reason = TerminationReason.TOO_MANY_ERRORS
        traj.termination = reason
