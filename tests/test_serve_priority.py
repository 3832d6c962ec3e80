"""vLLM's ``priority`` across one server's models: a background request (the speculator's) runs only while no
better-priority request (the authority's) is in progress, and its tokens are those it gets alone."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from agentspec.engine.priority import PriorityGate


def virtual(fn: Any) -> Any:
    from trio.testing import MockClock

    return anyio.run(fn, backend="trio", backend_options={"clock": MockClock(autojump_threshold=0)})


def test_the_gate_holds_a_worse_priority_until_the_better_ones_have_settled() -> None:
    async def main() -> None:
        gate = PriorityGate(settle_s=0.1, clock=anyio.current_time)
        ran: dict[str, float] = {}

        async def foreground() -> None:
            with gate.live(0):
                assert not await gate.turn(0)  # the default priority never waits
                await anyio.sleep(1.0)
            ran["foreground ended"] = anyio.current_time()

        async def speculator(priority: int, name: str) -> None:
            with gate.live(priority):
                await gate.arrive(priority)
                ran[name] = anyio.current_time()
                await anyio.sleep(0.5)

        start = anyio.current_time()
        async with anyio.create_task_group() as group:
            group.start_soon(speculator, 1, "priority 1")
            await anyio.sleep(0.05)  # the foreground request reaches the server a little later: still in time
            group.start_soon(foreground)
            group.start_soon(speculator, 2, "priority 2")
        elapsed = {name: round(at - start, 3) for name, at in ran.items()}
        # Priority 1 waits for the foreground and its settle time; priority 2 for priority 1 too.
        assert elapsed == {"foreground ended": 1.05, "priority 1": 1.15, "priority 2": 1.75}
        assert gate.must_wait(1) == 0 and gate.must_wait(-5) == 0

    virtual(main)


def _model(name: str) -> Any:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from agentspec.engine.model import load_model
    from agentspec.errors import ConfigError
    from agentspec.models.registry import resolve

    try:
        return load_model(resolve(name))
    except ConfigError as exc:
        pytest.skip(f"{name} is not available here: {exc}")


async def _tokens(engine: Any, prompt: list[int], priority: int, times: list[float] | None = None) -> list[int]:
    from agentspec.engine.generation import SamplingParams

    out: list[int] = []
    async for step, _finish in engine.generate(prompt, SamplingParams(max_tokens=12, ignore_eos=True),
                                               priority=priority):
        out.extend(t.id for t in step)
        if times is not None:
            times.append(anyio.current_time())
    return out


def test_two_models_with_one_gate_the_background_one_waits_and_decodes_as_alone() -> None:
    from agentspec.engine.model import load_model
    from agentspec.engine.scheduler import Engine, PrefixCache
    from agentspec.models.registry import resolve

    lm = _model("smollm2-135m")
    other = load_model(resolve("smollm2-135m"), linear="stock")  # a second model object, as a second --model is
    gate = PriorityGate()
    authority = Engine(lm, prefix_cache=PrefixCache(max_entries=0), gate=gate)
    speculator = Engine(other, prefix_cache=PrefixCache(max_entries=0), gate=gate)
    prompts = [lm.encode("The three primary colours are"), lm.encode("def add(a, b):")]
    alone = [anyio.run(_tokens, authority, prompts[0], 0), anyio.run(_tokens, speculator, prompts[1], 1)]
    times: dict[str, list[float]] = {"authority": [], "speculator": []}
    results: list[list[int]] = [[], []]

    async def main() -> None:
        async def one(i: int, engine: Engine, priority: int, name: str) -> None:
            results[i] = await _tokens(engine, prompts[i], priority, times[name])

        async with anyio.create_task_group() as group:
            group.start_soon(one, 1, speculator, 1, "speculator")  # sent first, and still second
            group.start_soon(one, 0, authority, 0, "authority")

    anyio.run(main)
    assert results == alone
    assert times["speculator"][0] > times["authority"][-1]
    # The authority had the cores to itself: no step of its ran beside the speculator's.
    assert authority.stats.overlapped_steps == 0 and authority.stats.priority_waits == 0
    assert speculator.stats.priority_waits >= 1 and speculator.stats.active == 0


def test_a_background_request_cancelled_while_held_leaves_the_engine_serving() -> None:
    from agentspec.engine.scheduler import Engine, PrefixCache

    lm = _model("smollm2-135m")
    gate = PriorityGate()
    engine = Engine(lm, prefix_cache=PrefixCache(max_entries=0), gate=gate)
    prompt = lm.encode("Once upon a time, a small robot")

    async def main() -> list[int]:
        with gate.live(0):  # a foreground request in progress elsewhere on the server
            with anyio.move_on_after(0.5) as scope:
                await _tokens(engine, prompt, 1)
            assert scope.cancelled_caught
        assert engine.stats.active == 0 and engine._live == 0  # nothing counted for the cancelled request
        with anyio.fail_after(60):  # the engine still steps: a foreground request is served at once
            return await _tokens(engine, prompt, 0)

    assert len(anyio.run(main)) == 12


def test_the_server_takes_priority_and_reports_the_waits() -> None:
    openai = pytest.importorskip("openai")
    from agentspec.serve.server import ServerThread, load_engines

    _model("smollm2-135m")
    engines = load_engines(["smollm2-135m"])
    with ServerThread(engines) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="x")
        messages = [{"role": "user", "content": "Say hi"}]
        plain = client.chat.completions.create(model="smollm2-135m", messages=messages, max_tokens=8,
                                               temperature=0)
        low = client.chat.completions.create(model="smollm2-135m", messages=messages, max_tokens=8, temperature=0,
                                             extra_body={"priority": 1})
        assert low.choices[0].message.content == plain.choices[0].message.content
        with pytest.raises(openai.BadRequestError, match="priority"):
            client.chat.completions.create(model="smollm2-135m", messages=messages, extra_body={"priority": "high"})
    (engine,) = engines.values()
    assert engine.gate is not None and engine.stats.priority_waits == 1  # its arrival's settle time
