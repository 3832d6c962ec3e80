"""ModelClient against a real (scripted) OpenAI-compatible HTTP server."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import re
import socket
import sys
import threading
import time
import tomllib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scripted_openai_server import ScriptedFailure, ScriptedOpenAIServer

from agentspec.errors import (
    ConfigError,
    ModelOutputError,
    ModelRequestError,
    ModelTimeout,
    ModelUnavailable,
)
from agentspec.models import (
    ChatResult,
    ModelClient,
    ModelConfig,
    TextDelta,
    ToolCallDelta,
    extract_tool_calls,
    to_openai_messages,
)
from agentspec.models.parsing import parse_completion
from agentspec.types import Message, ToolCall, ToolSpec


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


pytestmark = pytest.mark.anyio

WEATHER = ToolSpec(
    name="get_weather",
    description="Weather of a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
HI = [Message(role="user", content="hi")]


def config(srv: ScriptedOpenAIServer, **overrides: Any) -> ModelConfig:
    fields: dict[str, Any] = {"base_url": srv.base_url, "model": "m", "backoff_s": 0.01, "timeout_s": 5}
    return ModelConfig(**(fields | overrides))


async def wait_for(predicate: Any, within_s: float) -> bool:
    with anyio.move_on_after(within_s):
        while not predicate():
            await anyio.sleep(0.01)
        return True
    return False


# ---------------------------------------------------------------- requests and tool calls


async def test_tools_and_tool_choice_are_sent_and_calls_parsed() -> None:
    reply = {"content": None, "tool_calls": [{"id": "call_abc", "name": "get_weather", "arguments": {"city": "Oslo"}}]}
    choice = {"type": "function", "function": {"name": "get_weather"}}
    with ScriptedOpenAIServer(lambda request: reply) as srv:
        async with ModelClient(config(srv, temperature=0.3, seed=7)) as client:
            result = await client.chat(HI, tools=[WEATHER], tool_choice=choice, stop=["END"], extra_body={"top_k": 5})
    sent = srv.requests[0]
    assert sent["tools"] == [WEATHER.openai_schema()]
    assert sent["tool_choice"] == choice
    assert (sent["model"], sent["temperature"], sent["seed"], sent["stop"], sent["top_k"]) == ("m", 0.3, 7, ["END"], 5)
    assert "stream" not in sent and "logprobs" not in sent
    assert result.message.role == "assistant"
    assert result.message.tool_calls == [ToolCall(name="get_weather", arguments={"city": "Oslo"})]
    assert result.message.tool_calls[0].id == "call_abc"
    assert result.invalid_tool_calls == []
    assert result.finish_reason == "tool_calls"
    assert result.model == "m"
    assert result.usage is not None and result.usage.prompt_tokens > 0
    assert result.latency_s > 0


async def test_conversation_is_converted_to_openai_messages() -> None:
    call = ToolCall(id="call_1", name="get_weather", arguments={"city": "Oslo", "days": 2.0})
    messages = [
        Message(role="system", content="Be brief."),
        Message(role="user", content="Weather?"),
        Message(role="assistant", content=None, tool_calls=[call]),
        Message(role="tool", content="sunny", tool_call_id="call_1", requestor="assistant"),
    ]
    with ScriptedOpenAIServer() as srv:
        async with ModelClient(config(srv)) as client:
            result = await client.chat(messages)
    assert result.message.content == "ok"
    sent = srv.requests[0]["messages"]
    assert sent[:2] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather?"}]
    function = {"name": "get_weather", "arguments": '{"city": "Oslo", "days": 2.0}'}
    assert sent[2]["tool_calls"] == [{"id": "call_1", "type": "function", "function": function}]
    assert sent[3] == {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}


def test_user_tool_calls_have_no_openai_form() -> None:
    with pytest.raises(ValueError, match="user message cannot carry tool calls"):
        to_openai_messages([Message(role="user", tool_calls=[ToolCall(name="f")])])


async def test_malformed_arguments_land_in_invalid_tool_calls() -> None:
    calls = [
        {"id": "c1", "name": "get_weather", "arguments": {"city": "Oslo"}},
        {"id": "c2", "name": "get_weather", "arguments": '{"city": "Oslo"'},
        {"id": "c3", "name": "get_weather", "arguments": "[1, 2]"},
        {"id": "c4", "name": "get_weather", "arguments": '{"x": NaN}'},
    ]
    with ScriptedOpenAIServer(lambda request: {"content": None, "tool_calls": calls}) as srv:
        async with ModelClient(config(srv)) as client:
            result = await client.chat(HI, tools=[WEATHER])
    assert [call.id for call in result.message.tool_calls] == ["c1"]
    invalid = {bad.id: bad for bad in result.invalid_tool_calls}
    assert list(invalid) == ["c2", "c3", "c4"]
    assert invalid["c2"].raw_arguments == '{"city": "Oslo"' and "not valid JSON" in invalid["c2"].error
    assert invalid["c2"].name == "get_weather"
    assert "JSON object" in invalid["c3"].error
    assert "finite" in invalid["c4"].error


# ---------------------------------------------------------------- text fallback

TAGGED = 'Checking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
FENCED = 'Checking.\n```json\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n```'


@pytest.mark.parametrize("text", [TAGGED, FENCED], ids=["tool_call_tag", "fenced_json"])
async def test_text_tool_calls_are_recovered(text: str) -> None:
    with ScriptedOpenAIServer(lambda request: {"content": text}) as srv:
        async with ModelClient(config(srv)) as client:
            with_tools = await client.chat(HI, tools=[WEATHER])
            without_tools = await client.chat(HI)
    assert with_tools.message.tool_calls == [ToolCall(name="get_weather", arguments={"city": "Oslo"})]
    assert with_tools.message.content == "Checking."
    assert without_tools.message.tool_calls == [] and without_tools.message.content == text


async def test_text_fallback_can_be_switched_off_and_keeps_malformed_calls() -> None:
    text = '<tool_call>{"name": "get_weather", "arguments": {"city": </tool_call>'
    with ScriptedOpenAIServer(lambda request: {"content": text}) as srv:
        async with ModelClient(config(srv)) as client:
            parsed = await client.chat(HI, tools=[WEATHER])
        async with ModelClient(config(srv, parse_text_tool_calls=False)) as client:
            raw = await client.chat(HI, tools=[WEATHER])
    assert parsed.message.tool_calls == [] and parsed.message.content is None
    [bad] = parsed.invalid_tool_calls
    assert bad.name == "get_weather" and "not a JSON tool call" in bad.error
    assert raw.message.content == text and raw.invalid_tool_calls == []


def test_extract_tool_calls_forms() -> None:
    two = '<tool_call>{"name": "a", "arguments": {}}</tool_call> and <tool_call>{"name": "b", "parameters": {"x": 1}}'
    assert extract_tool_calls(two) == ([{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"x": 1}}], "and")
    listed = 'Do:\n```json\n[{"name": "a", "arguments": {"y": 2}}, {"name": "b", "arguments": "{}"}]\n```\nok'
    calls = [{"name": "a", "arguments": {"y": 2}}, {"name": "b", "arguments": "{}"}]
    assert extract_tool_calls(listed) == (calls, "Do:\n\nok")
    example = 'Example:\n```json\n{"city": "Oslo"}\n```'
    assert extract_tool_calls(example) == ([], example)
    assert extract_tool_calls("plain text") == ([], "plain text")
    inline = 'Sure: ```json {"name": "a", "arguments": {"z": 3}}```'
    assert extract_tool_calls(inline) == ([{"name": "a", "arguments": {"z": 3}}], "Sure:")
    bare = ' {"name": "a", "arguments": {"z": 3}}\n'
    assert extract_tool_calls(bare) == ([{"name": "a", "arguments": {"z": 3}}], "")
    assert extract_tool_calls('{"city": "Oslo"}') == ([], '{"city": "Oslo"}')


NOISE = st.sampled_from(["<tool_call>", "</tool_call>", "```json\n", "```", '{"name": "f", ', '"arguments": ', "{", "}"])


@given(st.lists(st.one_of(NOISE, st.text(max_size=8)), max_size=12).map("".join))
def test_text_tool_call_parsing_never_crashes_nor_drops_tagged_calls(text: str) -> None:
    body = {"choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}
    result = parse_completion(body, text_tool_calls=True)
    found, _ = extract_tool_calls(text)
    assert len(result.message.tool_calls) + len(result.invalid_tool_calls) == len(found)
    if "<tool_call>" in text:
        assert found


# ---------------------------------------------------------------- retries and errors


async def test_500_is_retried_with_backoff_then_succeeds() -> None:
    responder = ScriptedFailure(500, times=2, then=lambda request: {"content": "recovered"})
    with ScriptedOpenAIServer(responder) as srv:
        async with ModelClient(config(srv, max_retries=3, backoff_s=0.05)) as client:
            started = time.monotonic()
            result = await client.chat(HI)
            elapsed = time.monotonic() - started
    assert result.message.content == "recovered"
    assert len(srv.requests) == 3
    assert elapsed >= 0.05 / 2 + 0.1 / 2  # two jittered waits: [b/2, b] then [b, 2b]


@pytest.mark.parametrize("status", [429, 503])
async def test_persistent_429_and_5xx_end_unavailable(status: int) -> None:
    with ScriptedOpenAIServer(ScriptedFailure(status, times=None)) as srv:
        async with ModelClient(config(srv, max_retries=2)) as client:
            with pytest.raises(ModelUnavailable, match=str(status)):
                await client.chat(HI)
    assert len(srv.requests) == 3


async def test_400_raises_request_error_without_retry() -> None:
    with ScriptedOpenAIServer(ScriptedFailure(400, times=None, message="bad tools")) as srv:
        async with ModelClient(config(srv, max_retries=3)) as client:
            with pytest.raises(ModelRequestError, match="bad tools") as caught:
                await client.chat(HI)
    assert caught.value.status_code == 400
    assert len(srv.requests) == 1


@pytest.mark.parametrize("reply", [{"raw_body": "{not json"}, {"raw_body": "[1, 2]"}, {"choices": []}])
async def test_unusable_bodies_raise_output_error(reply: dict[str, Any]) -> None:
    with ScriptedOpenAIServer(lambda request: reply) as srv:
        async with ModelClient(config(srv)) as client:
            with pytest.raises(ModelOutputError):
                await client.chat(HI)
    assert len(srv.requests) == 1


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_dead_endpoint_is_unavailable_quickly() -> None:
    cfg = ModelConfig(base_url=f"http://127.0.0.1:{closed_port()}/v1", model="m", max_retries=2, backoff_s=0.01)
    started = time.monotonic()
    async with ModelClient(cfg) as client:
        with pytest.raises(ModelUnavailable, match="cannot reach"):
            await client.chat(HI)
    assert time.monotonic() - started < 2


async def test_slow_endpoint_times_out() -> None:
    with ScriptedOpenAIServer(lambda request: {"content": "late", "delay_s": 5}) as srv:
        async with ModelClient(config(srv, timeout_s=0.3, max_retries=1)) as client:
            started = time.monotonic()
            with pytest.raises(ModelTimeout):
                await client.chat(HI)
            assert time.monotonic() - started < 2
            assert await wait_for(lambda: srv.disconnects == 2, 1)
    assert len(srv.requests) == 2


async def test_cancellation_aborts_the_request() -> None:
    with ScriptedOpenAIServer(lambda request: {"content": "late", "delay_s": request.get("delay_s", 10)}) as srv:
        async with ModelClient(config(srv)) as client:
            with anyio.move_on_after(0.3) as scope:
                await client.chat(HI)
            assert scope.cancelled_caught
            assert await wait_for(lambda: srv.disconnects == 1, 1)
            result = await client.chat(HI, extra_body={"delay_s": 0})  # the client is still usable
    assert result.message.content == "late"


async def test_concurrent_requests_are_served_concurrently() -> None:
    with ScriptedOpenAIServer(lambda request: {"content": "ok", "delay_s": 0.4}) as srv:
        async with ModelClient(config(srv)) as client:
            started = time.monotonic()
            async with anyio.create_task_group() as tg:
                for _ in range(4):
                    tg.start_soon(client.chat, HI)
            assert time.monotonic() - started < 1.2
    assert len(srv.requests) == 4


# ---------------------------------------------------------------- logprobs, usage, streaming


async def test_logprobs_and_cached_tokens_are_parsed() -> None:
    with ScriptedOpenAIServer(lambda request: {"content": "The sky is blue.", "cached_tokens": 3}) as srv:
        async with ModelClient(config(srv)) as client:
            result = await client.chat(HI, logprobs=True, top_logprobs=2)
    assert (srv.requests[0]["logprobs"], srv.requests[0]["top_logprobs"]) == (True, 2)
    assert result.logprobs is not None
    assert "".join(entry.token for entry in result.logprobs) == "The sky is blue."
    assert result.logprobs[0].logprob == pytest.approx(-0.1)
    assert [alt.token for alt in result.logprobs[1].top_logprobs] == [" sky", "<alt1>"]
    assert result.usage is not None and result.usage.cached_tokens == 3


STREAMED = [
    {"content": "The sky is blue today.", "cached_tokens": 2},
    {"content": "Let me check.", "tool_calls": [
        {"id": "c1", "name": "get_weather", "arguments": {"city": "Oslo"}},
        {"id": "c2", "name": "get_weather", "arguments": '{"city": '},
    ]},
    {"content": TAGGED},
]


@pytest.mark.parametrize("reply", STREAMED, ids=["text", "native_calls", "text_calls"])
async def test_streaming_assembles_the_same_result(reply: dict[str, Any]) -> None:
    with ScriptedOpenAIServer(lambda request: reply) as srv:
        async with ModelClient(config(srv)) as client:
            direct = await client.chat(HI, tools=[WEATHER], logprobs=True, top_logprobs=1)
            events = [event async for event in client.stream_chat(HI, tools=[WEATHER], logprobs=True, top_logprobs=1)]
    assert srv.requests[1]["stream"] is True
    *deltas, streamed = events
    assert isinstance(streamed, ChatResult)
    assert same(streamed, direct, ignore_ids=reply is STREAMED[2])
    text = "".join(event.text for event in deltas if isinstance(event, TextDelta))
    assert text == reply["content"]
    arguments = "".join(event.arguments for event in deltas if isinstance(event, ToolCallDelta))
    assert arguments == "".join(c["arguments"] if isinstance(c["arguments"], str) else json.dumps(c["arguments"])
                                for c in reply.get("tool_calls", []))


def same(a: ChatResult, b: ChatResult, *, ignore_ids: bool) -> bool:
    """Equal up to latency (and call ids, which the client makes up for text calls)."""

    def strip(result: ChatResult) -> dict[str, Any]:
        data = result.model_dump(exclude={"latency_s"})
        for call in data["message"]["tool_calls"] + data["invalid_tool_calls"]:
            if ignore_ids:
                call.pop("id")
        return data

    return strip(a) == strip(b)


async def test_stream_with_context_manager_and_early_exit_closes_the_stream() -> None:
    reply = {"content": "one two three four five six", "chunk_delay_s": 0.2}
    with ScriptedOpenAIServer(lambda request: reply) as srv:
        async with ModelClient(config(srv)) as client:
            async with client.stream_chat(HI) as stream:
                async for event in stream:
                    assert isinstance(event, TextDelta)
                    break
            assert await wait_for(lambda: srv.disconnects == 1, 1)


async def test_cancelling_a_stream_consumer_closes_the_stream() -> None:
    reply = {"content": "one two three four five six", "chunk_delay_s": 0.3}
    seen: list[Any] = []
    with ScriptedOpenAIServer(lambda request: reply) as srv:
        async with ModelClient(config(srv)) as client:
            with anyio.move_on_after(0.5):
                async for event in client.stream_chat(HI):
                    seen.append(event)
            assert 0 < len(seen) < 6
            assert await wait_for(lambda: srv.disconnects == 1, 1)


async def test_stream_open_is_retried_and_4xx_translated() -> None:
    responder = ScriptedFailure(502, times=1, then=lambda request: {"content": "hi"})
    with ScriptedOpenAIServer(responder) as srv:
        async with ModelClient(config(srv)) as client:
            events = [event async for event in client.stream_chat(HI)]
    assert isinstance(events[-1], ChatResult) and events[-1].message.content == "hi"
    with ScriptedOpenAIServer(ScriptedFailure(422, times=None)) as srv:
        async with ModelClient(config(srv)) as client:
            with pytest.raises(ModelRequestError) as caught:
                async for _ in client.stream_chat(HI):
                    pass
    assert caught.value.status_code == 422 and len(srv.requests) == 1


# ---------------------------------------------------------------- models and configuration


async def test_model_is_discovered_when_only_one_is_served() -> None:
    with ScriptedOpenAIServer(models=("only-model",)) as srv:
        async with ModelClient(config(srv, model="")) as client:
            assert await client.list_models() == ["only-model"]
            await client.chat(HI)
            await client.chat(HI)
    assert [request["model"] for request in srv.requests] == ["only-model", "only-model"]
    assert srv.model_list_requests == 2  # list_models() once, discovery once, then cached


async def test_discovery_with_several_models_names_them() -> None:
    with ScriptedOpenAIServer(models=("a-model", "b-model")) as srv:
        async with ModelClient(config(srv, model="")) as client:
            with pytest.raises(ConfigError, match="a-model, b-model"):
                await client.chat(HI)
    assert srv.requests == []


def test_for_role_parses_url_url_model_and_name() -> None:
    env = {"AGENTSPEC_AGENT_BASE_URL": "http://env:1/v1", "OPENAI_API_KEY": "sk-fallback"}
    url_only = ModelConfig.for_role("agent", "http://h:8000/v1/", env=env)
    assert (url_only.base_url, url_only.model, url_only.api_key) == ("http://h:8000/v1", "", "sk-fallback")
    with_model = ModelConfig.for_role("agent", "http://h:8000/v1#org/model-7b", env=env)
    assert (with_model.base_url, with_model.model) == ("http://h:8000/v1", "org/model-7b")
    named = ModelConfig.for_role("agent", "model-7b", env=env)
    assert (named.base_url, named.model) == ("http://env:1/v1", "model-7b")
    flagged = ModelConfig.for_role("agent", "model-7b", base_url="http://flag:2/v1", env=env)
    assert flagged.base_url == "http://flag:2/v1"


def test_for_role_reads_role_variables_and_overrides() -> None:
    env = {
        "AGENTSPEC_USER_MODEL": "sim-model",
        "OPENAI_BASE_URL": "http://openai-env:3/v1",
        "AGENTSPEC_USER_API_KEY": "sk-user",
        "OPENAI_API_KEY": "sk-other",
        "AGENTSPEC_USER_TIMEOUT": "7.5",
    }
    cfg = ModelConfig.for_role("user", env=env, temperature=0.7, max_retries=1)
    assert (cfg.base_url, cfg.model) == ("http://openai-env:3/v1", "sim-model")
    assert (cfg.api_key, cfg.timeout_s) == ("sk-user", 7.5)
    assert (cfg.temperature, cfg.max_retries) == (0.7, 1)
    assert ModelConfig.for_role("speculator", env={"AGENTSPEC_SPECULATOR_MODEL": "http://s:9/v1#d"}).model == "d"
    assert ModelConfig.for_role("agent", "http://h:1/v1", env={}).api_key == "EMPTY"


def test_for_role_errors_name_what_to_set() -> None:
    with pytest.raises(ConfigError) as caught:
        ModelConfig.for_role("agent", "model-7b", env={})
    assert "--agent-model" in str(caught.value) and "AGENTSPEC_AGENT_BASE_URL" in str(caught.value)
    with pytest.raises(ConfigError, match="AGENTSPEC_AGENT_TIMEOUT"):
        ModelConfig.for_role("agent", "http://h:1/v1", env={"AGENTSPEC_AGENT_TIMEOUT": "soon"})
    with pytest.raises(ConfigError, match="http"):
        ModelConfig.for_role("agent", "m", base_url="localhost:8000", env={})


# ---------------------------------------------------------------- failures inside a stream, declared imports


def _sse_head_and_first_chunk() -> bytes:
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
             "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}, "finish_reason": None}]}
    event = f"data: {json.dumps(chunk)}\n\n".encode()
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    return head + f"{len(event):x}\r\n".encode() + event + b"\r\n"


@contextmanager
def broken_stream_server(after_first_chunk: str) -> Iterator[str]:
    """A raw HTTP server whose one stream sends a chunk, then "cut"s the connection or "stall"s."""
    listener = socket.create_server(("127.0.0.1", 0))
    release = threading.Event()

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            received = b""
            while b"\r\n\r\n" not in received:
                received += conn.recv(65536)
            head, _, body = received.partition(b"\r\n\r\n")
            length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
            while len(body) < length:
                body += conn.recv(65536)
            conn.sendall(_sse_head_and_first_chunk())
            if after_first_chunk == "stall":
                release.wait(10)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    finally:
        release.set()
        thread.join(timeout=10)
        listener.close()


@pytest.mark.parametrize(("behaviour", "error"), [("cut", ModelUnavailable), ("stall", ModelTimeout)])
async def test_a_stream_that_breaks_after_its_first_chunk_is_translated(behaviour: str, error: type) -> None:
    # Whichever HTTP library the installed openai SDK runs on, what escapes is an agentspec error.
    with broken_stream_server(behaviour) as base_url:
        async with ModelClient(ModelConfig(base_url=base_url, model="m", timeout_s=0.5, max_retries=0)) as client:
            events: list[Any] = []
            with pytest.raises(error):
                async for event in client.stream_chat(HI):
                    events.append(event)
    assert [event.text for event in events] == ["Hel"]


REPO = Path(__file__).resolve().parents[1]


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared_distributions() -> set[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    pins = [*project["dependencies"], *(pin for extra in project["optional-dependencies"].values() for pin in extra)]
    return {_canonical(re.split(r"[<>=!~\[; ]", pin, maxsplit=1)[0]) for pin in pins}


def _imported_modules() -> dict[str, str]:
    """Top-level third-party modules the library imports anywhere (lazy imports too), with one file each."""
    own = {"agentspec", "envs", "__future__"}
    found: dict[str, str] = {}
    for path in sorted([*REPO.glob("agentspec/**/*.py"), *REPO.glob("envs/**/*.py")]):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for top in (name.split(".")[0] for name in names):
                if top not in sys.stdlib_module_names and top not in own:
                    found.setdefault(top, str(path.relative_to(REPO)))
    return found


OWN_VENVS = {"appworld": "envs/appworld/", "tau2": "agentspec/bench/tau2/official_check.py",
             "loguru": "agentspec/bench/tau2/official_check.py"}
"""Modules imported only by code that runs in a bench's own venv (AppWorld pins pydantic<2; the official tau2
package and its logger, which only re-scores a run's tau2 files): the file prefix."""


