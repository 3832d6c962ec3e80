"""A recorded run of a real agent, as data: per episode its decisions (each with the seconds the model took), its
user's turns, how it ended and how the recording's own evaluator scored it; and how a replay's answers and checks
compare with the recording's.

A bench reads a run recorded by its own tools (tau2's simulation files: :mod:`agentspec.bench.tau2.recorded`) into
a :class:`Recording`; :mod:`agentspec.runtime.recorded_agent` plays it through the executor.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentspec.errors import ConfigError
from agentspec.runtime.conversation import SAY
from agentspec.types import Message, Observation, TerminationReason, ToolCall


@dataclass(frozen=True)
class RecordedDecision:
    """One decision of the recorded agent: a call (a message to the user is the call ``send_message_to_user``) or
    the end of the episode (``call`` None)."""

    call: ToolCall | None
    seconds: float | None
    """The time the model took: from the message it answered to its answer (None: not recorded)."""
    answer: str | None = None
    """What the recording's environment answered the call (None: no answer recorded, or not a tool call)."""
    text: str | None = None
    """With ``call`` None: the text the agent wrote instead of a call or the end (solo mode: a protocol error)."""


@dataclass(frozen=True)
class RecordedUserCall:
    """One call the recorded user made on their device, the time they took to make it and what it answered."""

    call: ToolCall
    seconds: float | None
    answer: str | None = None


@dataclass(frozen=True)
class RecordedTurn:
    """What the recorded user did between two agent messages: calls, then a reply after ``reply_seconds``."""

    calls: tuple[RecordedUserCall, ...]
    reply: str
    reply_seconds: float | None
    stop: bool = False
    """The reply ended the conversation (a stop token)."""


@dataclass(frozen=True)
class RecordedCheck:
    """One check of the recording's own evaluator: an environment assertion (``env``) or a gold action
    (``action``), and whether it passed."""

    kind: str
    name: str
    arguments: dict[str, Any]
    passed: bool


@dataclass(frozen=True)
class RecordedEpisode:
    """One recorded episode: who decided what and when, how it ended and how the recording's evaluator scored it."""

    task_id: str
    trial: int
    source: str
    """Where it comes from: ``FILE#simulation-id``."""
    solo: bool
    decisions: tuple[RecordedDecision, ...]
    turns: tuple[RecordedTurn, ...] = ()
    """Normal mode: the user's turns, the first one answering the opening."""
    opening: str = ""
    """Normal mode: the agent's first words (said without a decision)."""
    termination: TerminationReason | None = None
    reward: float | None = None
    """The reward the recording's own evaluator gave (None: not scored)."""
    messages: tuple[Message, ...] = ()
    """The conversation as agentspec messages; tool messages hold the recording's answers."""
    evaluation: dict[str, Any] = field(default_factory=dict)
    """The recording's evaluation as its tool wrote it (tau2: ``reward_info``)."""
    checks: tuple[RecordedCheck, ...] = ()
    """Its checks, as agentspec's evaluator names them (kind ``env`` or ``action``)."""
    duration_s: float | None = None
    """The episode's own wall time, as recorded."""
    untimed: str | None = None
    """Why the recorded clock cannot time this episode (a message without a timestamp), None when it can."""

    @property
    def key(self) -> str:
        """The run log's key of this episode's job: ``"<task id>#<trial>"``."""
        return f"{self.task_id}#{self.trial}"

    def calls(self) -> list[ToolCall]:
        """The agent's tool calls in order (its messages to the user left out)."""
        return [d.call for d in self.decisions if d.call is not None and d.call.name != SAY]

    def decided(self) -> list[ToolCall]:
        """Every decision that is a call, messages to the user included: what a speculator of this agent predicts."""
        return [d.call for d in self.decisions if d.call is not None]

    def answers(self) -> list[str | None]:
        """The recording's answer to every call, agent's and user's, in the order they were made."""
        out: list[str | None] = []
        turns = iter(self.turns)
        if not self.solo:
            out.extend(c.answer for c in next(turns, RecordedTurn((), "", None)).calls)
        for decision in self.decisions:
            if decision.call is None:
                continue
            if decision.call.name == SAY:
                out.extend(c.answer for c in next(turns, RecordedTurn((), "", None)).calls)
            else:
                out.append(decision.answer)
        return out

    def check_timed(self) -> None:
        """Raise :class:`ConfigError` when the recorded clock cannot time this episode."""
        if self.untimed is not None:
            raise ConfigError(f"{self.source}: {self.untimed}: the recorded clock (--latency-model recorded) needs a "
                              "timestamp on every message")


