"""The OpenAI Agents SDK adapter (issue 40, item 1): an SDK ``Agent`` run as it is under agentspec's executor.

A scripted OpenAI-compatible server (127.0.0.1) plays the agent's model; its answer depends only on how many tool
results the conversation holds, so the SDK's own ``Runner`` and the adapter get the same script."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

agents = pytest.importorskip("agents", reason="the Agents SDK adapter needs the optional extra agentspec[agents]")

from agents import (  # noqa: E402 - after the skip, as the extra may be missing
    Agent,
    AgentOutputSchema,
    FunctionTool,
    InputGuardrail,
    OpenAIChatCompletionsModel,
    OutputGuardrail,
    RunConfig,
    Runner,
    WebSearchTool,
    function_tool,
)
from openai import AsyncOpenAI  # noqa: E402
from pydantic import BaseModel  # noqa: E402
from scripted_openai_server import ScriptedOpenAIServer  # noqa: E402

from agentspec import Decision, ModelConfig  # noqa: E402
from agentspec.errors import ConfigError  # noqa: E402
from agentspec.integrations.agents_sdk import AgentExecutor, effect  # noqa: E402
from agentspec.types import ToolCall  # noqa: E402

INSTRUCTIONS = "You compare the weather of cities and send one report."
TASK = "Compare Paris, Rome and Oslo, then send the report."
FINAL = "Report sent."


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def _tool_results(request: dict[str, Any]) -> list[str]:
    """Each tool message's text as a model reads it (a message of content parts: their texts, one per line)."""
    return [_text(m.get("content")) for m in request["messages"] if m["role"] == "tool"]


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(str(part.get("text")) for part in content if part.get("type") == "text")
    return str(content)


def agent_model(request: dict[str, Any]) -> dict[str, Any]:
    """The agent's scripted model: Paris; Rome and Oslo in one answer; a report of what the tools said; text."""
    seen = _tool_results(request)
    if len(seen) == 0:
        return {"content": None, "tool_calls": [_call("weather", city="Paris")]}
    if len(seen) == 1:
        return {"content": None, "tool_calls": [_call("weather", city="Rome"), _call("weather", city="Oslo")]}
    if len(seen) == 3:
        return {"content": None, "tool_calls": [_call("send_report", text=" | ".join(seen))]}
    return {"content": f"{FINAL} ({seen[-1]})"}


def slow_agent_model(request: dict[str, Any]) -> dict[str, Any]:
    """:func:`agent_model`, slow enough that a speculator's guess runs before the authority answers."""
    return {**agent_model(request), "delay_s": 0.2}


def speculator_model(request: dict[str, Any]) -> dict[str, Any]:
    """A speculator that knows the script: one call per step (agentspec's history has one per message)."""
    steps = [_call("weather", city="Paris"), _call("weather", city="Rome"), _call("weather", city="Oslo")]
    seen = _tool_results(request)
    return {"content": None, "tool_calls": [steps[len(seen)]]} if len(seen) < len(steps) else {"content": "no guess"}


class Tools:
    """The agent's function tools over a counter of what their bodies ran."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, dict[str, Any]]] = []
        self.lock = threading.Lock()

        @function_tool
        @effect("read_only")
        def weather(city: str) -> str:
            """Today's weather in a city."""
            self._record("weather", city=city)
            return {"Paris": "sunny, 21C", "Rome": "hot, 30C", "Oslo": "rain, 12C"}.get(city, "unknown")

        @function_tool
        def send_report(text: str) -> str:
            """Send the comparison report (an external effect)."""
            self._record("send_report", text=text)
            return f"sent {len(text)} characters"

        self.weather, self.send_report = weather, send_report

    def _record(self, name: str, **arguments: Any) -> None:
        with self.lock:
            self.ran.append((name, arguments))

    def count(self, name: str) -> int:
        return sum(1 for ran, _ in self.ran if ran == name)


def _agent(tools: Tools, base_url: str, **extra: Any) -> Agent[Any]:
    model = OpenAIChatCompletionsModel(model="scripted-model", openai_client=AsyncOpenAI(base_url=base_url,
                                                                                         api_key="test"))
    return Agent(name="weather", instructions=INSTRUCTIONS, tools=[tools.weather, tools.send_report], model=model,
                 **extra)