EXTRA_MODULES = {"llama_cpp": "llama-cpp-python"}
"""Modules of an optional extra that README's first command (``.[test]``) leaves out, and the distribution each
comes from: an import of one that is not installed is declared when that distribution is in an extra."""


def _undeclared(imported: dict[str, str], declared: set[str], providers: Mapping[str, list[str]]) -> dict[str, str]:
    """The imports that no declared distribution provides: an installed module by the distributions that installed
    it, one that is not installed by :data:`EXTRA_MODULES` (anything else not installed is undeclared)."""
    undeclared: dict[str, str] = {}
    for module, where in imported.items():
        if module in OWN_VENVS and where.startswith(OWN_VENVS[module]):
            continue
        installed = {_canonical(dist) for dist in providers.get(module, [])}
        if not installed and module in EXTRA_MODULES:
            installed = {_canonical(EXTRA_MODULES[module])}
        if not installed & declared:
            undeclared[module] = where
    return undeclared


def test_the_library_imports_only_declared_distributions() -> None:
    # httpx2 came in with some openai versions only: code must not lean on what a dependency happens to pull in.
    undeclared = _undeclared(_imported_modules(), _declared_distributions(), importlib.metadata.packages_distributions())
    assert not undeclared, f"imported but not declared in pyproject.toml: {undeclared}"


