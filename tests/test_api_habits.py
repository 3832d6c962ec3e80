"""The Python API as the README shows it (issue 39, item 6): the toolkit object a user passes in is the live state
after speculative commits, a latency model is named as the executor names it, and the public names are there."""

from __future__ import annotations

import inspect
from typing import Any

import anyio
import pytest

import agentspec
from agentspec import Decision, Effect, Executor, LatencyModel, ModelConfig, Policy, SimulatedLatency, Toolkit, tool
from agentspec.errors import ConfigError
from agentspec.types import ToolCall


class Inventory(Toolkit):
    def __init__(self) -> None:
        self.stock = {"apple": 3}
        self.orders: list[str] = []

    @tool(Effect.READ_ONLY)
    def count(self, item: str) -> int:
        """How many of an item are in stock."""
        return self.stock.get(item, 0)

    @tool("mutating")
    def order(self, item: str) -> str:
        """Take one item out of stock."""
        self.stock[item] -= 1
        self.orders.append(item)
        return f"ordered {item}"


CALLS = [ToolCall(name="count", arguments={"item": "apple"}), ToolCall(name="order", arguments={"item": "apple"}),
         ToolCall(name="order", arguments={"item": "apple"})]


class Agent:
    """Makes CALLS in order, slowly enough for the speculator to run ahead, then answers."""

    def __init__(self, pause: float) -> None:
        self.pause = pause

    async def decide(self, history: Any) -> Decision:
        await anyio.sleep(self.pause)
        if len(history) < len(CALLS):
            return Decision(call=CALLS[len(history)])
        return Decision(call=None, final={"answer": "done"})


@pytest.mark.parametrize("mode", ["sequential", "sa", "smc"])
def test_the_users_own_toolkit_is_the_live_state_after_the_run(mode: str) -> None:
    inventory = Inventory()

    async def main() -> Any:
        speculator = Agent(0.0) if mode != "sequential" else None
        return await Executor(inventory, authority=Agent(0.2), speculator=speculator, mode=mode).run("order two")

    result = anyio.run(main)
    assert [step.call.name for step in result.steps] == ["count", "order", "order"]
    if mode != "sequential":
        assert any(step.source != "authority" for step in result.steps)  # commits came from forks
    assert inventory.stock == {"apple": 1} and inventory.orders == ["apple", "apple"]


def test_a_policy_is_the_protocol_the_readme_shows() -> None:
    assert isinstance(Agent(0.0), Policy)


def test_simulated_latency_takes_a_preset_name_as_the_executor_does() -> None:
    timed = SimulatedLatency(Agent(0.0), "smc-paper")
    assert isinstance(timed.latency, LatencyModel) and timed.latency == LatencyModel.load("smc-paper")
    assert agentspec.LatencyModel is LatencyModel
    with pytest.raises(ConfigError, match="neither a preset"):
        SimulatedLatency(Agent(0.0), "no-such-preset")


def test_for_role_does_not_print_the_environment_in_its_signature(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTSPEC_AGENT_BASE_URL", "http://127.0.0.1:9/v1")
    assert "environ" not in str(inspect.signature(ModelConfig.for_role))
    assert ModelConfig.for_role("agent", "m").base_url == "http://127.0.0.1:9/v1"  # still read, at call time
    assert ModelConfig.for_role("agent", "m", env={"OPENAI_BASE_URL": "http://127.0.0.1:8/v1"}).base_url.endswith(
        ":8/v1")