def _sdk_calls(request_log: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """Every tool call the model made, in order, from the assistant messages of the last request."""
    calls = []
    for message in request_log[-1]["messages"]:
        for call in message.get("tool_calls") or []:
            calls.append((call["function"]["name"], json.loads(call["function"]["arguments"])))
    return calls


async def _sdk_run(agent: Agent[Any]) -> Any:
    """``Runner.run`` as a user calls it (no tracing export: nothing outside 127.0.0.1), its client closed after."""
    try:
        return await Runner.run(agent, TASK, run_config=RunConfig(tracing_disabled=True))
    finally:
        assert isinstance(agent.model, OpenAIChatCompletionsModel)
        await agent.model._client.close()


def test_the_sdk_runner_and_the_adapter_make_the_same_calls_and_answer() -> None:
    with ScriptedOpenAIServer(agent_model) as srv:
        sdk_tools = Tools()
        sdk = anyio.run(_sdk_run, _agent(sdk_tools, srv.base_url))
        sdk_requests, srv.requests[:] = list(srv.requests), []
        ours_tools = Tools()
        ours = AgentExecutor(_agent(ours_tools, srv.base_url), mode="sequential").run_sync(TASK)
        ours_requests = list(srv.requests)
    assert [(s.call.name, s.call.arguments) for s in ours.steps] == _sdk_calls(sdk_requests)
    assert ours_tools.ran == sdk_tools.ran  # the tool bodies ran the same calls, in the same order
    assert ours.final_output == sdk.final_output == ours.answer
    assert sdk.final_output.startswith(FINAL)
    assert _tool_results(ours_requests[-1]) == _tool_results(sdk_requests[-1])  # what the model was told
    first = ours_requests[0]["messages"]
    assert first[:2] == [{"role": "system", "content": INSTRUCTIONS}, {"role": "user", "content": TASK}]
    assert first == sdk_requests[0]["messages"]
    assert len(ours_requests) == len(sdk_requests) == 4


def _run(mode: str, speculator: Any = None) -> tuple[Any, Tools]:
    with ScriptedOpenAIServer(slow_agent_model) as srv:
        tools = Tools()
        result = AgentExecutor(_agent(tools, srv.base_url), mode=mode, speculator=speculator).run_sync(TASK)
    return result, tools


def _trace(result: Any) -> list[tuple[str, dict[str, Any], str]]:
    return [(s.call.name, s.call.arguments, s.observation.content) for s in result.steps]


@pytest.mark.parametrize("mode", ["sa", "smc"])
def test_modes_give_the_sequential_result_and_commit_reads_from_forks(mode: str) -> None:
    baseline, base_tools = _run("sequential")
    with ScriptedOpenAIServer(speculator_model) as spec:
        result, tools = _run(mode, ModelConfig(base_url=spec.base_url, model="scripted-model"))
    assert _trace(result) == _trace(baseline)
    assert result.final_output == baseline.final_output
    assert any(s.source != "authority" and s.call.name == "weather" for s in result.steps)
    assert all(s.source == "authority" for s in result.steps if s.call.name == "send_report")
    assert tools.count("send_report") == base_tools.count("send_report") == 1


class GuessesTheExternalCall:
    """A speculator whose every guess is the external ``send_report``: no guess of it may ever run."""

    async def decide(self, history: Any) -> Decision:
        return Decision(call=ToolCall(name="send_report", arguments={"text": "guessed"}))


@pytest.mark.parametrize("mode", ["sa", "smc"])
def test_an_external_tool_never_runs_more_often_than_the_authority_called_it(mode: str) -> None:
    baseline, _ = _run("sequential")
    result, tools = _run(mode, GuessesTheExternalCall())
    assert _trace(result) == _trace(baseline)
    authority_calls = sum(1 for s in result.steps if s.call.name == "send_report")
    assert tools.count("send_report") == authority_calls == 1
    assert ("send_report", {"text": "guessed"}) not in tools.ran


def test_an_effects_mapping_declares_a_tool_read_only_and_a_bad_name_is_refused() -> None:
    tools = Tools()
    executor = AgentExecutor(_agent(tools, "http://127.0.0.1:9/v1"), mode="sequential",
                             effects={"send_report": "read_only"})
    assert executor.backend.effect("send_report").value == "read_only"
    assert executor.backend.effect("weather").value == "read_only"
    with pytest.raises(ConfigError, match="readonly"):
        AgentExecutor(_agent(Tools(), "http://127.0.0.1:9/v1"), mode="sequential", effects={"weather": "readonly"})
    with pytest.raises(ConfigError, match="nope"):
        AgentExecutor(_agent(Tools(), "http://127.0.0.1:9/v1"), mode="sequential", effects={"nope": "read_only"})


def test_a_tool_error_is_the_sdks_own_error_text() -> None:
    tools = Tools()
    executor = AgentExecutor(_agent(tools, "http://127.0.0.1:9/v1"), mode="sequential")
    observation = executor.environment.execute(ToolCall(name="weather", arguments={"town": "Paris"}))
    assert "An error occurred while running the tool" in observation.content  # the SDK's default error function
    assert tools.ran == []


class Answer(BaseModel):
    text: str


async def _no_guardrail(*args: Any) -> Any:
    raise AssertionError("never called")


def _hand_built_tool(**extra: Any) -> FunctionTool:
    async def invoke(context: Any, arguments: str) -> str:
        return "ok"

    return FunctionTool(name="plain", description="", params_json_schema={"type": "object", "properties": {}},
                        on_invoke_tool=invoke, **extra)


REFUSED: dict[str, dict[str, Any]] = {
    "handoffs": {"handoffs": [Agent(name="other")]},
    "input guardrails": {"input_guardrails": [InputGuardrail(guardrail_function=_no_guardrail)]},
    "output guardrails": {"output_guardrails": [OutputGuardrail(guardrail_function=_no_guardrail)]},
    "output_type Answer": {"output_type": Answer},
    "output_type AgentOutputSchema": {"output_type": AgentOutputSchema(Answer)},
    "hosted tool 'web_search'": {"tools": [WebSearchTool()]},
    "tool approval": {"tools": [_hand_built_tool(needs_approval=True)]},
    "tool_use_behavior 'stop_on_first_tool'": {"tool_use_behavior": "stop_on_first_tool"},
}


@pytest.mark.parametrize("feature", list(REFUSED))
def test_each_unsupported_feature_is_one_config_error_line_naming_it(feature: str) -> None:
    agent = Agent(name="refused", model="m", **REFUSED[feature])
    with pytest.raises(ConfigError) as raised:
        AgentExecutor(agent, base_url="http://127.0.0.1:9/v1", mode="sequential")
    message = str(raised.value)
    assert feature in message and "\n" not in message


def test_a_responses_model_is_refused_and_a_name_takes_the_base_url_given() -> None:
    from agents import OpenAIResponsesModel

    responses = OpenAIResponsesModel(model="m", openai_client=AsyncOpenAI(base_url="http://127.0.0.1:9/v1",
                                                                            api_key="k"))
    with pytest.raises(ConfigError, match="OpenAIResponsesModel"):
        AgentExecutor(Agent(name="r", model=responses), mode="sequential")
    executor = AgentExecutor(Agent(name="n", model="qwen"), base_url="http://127.0.0.1:9/v1/", api_key="k",
                             mode="sequential")
    endpoint = executor.authority.config  # the run opens it; the adapter makes the SDK-shaped policy from its client
    assert isinstance(endpoint, ModelConfig)
    assert (endpoint.base_url, endpoint.model) == ("http://127.0.0.1:9/v1", "qwen")


def docs_responder(request: dict[str, Any]) -> dict[str, Any]:
    """The API page's example: the authority reads Paris, then Rome, then answers; the speculator guesses the reads."""
    seen = len(_tool_results(request))
    reads = [_call("weather", city="Paris"), _call("weather", city="Rome")]
    if request["model"] == "speculator":
        return {"tool_calls": [reads[seen]]} if seen < len(reads) else {"content": "no guess"}
    reply = {"tool_calls": [reads[seen]]} if seen < len(reads) else {"content": "Rome is warmer."}
    return {**reply, "delay_s": 0.2}


def test_the_readmes_sdk_example_runs(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from test_readme_example import REPO, example_code

    page = REPO / "README.md"  # the README's "Your agent, as it is"
    code = example_code("agents-sdk", page)
    assert len([line for line in code.splitlines() if line.strip()]) < 15
    with ScriptedOpenAIServer(docs_responder) as srv:
        monkeypatch.setenv("AGENTSPEC_AGENT_BASE_URL", srv.base_url)
        monkeypatch.setenv("AGENTSPEC_SPECULATOR_BASE_URL", srv.base_url)
        monkeypatch.setenv("AGENTSPEC_SPECULATOR_MODEL", "speculator")
        exec(compile(code, str(page), "exec"), {"__name__": "docs_agents_sdk_example"})
        authority = [r for r in srv.requests if r["model"] == "qwen3-8b"]
    out = capsys.readouterr().out.strip()
    assert out == "Rome is warmer. ['sa', 'sa']"
    assert f"It prints `{out}`" in page.read_text(encoding="utf-8")
    assert {t["function"]["name"] for t in authority[0]["tools"]} == {"weather"}  # the agent's tools, no `done`


# --------------------------------------------------------------------------- the agent's MCP servers

NOTES_SERVER = Path(__file__).resolve().parent / "servers" / "notes_server.py"
MCP_TASK = "Note 'buy milk' and tell me what notes there are."


def notes_model(request: dict[str, Any]) -> dict[str, Any]:
    """The agent's model over the notes server: list, add, list again, answer with what the last list said."""
    seen = _tool_results(request)
    steps = [_call("list_notes"), {"name": "add_note", "arguments": {"text": "buy milk", "name": "milk"}}, _call("list_notes")]
    reply = {"content": None, "tool_calls": [steps[len(seen)]]} if len(seen) < len(steps) else {"content": seen[-1]}
    return {**reply, "delay_s": 0.1}


def notes_speculator(request: dict[str, Any]) -> dict[str, Any]:
    seen = _tool_results(request)
    return {"content": None, "tool_calls": [_call("list_notes")]} if len(seen) != 1 else {"content": "no guess"}


async def _with_notes(root: Path, play: Any) -> Any:
    """``play(server)`` with the notes server over ``root`` connected as the SDK's stdio MCP server."""
    from agents.mcp import MCPServerStdio

    async with MCPServerStdio(params={"command": sys.executable, "args": [str(NOTES_SERVER), str(root)]}) as server:
        return await play(server)


def _notes_agent(server: Any, base_url: str) -> Agent[Any]:
    model = OpenAIChatCompletionsModel(model="scripted-model", openai_client=AsyncOpenAI(base_url=base_url,
                                                                                         api_key="test"))
    return Agent(name="notes", instructions="You keep the user's notes.", mcp_servers=[server], model=model)


def test_an_agents_mcp_servers_tools_run_as_the_sdk_runs_them(tmp_path: Path) -> None:
    with ScriptedOpenAIServer(notes_model) as srv:

        async def by_sdk(server: Any) -> Any:
            agent = _notes_agent(server, srv.base_url)
            try:
                return await Runner.run(agent, MCP_TASK, run_config=RunConfig(tracing_disabled=True))
            finally:
                assert isinstance(agent.model, OpenAIChatCompletionsModel)
                await agent.model._client.close()

        sdk = anyio.run(_with_notes, tmp_path / "sdk", by_sdk)
        sdk_requests, srv.requests[:] = list(srv.requests), []

        async def by_us(server: Any) -> Any:
            return await AgentExecutor(_notes_agent(server, srv.base_url), mode="sequential").run(MCP_TASK)

        ours = anyio.run(_with_notes, tmp_path / "ours", by_us)
        ours_requests = list(srv.requests)
    assert [(s.call.name, s.call.arguments) for s in ours.steps] == _sdk_calls(sdk_requests)
    assert ours.final_output == sdk.final_output and "milk" in ours.final_output
    assert _tool_results(ours_requests[-1]) == _tool_results(sdk_requests[-1])
    assert (tmp_path / "ours" / "milk.note").read_text() == (tmp_path / "sdk" / "milk.note").read_text() == "buy milk"
    # A server's tools are external unless declared: no read ran in a fork, and the write ran once.
    assert [s.source for s in ours.steps] == ["authority"] * 3


def test_an_mcp_tool_declared_read_only_is_speculated_and_the_write_runs_once(tmp_path: Path) -> None:
    with ScriptedOpenAIServer(notes_model) as srv, ScriptedOpenAIServer(notes_speculator) as spec_srv:

        async def by_us(server: Any) -> Any:
            executor = AgentExecutor(_notes_agent(server, srv.base_url), mode="sa", effects={"list_notes": "read_only"},
                                     speculator=ModelConfig(base_url=spec_srv.base_url, model="scripted-model"))
            return await executor.run(MCP_TASK)

        ours = anyio.run(_with_notes, tmp_path, by_us)
    assert [s.call.name for s in ours.steps] == ["list_notes", "add_note", "list_notes"]
    assert "sa" in [s.source for s in ours.steps]  # a read committed from the speculator's fork
    assert (tmp_path / "milk.note").read_text() == "buy milk" and "milk" in ours.final_output
    with pytest.raises(ConfigError, match="does not have: no_such_tool"):
        anyio.run(_with_notes, tmp_path, lambda server: AgentExecutor(
            _notes_agent(server, srv.base_url), effects={"no_such_tool": "read_only"}, mode="sequential").run(MCP_TASK))