def test_an_optional_extra_counts_as_declared_installed_or_not() -> None:
    """Issue 26 item 17: after README's first command llama_cpp (extra [llama]) is not installed, and the check
    still passes; installed or not it passes, while a module nobody declared fails it either way."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    pins = [pin for extra in project["optional-dependencies"].values() for pin in extra]
    extras = {_canonical(re.split(r"[<>=!~\[; ]", pin, maxsplit=1)[0]) for pin in pins}
    assert {_canonical(dist) for dist in EXTRA_MODULES.values()} <= extras
    declared, imported = _declared_distributions(), _imported_modules()
    assert set(EXTRA_MODULES) <= set(imported)  # each entry is still needed
    providers = importlib.metadata.packages_distributions()
    for module, dist in EXTRA_MODULES.items():  # where it is installed, the table names what installed it
        assert module not in providers or _canonical(dist) in {_canonical(d) for d in providers[module]}
    without = {module: dists for module, dists in providers.items() if module not in EXTRA_MODULES}
    with_them = {**without, **{module: [dist] for module, dist in EXTRA_MODULES.items()}}
    for installed in (without, with_them):
        assert _undeclared(imported, declared, installed) == {}
    stray = next(module for module, dists in without.items() if not {_canonical(d) for d in dists} & declared)
    nowhere = {stray: "agentspec/a.py", "no_such_module_anywhere": "agentspec/b.py", "llama_cpp": "agentspec/c.py"}
    for installed in (without, with_them):
        assert set(_undeclared(nowhere, declared, installed)) == {stray, "no_such_module_anywhere"}
