"""Pure pieces of the server: text assembly, tool-call hold-back, the prefix cache, request validation."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from agentspec.models import extract_tool_calls
from agentspec.serve.engine import PrefixCache
from agentspec.serve.protocol import APIError, parse_request
from agentspec.serve.text import TextAssembler, ToolCallHoldback


def test_utf8_split_across_tokens_and_stops_spanning_tokens() -> None:
    text = TextAssembler(["STOP"])  # holds back len("STOP") - 1 characters until they are decided
    euro = "€".encode()
    assert text.feed(euro[:1]) == "" and text.feed(euro[1:]) == ""
    assert text.feed(b" abc") == "€ " and text.feed(b" ST") == "abc"
    assert text.feed(b"OP tail") == " " and text.stopped
    assert text.text == "€ abc " and text.feed(b"more") == "" and text.finish() == ""


def test_without_stops_everything_is_released_at_once() -> None:
    text = TextAssembler([])
    assert text.feed(b"Hello") == "Hello" and text.finish() == ""


def _split(pieces: list[str]) -> tuple[str, str]:
    holdback = ToolCallHoldback()
    sent = "".join(holdback.feed(piece) for piece in pieces)
    return sent, holdback.held


@pytest.mark.parametrize(
    ("pieces", "sent", "held"),
    [
        (["Hello", " world"], "Hello world", ""),
        (["Sure. <tool", "_call>\n{", '"name": "f"}'], "Sure. ", '<tool_call>\n{"name": "f"}'),
        (["  ", "```js", "on\n{}"], "  ", "```json\n{}"),
        ([" {", '"name"'], "", ' {"name"'),
        (["Use `code` <", "b>"], "Use `code` <b>", ""),
    ],
)
def test_tool_call_holdback(pieces: list[str], sent: str, held: str) -> None:
    assert _split(pieces) == (sent, held)


def test_fenced_and_tagged_calls_are_parsed_by_the_shared_parser() -> None:
    fenced = '```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```'
    tagged = '<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}\n</tool_call>'
    assert [c["name"] for c in extract_tool_calls(fenced)[0] + extract_tool_calls(tagged)[0]] == ["get_weather", "get_time"]


def _layers(n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(np.zeros((1, 1, n, 2)), np.zeros((1, 1, n, 2)))]


def test_prefix_cache_finds_the_longest_prefix_and_keeps_one_token_to_compute() -> None:
    cache = PrefixCache(max_entries=2, max_tokens=100)
    assert cache.lookup([1, 2, 3]) == (0, [])
    cache.store([1, 2, 3, 4], _layers(4))
    cache.store([1, 2, 9], _layers(3))
    assert cache.lookup([1, 2, 3, 4, 5])[0] == 4
    assert cache.lookup([1, 2, 3, 4])[0] == 3  # the last prompt token is always computed
    assert cache.lookup([7])[0] == 0
    cache.store([1, 2, 3, 4, 5, 6], _layers(6))  # supersedes [1, 2, 3, 4]
    assert len(cache) == 2
    cache.store([5, 5], _layers(2))  # evicts the least recently used
    assert [entry.tokens.tolist() for entry in cache._entries] == [[5, 5], [1, 2, 3, 4, 5, 6]]


def test_prefix_cache_token_budget() -> None:
    cache = PrefixCache(max_entries=8, max_tokens=10)
    cache.store(list(range(6)), _layers(6))
    cache.store(list(range(100, 106)), _layers(6))
    assert len(cache) == 1 and cache.lookup(list(range(100, 107)))[0] == 6


@pytest.mark.parametrize(
    "body",
    [
        b"[]",
        b'{"model": "m"}',
        b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "n": 2}',
        b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "stop": ["a", "b", "c", "d", "e"]}',
        b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "bad name"}}]}',
    ],
)
def test_request_validation_is_a_400(body: bytes) -> None:
    with pytest.raises(APIError) as caught:
        parse_request(body)
    assert caught.value.status == 400 and caught.value.body["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    "module",
    ["agentspec.serve", "agentspec.serve.app", "agentspec.serve.engine", "agentspec.serve.grammar",
     "agentspec.serve.completions", "agentspec.serve.protocol", "agentspec.serve.text", "agentspec.serve.prompt",
     "agentspec.serve.server", "agentspec.serve.lifeline", "agentspec.models.registry", "agentspec.models.local",
     "agentspec.models.embedded"],
)
def test_all_names_exist(module: str) -> None:
    loaded = importlib.import_module(module)
    for name in loaded.__all__:
        assert hasattr(loaded, name), f"{module}.{name}"
