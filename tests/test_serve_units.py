"""Pure pieces of the server: text assembly, tool-call hold-back, the prefix cache, request validation."""

from __future__ import annotations

import ast
import importlib
from contextlib import aclosing
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import numpy as np
import pytest

from agentspec.decoding.serving import RequestContext
from agentspec.engine.generation import Generator, SamplingParams, TokenOut, TokenStream
from agentspec.engine.grammar import GrammarConstraint
from agentspec.engine.kv_cache import Reuse
from agentspec.engine.model import LocalModel
from agentspec.engine.plain import PlainGenerator
from agentspec.engine.scheduler import Engine, PrefixCache
from agentspec.models import extract_tool_calls
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


def test_prefix_cache_keeps_what_fits_its_bytes_and_always_the_newest() -> None:
    entry = int(_layers(6)[0][0].nbytes) * 2  # one 6-token entry's keys and values
    cache = PrefixCache(max_bytes=2 * entry)
    for start in (0, 100, 200):
        cache.store(list(range(start, start + 6)), _layers(6))
    assert [e.tokens[0] for e in cache._entries] == [200, 100]  # the oldest went: three would not fit
    tight = PrefixCache(max_bytes=1)
    tight.store(list(range(6)), _layers(6))  # larger than the budget, but the newest entry stays
    assert len(tight) == 1


def test_a_prompt_answered_again_keeps_one_entry_and_other_prompts_stay() -> None:
    prompt = list(range(100))  # a long shared prompt; answers and later turns differ only at the end
    cache = PrefixCache()
    cache.store(prompt + [7, 7], _layers(102))
    cache.store(prompt + [8, 8, 8], _layers(103))  # the same prompt answered again: replaces the first
    cache.store(prompt[:40] + list(range(500, 560)), _layers(100))  # another ticket after a common policy: kept
    assert [e.tokens[-1] for e in cache._entries] == [559, 8]
    assert cache.lookup(prompt + [1])[0] == 100


def test_serve_takes_a_prefix_cache_budget() -> None:
    from agentspec.cli import build_parser
    from agentspec.errors import UsageError

    assert build_parser().parse_args(["serve", "--model", "m", "--prefix-cache-gb", "1.5"]).prefix_cache_gb == 1.5
    with pytest.raises(UsageError, match="--prefix-cache-gb: must be a number >= 0"):
        build_parser().parse_args(["serve", "--model", "m", "--prefix-cache-gb", "-1"])


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
    ["agentspec.serve", "agentspec.serve.app", "agentspec.engine.scheduler", "agentspec.engine.grammar",
     "agentspec.serve.completions", "agentspec.serve.protocol", "agentspec.serve.text", "agentspec.serve.prompt",
     "agentspec.serve.server", "agentspec.serve.lifeline", "agentspec.serve.hints", "agentspec.serve.schema_check",
     "agentspec.models.registry", "agentspec.engine.model",
     "agentspec.models.embedded"],
)
def test_all_names_exist(module: str) -> None:
    loaded = importlib.import_module(module)
    for name in loaded.__all__:
        assert hasattr(loaded, name), f"{module}.{name}"


def test_the_token_level_imports_nothing_of_the_server() -> None:
    """``agentspec.decoding`` owns the grammar, the chooser and the cache: the server builds on it, never the reverse."""
    package = Path(__file__).resolve().parents[1] / "agentspec" / "decoding"
    offenders = []
    for path in sorted(package.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            offenders += [f"{path.name}:{node.lineno} {name}" for name in names if name.startswith("agentspec.serve")]
    assert offenders == []


class FakeStream:
    """Test fake of a TokenStream: echoes a scripted answer, one token per step, and records its life."""

    def __init__(self, prompt: list[int], reuse: Reuse, answer: list[int], log: list[str]) -> None:
        self.cached = reuse[0]
        self.covered = list(prompt[: self.cached])
        self._pending = list(prompt[self.cached :])
        self._answer = list(answer)
        self._log = log

    @property
    def prefilled(self) -> bool:
        return not self._pending

    def layers(self) -> list[tuple[Any, Any]]:
        n = len(self.covered)
        return [(np.zeros((1, 1, n, 2)), np.zeros((1, 1, n, 2)))]

    def prefill(self) -> None:
        self.covered += self._pending
        self._pending = []

    def decode(self) -> tuple[list[TokenOut], str | None]:
        token = self._answer.pop(0)
        self.covered.append(token)
        return [TokenOut(id=token, logprob=0.0)], None if self._answer else "length"

    def close(self) -> None:
        self._log.append("closed")


class FakeGenerator:
    """Test fake of the Generator protocol: every request answers ``answer``."""

    def __init__(self, answer: list[int]) -> None:
        self.answer = answer
        self.log: list[str] = []
        self.reused: list[int] = []

    def context(self, tools: list[dict[str, Any]], messages: list[dict[str, Any]],
                hints: list[tuple[str, str]]) -> RequestContext | None:
        return None

    def start(
        self, lm: LocalModel, prompt: list[int], params: SamplingParams, *, reuse: Reuse = (0, []),
        constraint: GrammarConstraint | None = None, prefill_chunk: int = 2048,
        context: RequestContext | None = None,
    ) -> TokenStream:
        self.reused.append(reuse[0])
        return FakeStream(prompt, reuse, self.answer, self.log)


def test_the_engine_drives_any_generator_through_the_protocol() -> None:
    """Steps to the end, closes every stream (finished or dropped), and hands its cache to the next request."""
    fake = FakeGenerator([7, 8, 9])
    assert isinstance(fake, Generator) and isinstance(PlainGenerator(), Generator)
    engine = Engine(SimpleNamespace(), decoder=fake)  # type: ignore[arg-type]  # the fake never touches a model
    params = SamplingParams(max_tokens=3)

    async def run(prompt: list[int], steps: int) -> list[tuple[list[int], str | None]]:
        seen = []
        async with aclosing(engine.generate(prompt, params)) as stream:
            async for tokens, finish in stream:
                seen.append(([t.id for t in tokens], finish))
                if len(seen) == steps:
                    break
        return seen

    assert anyio.run(run, [1, 2, 3], 3) == [([7], None), ([8], None), ([9], "length")]
    assert anyio.run(run, [1, 2, 3, 7, 8, 9, 4], 1) == [([7], None)]  # the client stops after one step
    assert fake.log == ["closed", "closed"] and fake.reused == [0, 6]
    # The second request's cache supersedes the first's, of which it is a continuation.
    assert engine.stats.active == 0 and [e.tokens.tolist() for e in engine.prefix_cache._entries] == [
        [1, 2, 3, 7, 8, 9, 4, 7]]