@dataclass(frozen=True)
class Recording:
    """A recorded run: its episodes, in the order the file has them, and what made it."""

    source: str
    """The file it was read from."""
    digest: str
    """sha256 of the file: what a run log keys a replay by."""
    agent_model: str | None
    user_model: str | None
    solo: bool
    policy: str
    """The agent policy the recording ran under (tau2: ``default``, ``workflow``...)."""
    episodes: tuple[RecordedEpisode, ...]

    def episode(self, task_id: str, trial: int = 0) -> RecordedEpisode:
        """The episode of ``task_id``'s ``trial``; ConfigError when the recording has none."""
        for episode in self.episodes:
            if episode.task_id == task_id and episode.trial == trial:
                return episode
        raise ConfigError(f"{self.source} has no episode of task {task_id!r} (trial {trial})")

    def task_ids(self) -> list[str]:
        """The recorded tasks, each once, in the file's order."""
        return list(dict.fromkeys(e.task_id for e in self.episodes))

    def trials(self) -> int:
        """The most trials any task was recorded with."""
        return max((e.trial for e in self.episodes), default=-1) + 1


# --- comparing a replay with it ---------------------------------------------------------------------------


def _parsed(content: str | None) -> Any:
    try:
        return json.loads(content or "")
    except json.JSONDecodeError:
        return content


def observation_mismatches(episode: RecordedEpisode, messages: Sequence[Message]) -> int:
    """How many of the calls' answers in ``messages`` (a replay of ``episode``, agent's and user's calls in order)
    differ from the recording's (JSON compared as values); a call one side has and the other lacks counts too."""
    ours = [m.content for m in messages if m.role == "tool"]
    recorded = episode.answers()
    differing = sum(1 for a, b in zip(ours, recorded) if b is not None and _parsed(a) != _parsed(b))
    return differing + abs(len(ours) - len(recorded))


def differing_checks(episode: RecordedEpisode, evaluation: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The checks whose outcome differs between the recording's evaluator and agentspec's (``evaluation``: an
    episode record's, with ``env_assertions`` and ``actions`` of ``kind``, ``name``, ``arguments``, ``passed``); a
    check only one side made counts, with None on the other side."""
    ours: dict[tuple[str, str, str], bool | None] = {}
    for check in [*(evaluation or {}).get("env_assertions", []), *(evaluation or {}).get("actions", [])]:
        ours[(check["kind"], check["name"], json.dumps(check.get("arguments") or {}, sort_keys=True))] = check["passed"]
    theirs = {(c.kind, c.name, json.dumps(c.arguments, sort_keys=True)): c.passed for c in episode.checks}
    out = []
    for key in sorted(set(ours) | set(theirs)):
        if ours.get(key) != theirs.get(key):
            kind, name, arguments = key
            out.append({"kind": kind, "name": name, "arguments": json.loads(arguments),
                        "recorded": theirs.get(key), "agentspec": ours.get(key)})
    return out


def observation_of(call: ToolCall, answer: str | None) -> Observation | None:
    """The recording's answer to ``call`` as an observation (None when none was recorded)."""
    return None if answer is None else Observation(call_id=call.id, name=call.name, content=answer)
