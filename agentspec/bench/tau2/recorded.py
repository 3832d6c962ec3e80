"""tau2-bench's own simulation files, read as recordings of real agents (:class:`~agentspec.runtime.recording.Recording`).

tau2 writes a run as one JSON document: ``info`` (the agent's and the user's implementation and model, the
environment's domain), ``tasks`` and ``simulations``, each simulation with its ``task_id``, ``trial``,
``termination_reason``, ``reward_info`` and ``messages`` (``role``, ``content``, ``tool_calls`` with their
``requestor``, tool answers as ``role: tool`` messages carrying the call's ``id``, and a ``timestamp`` on each).
Two layouts are read: the older single file, and a newer release's run folder whose ``results.json`` adds keys per
run, simulation and message (ignored here).  Solo runs (``llm_agent_solo``: the agent makes every call and ends with
the text ``###STOP###``) and runs with a user simulator (agent calls on assistant messages, device calls on user
messages), under the default or another policy of the domain (``telecom-workflow``).

    >>> recording = read_recording(bench, "traces/sierra_gpt-4.1_telecom_solo.json")   # doctest: +SKIP
    >>> recording.agent_model, len(recording.episodes), recording.episodes[0].decisions[0].call.name
    ('gpt-4.1', 40, 'get_customer_by_phone')

Bad input is one :class:`~agentspec.errors.ConfigError` line: a file that is not JSON (or cut short), not a tau2
results document, another domain, task ids the data does not have (named), tools the bench does not have.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentspec.bench.tau2.official import TAU2_RESULTS
from agentspec.bench.tau2.parties import AGENT_STOP_TOKEN, USER_STOP_TOKENS
from agentspec.errors import AgentSpecError, ConfigError
from agentspec.runtime.conversation import say
from agentspec.runtime.recording import (
    RecordedCheck,
    RecordedDecision,
    RecordedEpisode,
    RecordedTurn,
    RecordedUserCall,
    Recording,
)
from agentspec.types import Message, TerminationReason, ToolCall
from agentspec.user_files import read_user_file

TAU2_KEYS = {b"timestamp", b"info", b"tasks", b"simulations"}
_FIRST_KEY = re.compile(rb'\s*\{\s*"([A-Za-z_]+)"')


class _Call(BaseModel):
    model_config = ConfigDict(extra="ignore")

    id: str = ""
    name: str
    arguments: dict[str, Any] | None = None


class _Message(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "assistant", "user", "tool"]
    content: str | None = None
    tool_calls: list[_Call] | None = None
    id: str | None = None
    requestor: Literal["assistant", "user"] | None = None
    error: bool | None = False
    timestamp: datetime | None = None


class _Simulation(BaseModel):
    model_config = ConfigDict(extra="ignore")

    id: str = ""
    task_id: str
    trial: int | None = 0
    termination_reason: str | None = None
    reward_info: dict[str, Any] | None = None
    messages: list[_Message]
    start_time: datetime | None = None
    duration: float | None = None


class _Party(BaseModel):
    model_config = ConfigDict(extra="ignore")

    implementation: str = ""
    llm: str | None = None


class _Environment(BaseModel):
    model_config = ConfigDict(extra="ignore")

    domain_name: str


class _Info(BaseModel):
    model_config = ConfigDict(extra="ignore")

    agent_info: _Party
    user_info: _Party = Field(default_factory=_Party)
    environment_info: _Environment


class _Results(BaseModel):
    model_config = ConfigDict(extra="ignore")

    info: _Info
    simulations: list[_Simulation]


def recording_file(path: str | Path) -> Path | None:
    """The tau2 results file ``path`` names (a file, or a run folder's ``results.json``) when it is one; None when
    ``path`` holds something else (an agentspec run's ``results.json``: no ``simulations``)."""
    given = Path(path)
    file = given / TAU2_RESULTS if given.is_dir() else given  # a newer tau2 release's run folder
    if not file.is_file():
        return None
    with file.open("rb") as handle:
        head = handle.read(4096)
    # A tau2 document's first key is one of its run's (tau2 writes timestamp, info, tasks, simulations in that
    # order); agentspec's results.json opens with "format" (or "summary", its previous format).
    first = _FIRST_KEY.match(head)
    return file if first is not None and first.group(1) in TAU2_KEYS else None


def read_recording(bench: Any, path: str | Path) -> Recording | None:
    """The tau2 recording at ``path`` for ``bench`` (a tau2 bench: its tasks, tools and domain); None when ``path``
    is not a tau2 results file (:func:`recording_file`)."""
    file = recording_file(path)
    if file is None:
        return None
    stat = file.stat()
    return _read(bench, str(file.resolve()), str(file), (stat.st_mtime_ns, stat.st_size))


@lru_cache(maxsize=8)
def _read(bench: Any, resolved: str, shown: str, stamp: tuple[int, int]) -> Recording:
    raw = read_user_file(resolved, "tau2 results file").encode("utf-8")
    try:
        document = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{shown}: not a readable JSON file (cut short?): {exc}") from None
    try:
        results = _Results.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(map(str, first["loc"])) or "top level"
        raise ConfigError(f"{shown}: not a tau2-bench results file: at {where}: {first['msg']}") from None
    domain = results.info.environment_info.domain_name
    own = bench.domain.tau2_domain
    if domain != own and not domain.startswith(own + "-"):
        raise ConfigError(f"{shown}: a run of tau2's {domain!r} domain; {bench.name} reads {own!r} runs")
    _check_tasks(bench, shown, results)
    solo = "solo" in results.info.agent_info.implementation
    _check_tools(bench, shown, results, solo)
    episodes = tuple(_episode(sim, f"{shown}#{sim.id or index}", solo) for index, sim in enumerate(results.simulations))
    policy = domain.removeprefix(own).lstrip("-") or "default"
    user = None if solo else results.info.user_info.llm
    return Recording(source=shown, digest=hashlib.sha256(raw).hexdigest(), agent_model=results.info.agent_info.llm,
                     user_model=user, solo=solo, policy=policy, episodes=episodes)


def _check_tasks(bench: Any, shown: str, results: _Results) -> None:
    known = {task.id for task in bench.domain.all_tasks()}
    unknown = list(dict.fromkeys(s.task_id for s in results.simulations if s.task_id not in known))
    if unknown:
        more = f" and {len(unknown) - 3} more" if len(unknown) > 3 else ""
        raise ConfigError(f"{shown}: {len(unknown)} task id(s) not in the {bench.name} data: "
                          f"{', '.join(map(repr, unknown[:3]))}{more}")


def _check_tools(bench: Any, shown: str, results: _Results, solo: bool) -> None:
    """Every call names a tool its side has (solo: the agent has them all), unless the recording's environment
    lacked it too (it answered with an error: a model's made-up tool, which agentspec answers the same way)."""
    if not results.simulations:
        return
    env = bench.environment(bench.task(results.simulations[0].task_id), solo=solo)
    owned = {side: {spec.name for spec in env.tool_specs(side)} for side in ("assistant", "user")}
    if solo:
        owned["assistant"] |= {"done"}
    for sim in results.simulations:
        failed = {m.id for m in sim.messages if m.role == "tool" and m.error}
        for number, message in enumerate(sim.messages):
            side = "user" if message.role == "user" else "assistant"
            for call in message.tool_calls or []:
                if call.name not in owned[side] and call.id not in failed:
                    who = "agent" if side == "assistant" else "user"
                    raise ConfigError(f"{shown}: simulation {sim.id or sim.task_id} message {number}: the {who} calls "
                                      f"{call.name!r}, a tool {bench.name} does not have")


def _seconds(later: datetime | None, earlier: datetime | None) -> float | None:
    if later is None or earlier is None:
        return None
    return max(0.0, (later - earlier).total_seconds())


def _call(call: _Call) -> ToolCall:
    try:
        return ToolCall(id=call.id or f"recorded_{call.name}", name=call.name, arguments=call.arguments or {})
    except ValueError as exc:
        raise ConfigError(f"call {call.name!r} has arguments agentspec cannot hold: {exc}") from None


def _episode(sim: _Simulation, source: str, solo: bool) -> RecordedEpisode:
    try:
        return _Replay(sim, source, solo).episode()
    except AgentSpecError as exc:
        raise ConfigError(f"{source}: {exc}") from None


class _Replay:
    """One simulation's messages turned into the agent's decisions and the user's turns, with their times."""

    def __init__(self, sim: _Simulation, source: str, solo: bool) -> None:
        self.sim, self.source, self.solo = sim, source, solo
        self.answers = {m.id: m.content or "" for m in sim.messages if m.role == "tool" and m.id}
        self.decisions: list[RecordedDecision] = []
        self.turns: list[RecordedTurn] = []
        self.pending: list[RecordedUserCall] = []
        self.untimed: str | None = None

    def episode(self) -> RecordedEpisode:
        messages = [m for m in self.sim.messages if m.role != "system"]
        opening = ""
        start = 0
        if not self.solo and messages and messages[0].role == "assistant" and not messages[0].tool_calls:
            opening, start = messages[0].content or "", 1  # the greeting: said without a decision
        for index, message in enumerate(messages):
            if message.timestamp is None and self.untimed is None:
                self.untimed = f"message {index} ({message.role}) has no timestamp"
            if index < start:
                continue
            # The first message answers the start of the simulation (solo: the ticket).
            previous = messages[index - 1].timestamp if index else self.sim.start_time
            seconds = _seconds(message.timestamp, previous)
            if message.role == "assistant":
                self._agent(message, seconds)
            elif message.role == "user":
                self._user(message, seconds)
        sim = self.sim
        return RecordedEpisode(
            task_id=sim.task_id, trial=sim.trial or 0, source=self.source, solo=self.solo,
            decisions=tuple(self.decisions), turns=tuple(self.turns), opening=opening,
            termination=_termination(sim.termination_reason),
            reward=(sim.reward_info or {}).get("reward"), messages=tuple(_messages(messages)),
            evaluation=sim.reward_info or {}, checks=_checks(sim.reward_info or {}), duration_s=sim.duration,
            untimed=self.untimed)

    def _agent(self, message: _Message, seconds: float | None) -> None:
        if message.tool_calls:  # a text beside calls goes to no one in tau2: the calls are the decision
            for k, call in enumerate(message.tool_calls):
                self.decisions.append(RecordedDecision(_call(call), seconds if k == 0 else 0.0,
                                                       answer=self.answers.get(call.id)))
            return
        text = message.content or ""
        if AGENT_STOP_TOKEN in text:
            self.decisions.append(RecordedDecision(None, seconds))
        elif self.solo:  # solo: a text that does not end the task is not a call (a protocol error for agentspec)
            self.decisions.append(RecordedDecision(None, seconds, text=text))
        else:
            self.decisions.append(RecordedDecision(say(text, f"say_{len(self.decisions)}"), seconds))

    def _user(self, message: _Message, seconds: float | None) -> None:
        if message.tool_calls:  # as the agent's: a text beside calls goes to no one
            for k, call in enumerate(message.tool_calls):
                self.pending.append(RecordedUserCall(_call(call), seconds if k == 0 else 0.0,
                                                     answer=self.answers.get(call.id)))
            return
        text = message.content or ""
        self.turns.append(RecordedTurn(tuple(self.pending), text, seconds, stop=any(t in text for t in USER_STOP_TOKENS)))
        self.pending = []


def _checks(reward_info: dict[str, Any]) -> tuple[RecordedCheck, ...]:
    """tau2's environment assertions and action checks as agentspec's evaluator names them."""
    checks = []
    for item in reward_info.get("env_assertions") or []:
        assertion = item.get("env_assertion") or {}
        checks.append(RecordedCheck("env", str(assertion.get("func_name")), assertion.get("arguments") or {},
                                    bool(item.get("met"))))
    for item in reward_info.get("action_checks") or []:
        action = item.get("action") or {}
        checks.append(RecordedCheck("action", str(action.get("name")), action.get("arguments") or {},
                                    bool(item.get("action_match"))))
    return tuple(checks)


def _termination(reason: str | None) -> TerminationReason | None:
    try:
        return TerminationReason(reason) if reason else None
    except ValueError:
        return None


def _messages(messages: list[_Message]) -> list[Message]:
    """The conversation as agentspec messages (the recording's answers in its tool messages)."""
    out = []
    for message in messages:
        if message.role == "tool":
            out.append(Message(role="tool", content=message.content or "", tool_call_id=message.id,
                               requestor=message.requestor or "assistant", error=bool(message.error)))
        elif message.tool_calls:
            out.append(Message(role=message.role, tool_calls=[_call(c) for c in message.tool_calls]))
        else:
            out.append(Message(role=message.role, content=message.content))
    return out
