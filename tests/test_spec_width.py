"""`--spec-width K`: the speculator's head guess and its next K-1 ranked alternatives run in parallel forks; an
authority call equal to any of them commits that fork with its observation (no second execution)."""

from __future__ import annotations

from dataclasses import dataclass

import anyio
from toy_env import KVEnvironment
from trio.testing import MockClock

from agentspec.assembly import executor_config
from agentspec.run_spec import RunSpec
from agentspec.runtime.config import ExecutorConfig
from agentspec.runtime.executor import ExecutionLoop
from agentspec.runtime.policies.protocol import Decision, History, committed_steps
from agentspec.snapshot import InProcessBackend
from agentspec.types import ToolCall

SCRIPT = [ToolCall(name="put", arguments={"key": "a", "value": 1}), ToolCall(name="incr", arguments={"key": "a"}),
          ToolCall(name="get", arguments={"key": "a"})]
WRONG = ToolCall(name="incr", arguments={"key": "b"})
"""Mutating guesses that are never the authority's: they must never reach live state."""


@dataclass
class Authority:
    async def decide(self, history: History) -> Decision:
        await anyio.sleep(1.0)  # thinks longer than every guess takes to run in its fork
        return Decision(call=SCRIPT[len(history)] if len(history) < len(SCRIPT) else None)


@dataclass
class RankedSpeculator:
    """Guesses a wrong mutating call first, then a message (external: never run), a second wrong mutating call,
    and the right call as its third alternative (rank 3); one position deep."""

    async def decide(self, history: History) -> Decision:
        if committed_steps(history) < len(history) or len(history) >= len(SCRIPT):
            return Decision(call=None)
        right = SCRIPT[len(history)]
        alternatives = (ToolCall(name="notify", arguments={"message": "hi"}),
                        ToolCall(name="put", arguments={"key": "b", "value": 9}), right)
        return Decision(call=WRONG, alternatives=alternatives)


def play(width: int):
    async def go():
        backend = InProcessBackend(KVEnvironment())
        loop = ExecutionLoop(backend, Authority(), RankedSpeculator(), config=ExecutorConfig(mode="sa", spec_width=width))
        return backend, await loop.run()

    return anyio.run(go, backend="trio", backend_options={"clock": MockClock(autojump_threshold=0)})


def sequential_state() -> dict:
    env = KVEnvironment()
    for call in SCRIPT:
        env.execute(call)
    return env.state


def test_an_authority_call_equal_to_a_lower_ranked_guess_commits_its_fork():
    backend, result = play(width=3)
    metrics = result.metrics
    assert [s.call for s in result.steps] == SCRIPT
    assert [s.source for s in result.steps] == ["sa"] * 3  # every step from a fork: none re-executed on live
    assert metrics.live_executions == 0
    assert metrics.hits_by_rank == [0, 0, 3]  # rank 2: the second alternative run (the message is skipped)
    assert metrics.alternative_tool_calls == 6  # two runnable alternatives per position; the external one never
    assert metrics.wasted_tool_calls == 3 + 3  # each position's head guess and its other alternative
    assert backend.live.state == sequential_state()  # no wrong (mutating) guess touched live state
    assert not any(line.startswith("notify") for line in backend.live.state["journal"])


def test_a_narrower_width_does_not_run_the_right_guess():
    backend, result = play(width=2)
    assert [s.source for s in result.steps] == ["authority"] * 3
    assert result.metrics.live_executions == 3 and result.metrics.hits_by_rank == []
    assert result.metrics.alternative_tool_calls == 3  # only the first runnable alternative per position
    assert backend.live.state == sequential_state()


def test_the_run_spec_carries_the_width_to_the_executor():
    spec = RunSpec.of(modes="sa", spec_width=3)
    assert executor_config(spec, spec.modes[0]).spec_width == 3
