"""Toolkits: schemas generated from signatures and docstrings, and errors as observations."""

from __future__ import annotations

from typing import Literal

from agentspec import Effect, ToolCall, ToolError, Toolkit, spec_from_function, tool


class Counter(Toolkit):
    def __init__(self) -> None:
        self.n = 0

    @tool(Effect.MUTATING)
    def add(self, k: int, note: str | None = None, mode: Literal["a", "b"] = "a") -> str:
        """Add k to the counter.

        Args:
            k: How much to add,
                possibly negative.
            note: A note.
            mode: Which mode.

        Returns:
            The new value.
        """
        self.n += k
        return f"now {self.n}"

    @tool("read_only")
    def read(self) -> dict:
        """Read the counter."""
        if self.n < 0:
            raise ToolError("counter is negative")
        return {"n": self.n}

    def helper(self, value: int) -> None:
        self.n = value


def test_schema_from_signature_and_docstring():
    (add,) = [s for s in Counter().specs() if s.name == "add"]
    assert add.description == "Add k to the counter."
    assert add.effect is Effect.MUTATING
    props = add.parameters["properties"]
    assert props["k"] == {"type": "integer", "description": "How much to add, possibly negative."}
    assert props["note"] == {"type": "string", "description": "A note."}
    assert props["mode"]["enum"] == ["a", "b"] and props["mode"]["default"] == "a"
    assert add.parameters["required"] == ["k"]


def test_only_marked_methods_are_tools():
    kit = Counter()
    assert sorted(kit.tool_names()) == ["add", "read"]
    assert not kit.has_tool("helper")
    kit.call_function("helper", {"value": 5})
    assert kit.n == 5


def test_results_and_errors_become_observations():
    kit = Counter()
    assert kit.run(ToolCall(name="add", arguments={"k": 2})).content == "now 2"
    assert kit.run(ToolCall(name="read")).content == '{"n": 2}'
    missing = kit.run(ToolCall(name="add", arguments={}))
    assert missing.error and missing.content.startswith("Error: ")
    extra = kit.run(ToolCall(name="add", arguments={"k": 1, "zzz": 1}))
    assert extra.error and "zzz" in extra.content
    kit.n = -1
    assert kit.run(ToolCall(name="read")).content == "Error: counter is negative"
    unknown = kit.run(ToolCall(name="helper", arguments={"value": 1}))
    assert unknown.error and "not found" in unknown.content
    assert kit.n == -1


def test_plain_functions_become_specs():
    def lookup(city: str, days: int = 3) -> str:
        """Weather forecast.

        Args:
            city: City name.
            days: How many days.
        """
        return city

    spec = spec_from_function(lookup, effect="read_only")
    assert spec.effect is Effect.READ_ONLY
    assert spec.parameters["required"] == ["city"]
    assert spec.parameters["properties"]["days"]["default"] == 3
