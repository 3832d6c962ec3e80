"""A recorded agent: a real model's run, replayed decision by decision, on the run's clock or on its own.

A bench reads a run recorded by its own tools (tau2's simulation files: :mod:`agentspec.bench.tau2.recorded`) into
a :class:`Recording`: per episode, the agent's decisions in order (a call, a message to the user, or the end), each
with the seconds the model took to make it, and in normal mode the user's turns (their calls, their reply, the
seconds before each).  Played through the executor:

* :class:`RecordedAuthority` answers each decision with the recording's, whatever the environment answered (a
  recorded agent cannot change its mind), and with ``timed`` takes the recorded time to do so;
* :class:`RecordedUser` plays each user turn: its calls run on the live state (their answers are agentspec's), its
  reply is the recorded text, each after the recorded time;
* :func:`observation_mismatches` counts the answers that differ from what the recording's environment answered.

The recorded clock (``--latency-model recorded``) is the recording's own: a decision takes the time between the
message it answered and its answer; the user likewise; tools take the latency model's tool time.  A verified macro
chain (lossless SMC) costs :data:`VERIFY_SHARE` of the recorded time of the decisions it stands for.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio

from agentspec.errors import ConfigError
from agentspec.runtime.chain_verify import Chain, ChainVerdict, Prefix, verify_by_deciding
from agentspec.runtime.conversation import SAY, RunCall, UserTurn
from agentspec.runtime.latency import estimate_tokens
from agentspec.runtime.policies import Decision, History, committed_steps
from agentspec.types import Message, Observation, TerminationReason, ToolCall

VERIFY_SHARE = 0.25
"""What verifying a chain costs, as a share of the recorded time of the decisions it stands for: the project's own
measurement (``experiments/verify_chain_cost.py``, ``experiments/verified_smc.md``): one verification of a 3-call
chain took 0.23-0.31 of deciding those calls one by one (qwen2.5-coder 0.5B and 1.5B, on the workspace-demo bench's
tasks and on a tool set of its own); 0.25 is its median."""


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


# --- playing it -------------------------------------------------------------------------------------------


def _decision(recorded: RecordedDecision) -> Decision:
    if recorded.call is None:
        return Decision(call=None, output_tokens=1, text=recorded.text)
    return Decision(call=recorded.call, output_tokens=estimate_tokens(recorded.call.canonical()))


@dataclass
class RecordedAuthority:
    """The recorded agent as the authority: decision ``k`` of the episode is its answer after ``k`` decided steps
    (``offset`` steps the agent did not decide come first: normal mode's opening).  With ``timed``, each decision
    takes its recorded seconds on the run's clock, and a chain verification :data:`VERIFY_SHARE` of the decisions
    it covers.  Past the recording's last decision it ends the episode (a text: the recording says no more)."""

    episode: RecordedEpisode
    timed: bool = False
    offset: int = 0

    def _at(self, history: Prefix) -> RecordedDecision:
        index = committed_steps(history) - self.offset
        decisions = self.episode.decisions
        if 0 <= index < len(decisions):
            return decisions[index]
        ended = self.episode.termination.value if self.episode.termination else "no end"
        return RecordedDecision(None, 0.0, text=f"the recording has no decision {index} (it ended: {ended})")

    async def decide(self, history: History) -> Decision:
        recorded = self._at(history)
        if self.timed and recorded.seconds:
            await anyio.sleep(recorded.seconds)
        return _decision(recorded)

    async def verification(self) -> str | None:
        return None  # deciding is pure: verified by deciding at each prefix

    async def verify_chain(self, history: Prefix, chain: Chain) -> ChainVerdict:
        """The chain's longest prefix of recorded decisions; timed: :data:`VERIFY_SHARE` of the recorded time of
        the decisions it was offered for (one forward prefills them all)."""

        async def decide(prefix: Prefix) -> ToolCall | None:
            return self._at(prefix).call

        verdict = await verify_by_deciding(decide, history, chain)
        if not self.timed:
            return verdict
        covered = [self._at([*history, *chain[:k]]).seconds or 0.0 for k in range(verdict.steps)]
        seconds = VERIFY_SHARE * sum(covered)
        await anyio.sleep(seconds)
        return ChainVerdict(verdict.accepted, verdict.steps, seconds=seconds)


@dataclass
class RecordedUser:
    """The recorded user (normal mode): turn ``k`` answers the agent's ``k``-th message (the opening is the
    first), its calls run on live state with ``run``; with ``timed``, each call and the reply come after their
    recorded seconds."""

    episode: RecordedEpisode
    timed: bool = False
    opening: str = field(init=False)
    """The agent's first words, as recorded."""

    def __post_init__(self) -> None:
        self.opening = self.episode.opening

    async def _wait(self, seconds: float | None) -> None:
        if self.timed and seconds:
            await anyio.sleep(seconds)

    async def reply(self, conversation: list[Message], run: RunCall) -> UserTurn:
        # The turn's number comes from the conversation: a resumed run continues where it was.
        index = sum(1 for m in conversation if m.role == "user" and not m.is_tool_call)
        if index >= len(self.episode.turns):
            return UserTurn("", [], error=True)  # the recording has no more turns: its user said nothing more
        turn = self.episode.turns[index]
        messages: list[Message] = []
        for recorded in turn.calls:
            await self._wait(recorded.seconds)
            messages.append(Message(role="user", tool_calls=[recorded.call]))
            messages.append(Message.from_observation(await run(recorded.call)))
        await self._wait(turn.reply_seconds)
        messages.append(Message(role="user", content=turn.reply))
        return UserTurn(turn.reply, messages, stop=turn.stop)


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
