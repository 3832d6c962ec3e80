"""A tau2 domain as a bench: tau2's parties and evaluator around the domain's knowledge.

A tau2 domain (the telecom bench is one) provides tasks, environments,
prompts and gold calls (:class:`Tau2Domain`); :class:`Tau2Bench` adds what
every tau2 domain shares: the ``done`` tool of solo mode, the user simulator
of normal mode, scoring with tau2's evaluator, and the scripted authority and
user (:meth:`Tau2Bench.scripted`) with which ``agentspec evaluate`` plays given
calls through the executor like any run.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, runtime_checkable

from agentspec.bench.protocol import T, distractors, solo_calls
from agentspec.bench.tau2.evaluator import Evaluation, evaluate
from agentspec.bench.tau2.official import Tau2Source, write_results
from agentspec.bench.tau2.parties import (
    AGENT_STOP_TOKEN,
    DONE_TOOL,
    GREETING,
    USER_STOP_TOKENS,
    LLMUser,
    Party,
    script_turns,
)
from agentspec.bench.tau2.recorded import read_recording
from agentspec.models import ModelClient
from agentspec.runtime.conversation import RunCall, ScriptedUser, User, UserTurn, scripted_turns, steps_trajectory
from agentspec.runtime.policies.protocol import Policy
from agentspec.runtime.policies.scripted import OracleAuthority
from agentspec.runtime.recording import Recording
from agentspec.snapshot import InProcessBackend, SnapshotBackend
from agentspec.types import Message, Requestor, Step, TerminationReason, ToolCall, ToolSpec, Trajectory


@runtime_checkable
class Tau2Domain(Protocol[T]):
    """What a tau2 domain knows (the telecom bench is one); ``T``: its task type.  A registered bench class that
    has all of it is opened wrapped in :class:`Tau2Bench` (:func:`agentspec.bench.registry.open_bench`)."""

    name: str

    def tasks(self, split: str = ..., task_ids: list[str] | None = ..., limit: int | None = ...) -> list[T]: ...

    def task(self, task_id: str) -> T: ...

    def all_tasks(self) -> list[T]: ...

    def environment(self, task: T, *, solo: bool = ...) -> Any:
        """A fresh, initialised :class:`agentspec.env.Environment` with ``sync()`` and ``run_function()``."""
        ...

    def agent_prompt(self, task: T, *, solo: bool) -> str: ...

    def user_prompt(self, task: T) -> str: ...

    def gold_actions(self, task: T) -> list[tuple[Requestor, ToolCall]]: ...

    def common_calls(self) -> list[ToolCall]: ...

    def value_patterns(self) -> list[tuple[str, str, str | None]]: ...

    def criteria(self, task: T) -> Any:
        """``env_assertions``, ``actions`` (gold, with ``compare_args``) and ``reward_basis``."""
        ...


@runtime_checkable
class OfficialSource(Protocol):
    """A domain that can give tau2's own results files what they carry: its tasks as its ``tasks.json`` has them
    (by id), that file's path, and the agent policy as tau2 composes it for each play."""

    tau2_domain: str
    """The domain's name in tau2's own registry (``telecom``)."""

    def raw_tasks(self) -> dict[str, dict[str, Any]]: ...

    def tasks_file(self) -> str: ...

    def official_policy(self, solo: bool) -> str: ...


@dataclass
class PartyUser:
    """A tau2 user party (an LLM user simulator) as the executor's :class:`~agentspec.runtime.conversation.User`:
    it acts until it writes text, its calls running on the live state."""

    party: Party
    opening: str = GREETING
    max_calls: int = 50
    """Calls one turn may make before the turn is cut (a user simulator stuck in a loop of calls)."""

    async def reply(self, conversation: list[Message], run: RunCall) -> UserTurn:
        messages: list[Message] = []
        for _ in range(self.max_calls):
            message = (await self.party.act([*conversation, *messages])).model_copy(update={"role": "user"})
            messages.append(message)
            if not message.is_tool_call:
                text = message.content or ""
                return UserTurn(text, messages, stop=any(t in text for t in USER_STOP_TOKENS), error=not text)
            for call in message.tool_calls:
                messages.append(Message.from_observation(await run(call)))
            for bad in message.invalid_tool_calls:
                content = f"Error: the arguments of {bad.name!r} are not a valid JSON object ({bad.error})"
                messages.append(Message(role="tool", content=content, tool_call_id=bad.id, requestor="user", error=True))
        return UserTurn("", messages, error=True)


