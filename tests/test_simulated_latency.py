"""Simulated model latency is a wrapper: a wrapped policy takes exactly the latency model's time on the
virtual clock, an unwrapped one takes none (its time would be real)."""

from __future__ import annotations

import anyio
import pytest
from test_executor_safety import SCRIPT, run_trio
from toy_env import KVEnvironment

from agentspec.runtime.config import ExecutorConfig
from agentspec.runtime.executor import ExecutionLoop
from agentspec.runtime.latency import LatencyModel, ModelLatency, ToolLatency, estimate_tokens
from agentspec.runtime.policies.protocol import DraftedHistory
from agentspec.runtime.policies.scripted import NoisyOracleSpeculator, OracleAuthority
from agentspec.runtime.probe import SimulatedProber
from agentspec.runtime.simulated import SimulatedLatency, SimulatedProbeLatency, untimed
from agentspec.snapshot import InProcessBackend
from agentspec.types import Observation

AUTHORITY = ModelLatency(prefill_tokens_per_s=1000.0, decode_tokens_per_s=20.0, overhead_s=0.5, reasoning_tokens=30)
SPECULATOR = ModelLatency(prefill_tokens_per_s=4000.0, decode_tokens_per_s=200.0)
LATENCY = LatencyModel(authority=AUTHORITY, speculator=SPECULATOR, tool=ToolLatency(fixed_s=2.0),
                       system_prompt_tokens=900, tokens_per_step=100)


def committed(n: int) -> list:
    return [(call, Observation(call_id=call.id, name=call.name, content="ok")) for call in SCRIPT[:n]]


def timed(policy, history):
    async def go():
        started = anyio.current_time()
        decision = await policy.decide(history)
        return decision, anyio.current_time() - started

    return run_trio(go)


def test_a_wrapped_decision_takes_exactly_the_latency_models_time():
    history = committed(2)
    decision, elapsed = timed(SimulatedLatency(OracleAuthority(SCRIPT), LATENCY, "authority"), history)
    assert decision.call == SCRIPT[2]
    assert decision.prompt_tokens == 900 + 2 * 100 and decision.output_tokens > 0
    assert elapsed == AUTHORITY.seconds(1100, decision.output_tokens)
    _, bare = timed(OracleAuthority(SCRIPT), history)
    assert bare == 0.0
    _, unwrapped = timed(untimed(SimulatedLatency(OracleAuthority(SCRIPT), LATENCY)), history)
    assert unwrapped == 0.0


def test_the_speculators_prompt_counts_committed_steps_not_its_own_drafts():
    speculator = NoisyOracleSpeculator(SCRIPT, 1.0, [], task_id="t")
    history = DraftedHistory(committed(1), committed(3)[1:])
    decision, elapsed = timed(SimulatedLatency(speculator, LATENCY, "speculator"), history)
    assert decision.call is not None and decision.call.name == SCRIPT[3].name
    assert elapsed == SPECULATOR.seconds(900 + 100, decision.output_tokens)
    _, no_model = timed(SimulatedLatency(speculator, LatencyModel(), "speculator"), history)
    assert no_model == 0.0  # a latency model without a speculator model charges it nothing


def test_a_streamed_decision_reports_progress_in_steps_and_takes_the_same_time():
    seen: list[tuple[int, float]] = []

    async def go():
        started = anyio.current_time()

        async def progress(text: str, tokens: int) -> None:
            seen.append((tokens, anyio.current_time() - started))

        policy = SimulatedLatency(OracleAuthority(SCRIPT), LATENCY, "authority", stream_every=8)
        decision = await policy.decide_streaming([], progress, request_id="ignored")
        return decision, anyio.current_time() - started

    decision, elapsed = run_trio(go)
    total = AUTHORITY.reasoning_tokens + decision.output_tokens
    assert [tokens for tokens, _ in seen] == [*range(1, total, 8), total]
    assert elapsed == pytest.approx(AUTHORITY.seconds(900, decision.output_tokens))
    first_token = AUTHORITY.overhead_s + 900 / AUTHORITY.prefill_tokens_per_s + 1 / AUTHORITY.decode_tokens_per_s
    assert seen[0][1] == pytest.approx(first_token)


def test_a_wrapped_probe_takes_the_time_to_decode_its_call():
    async def go():
        prober = SimulatedProbeLatency(SimulatedProber(SCRIPT, 1.0, task_id="t"), LATENCY)
        started = anyio.current_time()
        result = await prober.probe([], "", hint_for="ignored")
        return result, anyio.current_time() - started

    result, elapsed = run_trio(go)
    assert result.call == SCRIPT[0]
    assert elapsed == pytest.approx(result.tokens / AUTHORITY.decode_tokens_per_s)


def test_the_loop_charges_model_time_only_to_wrapped_policies():
    """Sequential run: wall time is tools plus the wrapped authority's decisions; unwrapped, tools only."""
    async def go(authority):
        loop = ExecutionLoop(InProcessBackend(KVEnvironment()), authority, None,
                             config=ExecutorConfig(mode="sequential"), latency=LATENCY)
        return await loop.run()

    bare = run_trio(go, OracleAuthority(SCRIPT))
    assert [s.call for s in bare.steps] == SCRIPT
    assert bare.metrics.wall_s == pytest.approx(2.0 * len(SCRIPT)) and bare.metrics.authority_wait_s == 0.0

    wrapped = run_trio(go, SimulatedLatency(OracleAuthority(SCRIPT), LATENCY, "authority"))
    # one decision per step, then "done" (one output token)
    outputs = [estimate_tokens(call.canonical()) for call in SCRIPT] + [1]
    expected = sum(AUTHORITY.seconds(LATENCY.prompt_tokens(step), tokens) for step, tokens in enumerate(outputs))
    assert wrapped.metrics.authority_wait_s == pytest.approx(expected)
    assert wrapped.metrics.wall_s == pytest.approx(expected + 2.0 * len(SCRIPT))

