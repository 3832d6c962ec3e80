"""SPORK: probes while the authority decodes, gated early dispatch into forks, commit on a match."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_executor_safety import SCRIPT, calls, replay, run_trio
from toy_env import KVEnvironment

from agentspec.runtime.config import ExecutorConfig, SporkConfig
from agentspec.runtime.cost_model import CostModel
from agentspec.runtime.executor import ExecutionLoop
from agentspec.runtime.latency import LatencyModel, ModelLatency, ToolLatency
from agentspec.runtime.metrics import ExecutionMetrics, Timeline
from agentspec.runtime.modes import Mode
from agentspec.runtime.policies.protocol import Decision
from agentspec.runtime.policies.scripted import OracleAuthority
from agentspec.runtime.probe import ProbeResult, confidence, parse_probe, schema_errors
from agentspec.runtime.simulated import SimulatedLatency
from agentspec.runtime.spork import Spork
from agentspec.snapshot import InProcessBackend, InProcessSandbox
from agentspec.types import ToolCall, ToolSpec

LATENCY = LatencyModel(
    authority=ModelLatency(prefill_tokens_per_s=1e9, decode_tokens_per_s=10.0, reasoning_tokens=100),
    speculator=ModelLatency(prefill_tokens_per_s=1e9, decode_tokens_per_s=100.0),
    tool=ToolLatency(fixed_s=3.0),
)


@dataclass
class ScriptedProber:
    """Right or wrong by a fixed rule, with a given confidence and delay."""

    script: list[ToolCall]
    right: bool = True
    conf: float = 0.97
    delay: float = 0.0
    calls: int = 0

    async def probe(self, history, partial, hint_for=None):
        self.calls += 1
        await anyio.sleep(self.delay)
        truth = self.script[len(history)] if len(history) < len(self.script) else None
        call = truth if self.right else ToolCall(name="put", arguments={"key": "zz", "value": 9})
        return ProbeResult(call, self.conf, 10)


@dataclass
class SlowSandboxBackend(InProcessBackend):
    """Forks whose tools take a while (and notice when they are cancelled)."""

    cancelled: list[str] = field(default_factory=list)

    def __init__(self, live) -> None:
        super().__init__(live)
        self.cancelled = []

    async def fork(self, snapshot):
        box = await super().fork(snapshot)
        backend = self

        class Slow(InProcessSandbox):
            async def execute(self, call, requestor="assistant"):
                try:
                    await anyio.sleep(50)
                except anyio.get_cancelled_exc_class():
                    backend.cancelled.append(call.name)
                    raise
                return await super().execute(call, requestor)

        return Slow(env=box.env, lineage=box.lineage, token=box.token)


def simulated_oracle(script, latency=LATENCY, spork=None):
    """The oracle taking ``latency``'s authority time, streamed in SPORK's probe steps."""
    return SimulatedLatency(OracleAuthority(script), latency or LatencyModel(), "authority", (spork or SporkConfig()).probe_every)


def run_loop(prober, *, mode="sequential", backend=None, spork=None, latency=LATENCY):
    async def go():
        live = backend or InProcessBackend(KVEnvironment())
        config = spork or SporkConfig(cost_model=False)
        loop = ExecutionLoop(live, simulated_oracle(SCRIPT, latency, config), None, config=ExecutorConfig(mode=mode),
                             latency=latency, prober=prober, spork=config)
        return live, await loop.run()

    return run_trio(go)


@dataclass
class BareHost:
    """The smallest loop SPORK can work with: only what :class:`agentspec.runtime.spork.SporkHost` declares."""

    backend: InProcessBackend
    metrics: ExecutionMetrics = field(default_factory=ExecutionMetrics)
    timeline: Timeline = field(default_factory=Timeline)
    committed: list = field(default_factory=list)

    def chain_head(self):
        return None

    def effect(self, name):
        return self.backend.effect(name)

    def since_start(self, at):
        return at

    async def run_tool(self, execute, call, lane):
        return await execute(call)

    async def commit(self, drafts, source, confirmed=None, macro_id=None):
        await self.backend.commit(drafts[-1].sandbox)
        self.committed.append((confirmed, source, drafts[-1].observation.content))


def test_spork_needs_nothing_of_the_loop_but_its_declared_host():
    async def go():
        host = BareHost(InProcessBackend(KVEnvironment()))
        spork = Spork(host, ScriptedProber(SCRIPT), SporkConfig(cost_model=False))
        async with anyio.create_task_group() as group:
            decision = await spork.decide(simulated_oracle(SCRIPT), [], group)
            hit = await spork.settle(decision.call)
        return host, decision, hit

    host, decision, hit = run_trio(go)
    assert hit and host.committed == [(SCRIPT[0], "spork", "ok")]
    assert host.backend.live.state["journal"] == ["put a 1"]  # the dispatched fork became live, run once
    assert host.metrics.commits_spork == 1 and [e.lane for e in host.timeline.events] == ["probe"]


def test_parse_mode():
    assert Mode.parse("spork") == Mode(base="sequential", spork=True)
    assert Mode.parse("smc+spork") == Mode(base="smc", spork=True) and Mode.parse("smc+spork").name == "smc+spork"
    assert Mode.parse("sa") == Mode(base="sa") and Mode.parse("spork").name == "spork"
    with pytest.raises(ValueError, match="unknown mode 'fast\\+spork'"):
        Mode.parse("fast+spork")


def test_hits_commit_without_re_execution():
    backend, result = run_loop(ScriptedProber(SCRIPT))
    sources = [s.source for s in result.steps]
    assert sources == ["spork"] * 5 + ["authority"]  # notify is external: never dispatched early
    assert backend.live.state == replay(result.steps)
    assert backend.live.state["journal"].count("incr a") == 1  # ran once, in the fork that became live
    m = result.metrics
    assert m.early_dispatches == 5 and m.commits_spork == 5 and m.live_executions == 1
    assert m.time_overlapped_s > 0
    baseline = run_loop(None)[1]
    assert result.metrics.wall_s < baseline.metrics.wall_s


def test_misses_leave_no_side_effect_and_cancel_the_tool():
    backend = SlowSandboxBackend(KVEnvironment())
    _, result = run_loop(ScriptedProber(SCRIPT, right=False), backend=backend)
    assert [s.source for s in result.steps] == ["authority"] * 6
    assert "put zz 9" not in backend.live.state["journal"]
    assert backend.live.state == replay(result.steps)
    assert backend.cancelled and set(backend.cancelled) == {"put"}  # the wrong dispatch was stopped, not forgotten
    assert result.metrics.wasted_tool_calls == result.metrics.early_dispatches > 0


def test_the_gate_decides():
    _, low = run_loop(ScriptedProber(SCRIPT, conf=0.5))
    assert low.metrics.early_dispatches == 0 and low.metrics.gated_out > 0
    _, per_tool = run_loop(ScriptedProber(SCRIPT, conf=0.5), spork=SporkConfig(cost_model=False, per_tool_gate={"put": 0.4}))
    assert [s.source for s in per_tool.steps][0] == "spork" and per_tool.metrics.early_dispatches == 1


def test_invalid_probes_are_not_dispatched():
    @dataclass
    class Bad:

        async def probe(self, history, partial, hint_for=None):
            return ProbeResult(ToolCall(name="put", arguments={"key": "a"}), 0.99, 5)  # missing `value`

    _, result = run_loop(Bad())
    assert result.metrics.early_dispatches == 0 and result.metrics.invalid_probes > 0


def test_slow_probes_never_block_the_authority():
    _, fast = run_loop(None)
    prober = ScriptedProber(SCRIPT, delay=10_000)
    _, slow = run_loop(prober)
    assert prober.calls > 0
    assert slow.metrics.wall_s == pytest.approx(fast.metrics.wall_s)
    assert slow.metrics.authority_wait_s == pytest.approx(fast.metrics.authority_wait_s)


def test_cost_model_stops_probing_when_it_does_not_pay():
    model = CostModel(contention=1.0)
    assert model.should_probe()  # optimistic before data
    for _ in range(20):
        model.observe_probe(2.0)
        model.observe_outcome("put", False, 0.1)
        model.observe_tool("put", 0.05)
    assert not model.should_probe() and not model.should_dispatch("put")
    terms = model.report()["agent"]
    assert terms["saved_s"] < terms["cost_s"]
    good = CostModel(contention=0.0)
    for _ in range(20):
        good.observe_probe(0.5)
        good.observe_outcome("put", True, 5.0)
        good.observe_tool("put", 3.0)
    assert good.should_probe() and good.should_dispatch("put")
    assert good.terms("put")["hit_rate"] == pytest.approx(21 / 22)


def test_confidence_and_parsing():
    assert confidence([-5.0, -0.01, -0.05]) == pytest.approx(pytest.approx(2.718281828 ** -0.05))
    assert confidence([-1.0]) == 0.0
    assert parse_probe('```json\n{"name": "', 'put", "arguments": {"key": "a", "value": 1}}\n```') == ToolCall(
        name="put", arguments={"key": "a", "value": 1})
    assert parse_probe('```json\n{"name": "', 'put", "arguments": {"key": "a", "value": 1}}') is not None  # cut off
    assert parse_probe('```json\n{"name": "', 'put", "argu') is None
    spec = ToolSpec(name="put", parameters={"type": "object", "properties": {"key": {"type": "string"}, "value": {"type": "integer"}}, "required": ["key", "value"]})
    assert schema_errors({"key": "a", "value": 1}, spec) == []
    assert schema_errors({"key": "a", "value": True}, spec) == ["value should be integer"]
    assert schema_errors({"key": "a", "value": 1, "x": 2}, spec) == ["unknown argument x"]
    assert schema_errors({"key": "a"}, spec) == ["missing value"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=st.lists(calls, min_size=1, max_size=8), seed=st.integers(0, 10**6), mode=st.sampled_from(["spork", "sa+spork", "smc+spork"]),
       p_hit=st.floats(0, 1), gate=st.floats(0.5, 1.0), probe_delay=st.floats(0, 30), decode=st.floats(1, 100))
def test_random_timings_keep_live_state_equal_to_the_replay(script, seed, mode, p_hit, gate, probe_delay, decode):
    rng = random.Random(seed)
    base = Mode.parse(mode).base

    @dataclass
    class Noisy:

        async def probe(self, history, partial, hint_for=None):
            await anyio.sleep(rng.random() * probe_delay)
            truth = script[len(history)] if len(history) < len(script) else None
            call = truth if (truth is not None and rng.random() < p_hit) else rng.choice(script)
            return ProbeResult(call, rng.random(), 8)

    @dataclass
    class Spec:

        async def decide(self, history):
            await anyio.sleep(rng.random() * 5)
            return Decision(call=script[len(history)] if len(history) < len(script) and rng.random() < 0.7 else rng.choice(script))

    latency = LatencyModel(authority=ModelLatency(prefill_tokens_per_s=1e9, decode_tokens_per_s=decode, reasoning_tokens=50),
                           speculator=ModelLatency(prefill_tokens_per_s=1e9, decode_tokens_per_s=100.0),
                           tool=ToolLatency(fixed_s=rng.random() * 5))

    async def go():
        backend = InProcessBackend(KVEnvironment())
        spork = SporkConfig(gate=gate, probe_every=rng.randint(1, 30), cost_model=rng.random() < 0.5)
        loop = ExecutionLoop(backend, simulated_oracle(script, latency, spork), Spec() if base != "sequential" else None,
                             config=ExecutorConfig(mode=base, max_errors=100), latency=latency, prober=Noisy(), spork=spork)
        return backend, await loop.run()

    backend, result = run_trio(go)
    assert backend.live.state == replay(result.steps)
    assert [s.call for s in result.steps] == script  # no macros: exactly the authority's trajectory
    assert all(s.source == "authority" for s in result.steps if s.call.name == "notify")


def test_llm_prober_over_http_dispatches_before_the_authority_finishes():
    """The API's `spork` mode against a real HTTP endpoint (scripted test double): the authority streams slowly
    with some text first; the probe (same endpoint, continue_final_message) names the call with confident logprobs."""
    from scripted_openai_server import ScriptedOpenAIServer

    from agentspec import Executor, ModelConfig, Toolkit, tool
    from agentspec.runtime.latency import LatencyModel, ToolLatency

    class Counter(Toolkit):
        def __init__(self) -> None:
            self.n = 0

        @tool("mutating")
        def bump(self, by: int) -> str:
            """Add to the counter.

            Args:
                by: How much.
            """
            self.n += by
            return f"n={self.n}"

    def responder(request):
        steps = sum(1 for m in request["messages"] if m["role"] == "tool")
        if request.get("continue_final_message"):
            assert request["messages"][-1]["role"] == "assistant"
            text = 'bump", "arguments": {"by": 2}}\n```' if steps == 0 else 'done", "arguments": {}}\n```'
            logprobs = [{"token": t, "logprob": -0.01, "top_logprobs": []} for t in [text[:4], text[4:]]]
            return {"content": text, "logprobs": logprobs}
        if steps == 0:
            return {"content": "Let me think about this carefully first. " * 4, "tool_calls": [{"name": "bump", "arguments": {"by": 2}}],
                    "chunk_delay_s": 0.05}
        return {"tool_calls": [{"name": "done", "arguments": {"answer": "2"}}]}

    counter = Counter()
    with ScriptedOpenAIServer(responder, models=("m",)) as srv:
        executor = Executor(counter, authority=ModelConfig(base_url=srv.base_url, model="m"), mode="spork",
                            latency=LatencyModel(tool=ToolLatency(fixed_s=0.3)), spork=SporkConfig(probe_every=4, cost_model=False))
        result = executor.run_sync("bump by two")
        probes = [r for r in srv.requests if r.get("continue_final_message")]
    assert result.answer == "2"
    assert [s.source for s in result.steps] == ["spork"]
    assert executor.backend.live.toolkit.n == 2
    assert probes and probes[0]["logprobs"] is True and probes[0]["max_tokens"] <= 64
    assert result.result.metrics.time_overlapped_s > 0


def test_probes_of_a_real_served_model_share_its_prefix_and_change_nothing():
    """smollm2 behind `agentspec serve`: probes reuse the authority's cached prompt; the run is the sequential one."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from local_models import served

    from agentspec.models import ModelClient, ModelConfig
    from agentspec.runtime.policies.llm import LLMPolicy
    from agentspec.runtime.probe import LLMProber

    model = "smollm2-135m"
    prompt = "You keep a key-value store. Task: put 1 under key a, then increment a, then call done."

    async def run(spork: bool):
        async with ModelClient(ModelConfig(base_url=server.base_url, model=model, timeout_s=300)) as client:
            backend = InProcessBackend(KVEnvironment())
            tools = backend.tool_specs() + [ToolSpec(name="done", description="Finish.", parameters={"type": "object", "properties": {}})]
            policy = LLMPolicy(client, prompt, tools, tool_choice="auto", max_tokens=24)
            prober = LLMProber.of(policy, opening='<tool_call>\n{"name": "', max_tokens=16) if spork else None
            loop = ExecutionLoop(backend, policy, None, config=ExecutorConfig(mode="sequential", max_calls=1),
                                 prober=prober, spork=SporkConfig(probe_every=8, cost_model=False))
            return backend, await loop.run()

    with served(model) as server:
        plain_backend, plain = anyio.run(run, False)
        spork_backend, probed = anyio.run(run, True)
    assert [(s.call, s.observation.content) for s in probed.steps] == [(s.call, s.observation.content) for s in plain.steps]
    assert spork_backend.live.state == plain_backend.live.state
    m = probed.metrics
    assert m.probes >= 1 and m.probe_prompt_tokens > 0
    assert m.probe_cached_tokens >= 0.8 * m.probe_prompt_tokens  # the shared prompt is not computed again