class Tau2Bench(Generic[T]):
    """A tau2 domain as an agentspec :class:`~agentspec.bench.protocol.Bench` with a
    :class:`~agentspec.bench.protocol.UserSimulator` (normal and solo mode)."""

    default_split = "base"
    in_process = True

    def __init__(self, domain: Tau2Domain[T], *, max_steps: int = 200, max_errors: int = 10) -> None:
        self.domain = domain
        self.name = domain.name
        self.max_steps, self.max_errors = max_steps, max_errors

    # --- the Bench protocol --------------------------------------------------------

    def tasks(self, split: str = "base", task_ids: list[str] | None = None, limit: int | None = None) -> list[T]:
        return self.domain.tasks(split, task_ids, limit)

    def task(self, task_id: str) -> T:
        return self.domain.task(task_id)

    def environment(self, task: T, *, solo: bool = False) -> Any:
        return self.domain.environment(task, solo=solo)

    @asynccontextmanager
    async def open_backend(self, task: T, *, solo: bool) -> AsyncIterator[SnapshotBackend]:
        yield InProcessBackend(self.environment(task, solo=solo))

    def tools(self, task: T, *, solo: bool) -> list[ToolSpec]:
        env = self.environment(task, solo=solo)
        tools: list[ToolSpec] = env.tool_specs("assistant")
        return tools + ([DONE_TOOL] if solo else [])

    def system_prompt(self, task: T, *, solo: bool) -> str:
        return self.domain.agent_prompt(task, solo=solo)

    def gold_actions(self, task: T) -> list[tuple[Requestor, ToolCall]]:
        return self.domain.gold_actions(task)

    def gold_calls(self, task: T) -> list[ToolCall]:
        """The gold calls as a solo agent makes them (all of them, in order)."""
        return solo_calls(self.gold_actions(task))

    def distractors(self) -> list[ToolCall]:
        """Every distinct gold call of the domain's tasks, after its common checks (:func:`distractors`)."""
        gold = (call for task in self.domain.all_tasks() for _, call in self.domain.gold_actions(task))
        return distractors(gold, checks=self.domain.common_calls())

    def value_patterns(self) -> list[tuple[str, str, str | None]]:
        return self.domain.value_patterns()

    def user(self, task: T, client: ModelClient | None) -> User:
        if client is None:
            return ScriptedUser(scripted_turns(self.gold_actions(task))[1], opening=GREETING)
        env = self.environment(task, solo=False)
        return PartyUser(LLMUser(client, self.domain.user_prompt(task), env.tool_specs("user")))

    async def evaluate(self, task: T, steps: Sequence[Step], termination: TerminationReason, *, solo: bool,
                       live: SnapshotBackend | None = None, final: dict[str, Any] | None = None) -> Evaluation:
        return self.evaluate_trajectory(task, trajectory_of(task.id, steps, termination), solo=solo)

    def write_outputs(self, out: Path, records: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[Path]:
        """tau2's own results files (:class:`~agentspec.bench.protocol.OfficialOutputs`) with this bench's step and
        error limits: ``out/tau2/results.json`` when one mode ran, ``out/tau2/results-MODE.json`` per mode when
        several did (:mod:`agentspec.bench.tau2.official`); none for a domain that cannot give its raw tasks."""
        if not isinstance(self.domain, OfficialSource):
            return []
        source = Tau2Source(domain=self.domain.tau2_domain, raw_tasks=self.domain.raw_tasks(),
                            tasks_file=self.domain.tasks_file(), policy=self.domain.official_policy)
        return write_results(out, records, source=source, max_steps=self.max_steps, max_errors=self.max_errors)

    def read_recording(self, path: str | Path) -> Recording | None:
        """tau2's own simulation file at ``path`` (:mod:`agentspec.bench.tau2.recorded`), None when it is not one
        (:class:`~agentspec.bench.protocol.RecordedRuns`)."""
        return read_recording(self, path)

    # --- tau2's evaluator and scripted episodes (``agentspec evaluate``) ------------------

    def evaluate_trajectory(self, task: Any, trajectory: Trajectory, *, solo: bool) -> Evaluation:
        criteria = self.domain.criteria(task)
        return evaluate(
            trajectory,
            fresh_environment=lambda: self.environment(task, solo=solo),
            assertions=criteria.env_assertions,
            gold_actions=criteria.actions,
            reward_basis=criteria.reward_basis,
        )

    def oracle(self, task: Any, *, solo: bool = True) -> tuple[Policy, User | None]:
        """An authority and user that replay the task's gold actions (the agent makes every call in solo mode)."""
        return self.scripted(self.gold_actions(task), end="assistant", solo=solo)

    def scripted(
        self, calls: Sequence[tuple[Requestor, ToolCall]], *, end: Requestor = "assistant", solo: bool = False
    ) -> tuple[Policy, User | None]:
        """An authority that makes the agent's ``calls`` in order, then stops, and a scripted user who makes the
        user's (none in solo mode, where the agent makes them all); ``end``: who ends the episode (tau2's
        ``agent_stop`` or ``user_stop``).  The executor plays them in sequential mode (``agentspec evaluate``)."""
        if solo:
            return OracleAuthority(solo_calls(calls)), None
        decisions, user = script_turns(calls, end)
        return OracleAuthority(decisions), user


def trajectory_of(task_id: str, steps: Sequence[Step], termination: TerminationReason) -> Trajectory:
    """Committed executor steps as a tau2 trajectory: an agent stop is the text ``###STOP###`` at the end."""
    trajectory = steps_trajectory(task_id, steps, termination)
    if termination is TerminationReason.AGENT_STOP:
        trajectory.messages.append(Message(role="assistant", content=AGENT_STOP_TOKEN))
        trajectory.steps += 1
    return trajectory
