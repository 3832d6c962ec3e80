"""A recorded agent: a real model's run, replayed decision by decision, on the run's clock or on its own.

Played through the executor:

* :class:`RecordedAuthority` answers each decision with the recording's, whatever the environment answered (a
  recorded agent cannot change its mind), and with ``timed`` takes the recorded time to do so;
* :class:`RecordedUser` plays each user turn: its calls run on the live state (their answers are agentspec's), its
  reply is the recorded text, each after the recorded time;
* :func:`~agentspec.runtime.recording.observation_mismatches` counts the answers that differ from what the
  recording's environment answered.

The recorded clock (``--latency-model recorded``) is the recording's own: a decision takes the time between the
message it answered and its answer; the user likewise; tools take the latency model's tool time.  A verified macro
chain (lossless SMC) costs :data:`VERIFY_SHARE` of the recorded time of the decisions it stands for.  The recording
itself is :mod:`agentspec.runtime.recording`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import anyio

from agentspec.runtime.chain_verification import Chain, ChainVerdict, Prefix, verify_by_deciding
from agentspec.runtime.conversation import RunCall, UserTurn
from agentspec.runtime.latency import estimate_tokens
from agentspec.runtime.policies.protocol import Decision, History, committed_steps
from agentspec.runtime.recording import RecordedDecision, RecordedEpisode
from agentspec.types import Message, ToolCall

VERIFY_SHARE = 0.25
"""What verifying a chain costs, as a share of the recorded time of the decisions it stands for: the project's own
measurement (``experiments/verify_chain_cost.py``, ``experiments/verified_smc.md``): one verification of a 3-call
chain took 0.23-0.31 of deciding those calls one by one (qwen2.5-coder 0.5B and 1.5B, on the workspace-demo bench's
tasks and on a tool set of its own); 0.25 is its median."""


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