def test_probe_prefix_never_doubles_the_call_opening():
    from agentspec.runtime.probe import FENCED_OPENING, HERMES_OPENING, probe_prefix

    assert probe_prefix("Check a.\n", FENCED_OPENING) == 'Check a.\n```json\n{\n  "name": "'
    assert probe_prefix('Check a.\n```json\n{"na', FENCED_OPENING) == 'Check a.\n```json\n{\n  "name": "'
    assert probe_prefix("<think>\nhmm", HERMES_OPENING) == '<think>\nhmm</think>\n\n<tool_call>\n{"name": "'
    assert probe_prefix("<think>\nhmm</think>\n\n<tool_call>\n{", HERMES_OPENING) == \
        '<think>\nhmm</think>\n\n<tool_call>\n{"name": "'


def test_llm_probes_fork_the_authority_request_and_name_it_for_hints():
    """Over HTTP: the probe continues the authority's own unfinished answer with its tools, and hints its request."""
    import re

    from scripted_openai_server import ScriptedOpenAIServer

    from agentspec.models import ModelClient, ModelConfig
    from agentspec.runtime.policies.llm import LLMPolicy
    from agentspec.runtime.probe import FENCED_OPENING, LLMProber

    call_text = 'get", "arguments": {"key": "a"}}\n```'
    sure = [{"token": t, "logprob": -0.01, "bytes": list(t.encode()), "top_logprobs": []}
            for t in re.findall(r"\s*\S+|\s+", call_text)]

    def responder(request):
        messages = request["messages"]
        if request.get("agentspec_hint_for"):
            return {"content": call_text, "logprobs": sure}
        if not any(m["role"] == "tool" for m in messages):
            return {"content": "I will read key a first, then decide what to change.",
                    "tool_calls": [{"name": "get", "arguments": {"key": "a"}}], "chunk_delay_s": 0.05}
        return {"content": "Nothing else to do.", "tool_calls": [{"name": "done", "arguments": {}}]}

    async def go(srv):
        async with ModelClient(ModelConfig(base_url=srv.base_url, model="scripted-model")) as client:
            backend = InProcessBackend(KVEnvironment({"a": 5}))
            tools = backend.tool_specs() + [ToolSpec(name="done", description="Finish.")]
            policy = LLMPolicy(client, "Keep the store.", tools, tool_choice="auto", answer_prefix="Thought:")
            loop = ExecutionLoop(backend, policy, None, config=ExecutorConfig(mode="sequential", max_calls=3),
                                 prober=LLMProber.of(policy), spork=SporkConfig(probe_every=3, cost_model=False))
            return backend, await loop.run()

    with ScriptedOpenAIServer(responder) as srv:
        backend, result = anyio.run(go, srv)
        requests = list(srv.requests)
    assert [s.source for s in result.steps] == ["spork"]
    assert result.metrics.commits_spork == 1 and result.metrics.live_executions == 0  # ran once, early, in a fork
    assert result.steps[0].observation.content == backend.live.execute(result.steps[0].call).content
    authority = [r for r in requests if r.get("agentspec_request_id")]
    probes = [r for r in requests if r.get("agentspec_hint_for")]
    assert authority and probes
    first = authority[0]
    assert first["messages"][-1] == {"role": "assistant", "content": "Thought:"} and first["continue_final_message"]
    probe = probes[0]
    assert probe["agentspec_hint_for"] == first["agentspec_request_id"]
    assert probe["continue_final_message"] is True and probe["add_generation_prompt"] is False
    assert probe["tools"] == first["tools"] and probe["messages"][:-1] == first["messages"][:-1]
    continued = probe["messages"][-1]["content"]
    assert continued.startswith("Thought:") and continued.endswith(FENCED_OPENING)


def test_the_cost_model_learns_tool_latency_from_every_execution():
    """Live executions teach it too: a run whose probes never dispatch still knows what its tools cost."""
    async def go():
        loop = ExecutionLoop(InProcessBackend(KVEnvironment()), simulated_oracle(SCRIPT), None,
                             config=ExecutorConfig(mode="sequential"), latency=LATENCY,
                             prober=ScriptedProber(SCRIPT, conf=0.1), spork=SporkConfig())
        await loop.run()
        return loop.spork.report()

    report = run_trio(go)
    assert report["tools"]["put"]["tool_s"] == pytest.approx(3.0)
    assert report["agent"]["tool_s"] == pytest.approx(3.0)
