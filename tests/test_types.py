"""Canonical tool-call equality, effect parsing and ToolSpec construction."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from agentspec import Effect, ToolCall, ToolSpec

json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4), max_leaves=12)
arguments = st.dictionaries(st.text(), json_values, max_size=5)


@given(arguments)
def test_key_order_does_not_matter(args):
    shuffled = dict(reversed(list(args.items())))
    assert ToolCall(name="t", arguments=args) == ToolCall(name="t", arguments=shuffled)
    assert hash(ToolCall(name="t", arguments=args)) == hash(ToolCall(name="t", arguments=shuffled))


@given(arguments)
def test_canonical_form_round_trips_through_json(args):
    call = ToolCall(name="t", arguments=args)
    again = ToolCall(name="t", arguments=json.loads(json.dumps(args)))
    assert call == again
    assert json.loads(call.canonical()) == {"name": "t", "arguments": args}


@given(st.integers(min_value=-(10**6), max_value=10**6))
def test_int_and_float_of_same_value_differ(n):
    assert ToolCall(name="t", arguments={"x": n}) != ToolCall(name="t", arguments={"x": float(n)})
    assert ToolCall(name="t", arguments={"x": n}) == ToolCall(name="t", arguments={"x": n})


def test_bool_is_not_an_int():
    assert ToolCall(name="t", arguments={"x": True}) != ToolCall(name="t", arguments={"x": 1})


def test_ids_and_names():
    a = ToolCall(name="t", arguments={"x": 1}, id="a")
    assert a == ToolCall(name="t", arguments={"x": 1}, id="b")
    assert a != ToolCall(name="u", arguments={"x": 1}, id="a")
    assert len({a, ToolCall(name="t", arguments={"x": 1})}) == 1


def test_non_finite_numbers_are_rejected():
    with pytest.raises(ValidationError):
        ToolCall(name="t", arguments={"x": float("nan")})


@pytest.mark.parametrize(
    ("raw", "effect"),
    [("read_only", Effect.READ_ONLY), ("IDEMPOTENT", Effect.IDEMPOTENT), ("external", Effect.EXTERNAL), ("weird", Effect.MUTATING), (None, Effect.MUTATING)],
)
def test_unknown_effect_fails_closed(raw, effect):
    assert Effect.parse(raw) is effect
    assert ToolSpec(name="t", effect=raw).effect is effect


def test_default_effect_is_mutating():
    assert ToolSpec(name="t").effect is Effect.MUTATING


@pytest.mark.parametrize(
    ("hints", "forkable", "effect"),
    [
        # The MCP defaults (readOnlyHint=false, destructiveHint=true, openWorldHint=true): never speculated.
        ({}, False, Effect.EXTERNAL),
        (None, False, Effect.EXTERNAL),
        ({"destructiveHint": False, "openWorldHint": False}, False, Effect.EXTERNAL),
        ({"idempotentHint": True}, False, Effect.EXTERNAL),
        ({"readOnlyHint": "yes"}, False, Effect.EXTERNAL),  # only the JSON boolean true counts
        ({"readOnlyHint": True}, False, Effect.READ_ONLY),
        ({"readOnlyHint": True, "openWorldHint": True}, False, Effect.READ_ONLY),
        # A server inside an agentspec sandbox: its state is forked, so state-changing tools run in forks.
        ({}, True, Effect.MUTATING),
        ({"idempotentHint": True}, True, Effect.IDEMPOTENT),
        ({"readOnlyHint": True}, True, Effect.READ_ONLY),
    ],
)
def test_mcp_annotations(hints, forkable, effect):
    tool = {"name": "t", "description": "d", "inputSchema": {"type": "object"}}
    if hints is not None:
        tool["annotations"] = hints
    spec = ToolSpec.from_mcp(tool, forkable=forkable)
    assert spec.effect is effect
    assert spec.openai_schema()["function"]["name"] == "t"
