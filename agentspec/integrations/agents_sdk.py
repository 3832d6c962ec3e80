"""Run an OpenAI Agents SDK ``Agent`` as it is under agentspec's executor (``pip install 'agentspec[agents]'``).

    from agents import Agent, function_tool
    from agentspec import ModelConfig
    from agentspec.integrations.agents_sdk import AgentExecutor, effect

    @function_tool
    @effect("read_only")
    def weather(city: str) -> str:
        \"\"\"Today's weather in a city.\"\"\"
        ...

    agent = Agent(name="planner", instructions="...", tools=[weather, send_report], model="qwen3-8b")
    runner = AgentExecutor(agent, base_url="http://gpu:8000/v1", speculator=ModelConfig.for_role("speculator"))
    result = runner.run_sync("Compare Paris and Rome, then send the report")
    result.final_output, result.steps

What maps to what:

* the agent's instructions (a string, or the SDK's dynamic instructions, resolved once per run) are the system
  prompt, and the run's input is the first user message, as ``Runner.run`` sends them;
* its function tools are the environment's tools, each run through the SDK's own invoke path
  (:func:`agents.tool.invoke_function_tool`: its JSON parsing and validation, its timeout, its error function),
  and its output turned into model text by the SDK's own conversion;
* its model is the authority: any OpenAI-compatible chat-completions endpoint, the agent's model name with the
  ``base_url``/``api_key`` given here, or else those of its :class:`~agents.OpenAIChatCompletionsModel`'s client or of
  the SDK's default client (``set_default_openai_client``); the authority may answer with text, which ends the run
  as the SDK's final output, as the SDK's own loop does;
* its MCP servers (connected by the caller, as for ``Runner.run``): their tools, listed once per run with the
  SDK's own conversion (:meth:`agents.Agent.get_all_tools`), join the function tools and run through the same
  invoke path; a server's ``readOnlyHint`` is its word about itself, so its tools are ``external`` unless
  ``effects`` declares them;
* effects: a tool declares one with :func:`effect` (on the function tool or on its function) or in
  ``effects={"name": "read_only"}``.  Its state lives in the user's closures, which no fork can copy, so only
  ``read_only`` tools ever run speculatively; every other tool, and a tool with no declared effect, is ``external``
  (run only when the authority makes that very call), the rules of :class:`agentspec.api.FunctionEnvironment`.

Refused, each with one :class:`~agentspec.errors.ConfigError` line naming it: handoffs, input and output
guardrails, hosted (non-function) tools, an ``output_type`` other than ``str``, tool guardrails, tool
approval, a ``tool_use_behavior`` other than ``"run_llm_again"``, a ``tool_choice`` other than ``"auto"``, agent
hooks, prompt templates, a tool whose ``is_enabled`` is a function, a model other than a chat-completions one.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
from agents import Agent, FunctionTool, ItemHelpers, OpenAIChatCompletionsModel, RunContextWrapper
from agents.models import get_default_model
from agents.models._openai_shared import get_default_openai_client  # the SDK's own default; no public getter
from agents.tool import invoke_function_tool
from agents.tool_context import ToolContext
from openai.types.responses import ResponseFunctionToolCall

from agentspec.api import Executor, FunctionEnvironment, RunResult, Speculator
from agentspec.bench.protocol import DONE
from agentspec.env import Environment
from agentspec.errors import ConfigError
from agentspec.models import ModelClient, ModelConfig
from agentspec.models.result import ChatResult
from agentspec.roles import PolicyMaker
from agentspec.runtime.policies.llm import LLMPolicy, step_messages
from agentspec.runtime.policies.protocol import Decision, History, Policy
from agentspec.snapshot import InProcessBackend, InProcessSandbox
from agentspec.tools import TOOL_ATTR, tool
from agentspec.types import Effect, Message, Observation, Requestor, ToolCall, ToolSpec

__all__ = ["AgentExecutor", "AgentRunResult", "SdkToolsEnvironment", "effect", "run_agent"]

OPENAI_BASE_URL = "https://api.openai.com/v1"


def effect(name: Effect | str) -> Any:
    """Declare a tool's effect: ``@effect("read_only")`` on a function tool or on the function it wraps.

    Only ``read_only`` lets a tool run speculatively (in a fork, before the authority asks for it); any other
    effect, like no effect at all, makes it ``external``.  A misspelt name is a :class:`ConfigError` here, where the
    tool is defined.  The mark is :func:`agentspec.tool`'s, so ``@agentspec.tool("read_only")`` works too."""
    return tool(name)


@dataclass
class AgentRunResult(RunResult):
    """What :meth:`AgentExecutor.run` returns: agentspec's :class:`~agentspec.api.RunResult` (``steps``, ``answer``,
    ``result``, ``metrics``, ``governor``) plus ``final_output``, the SDK-shaped final output: the text of the
    authority's last answer (what ``Runner.run(...).final_output`` is for an agent whose output type is ``str``),
    or None where the run ended without one (a step limit, an error)."""

    final_output: str | None = None


# --------------------------------------------------------------------------------------------- refusals


def check_supported(agent: Agent[Any]) -> None:
    """:class:`ConfigError` (one line naming it) for the first feature of ``agent`` the adapter does not run."""
    refusals = [
        (bool(agent.handoffs), "handoffs"),
        (bool(agent.input_guardrails), "input guardrails"),
        (bool(agent.output_guardrails), "output guardrails"),
        (agent.output_type not in (None, str), f"output_type {_name(agent.output_type)} (only str)"),
        (agent.hooks is not None, "agent hooks"),
        (agent.prompt is not None, "prompt templates (Agent.prompt)"),
        (agent.tool_use_behavior != "run_llm_again", f"tool_use_behavior {agent.tool_use_behavior!r}"),
        (agent.model_settings.tool_choice not in (None, "auto"),
         f"model_settings.tool_choice {agent.model_settings.tool_choice!r}"),
    ]
    for refused, what in refusals:
        if refused:
            raise ConfigError(f"agent {agent.name!r}: {what} not supported by agentspec's Agents SDK adapter")
    for sdk_tool in agent.tools:
        _check_tool(agent, sdk_tool)


def _check_tool(agent: Agent[Any], sdk_tool: Any) -> None:
    """Refuse a tool the adapter cannot run as the SDK would."""
    name = getattr(sdk_tool, "name", type(sdk_tool).__name__)
    if not isinstance(sdk_tool, FunctionTool):
        what = f"hosted tool {name!r} ({type(sdk_tool).__name__}): only function tools"
    elif sdk_tool.tool_input_guardrails or sdk_tool.tool_output_guardrails:
        what = f"tool guardrails on {name!r}"
    elif sdk_tool.needs_approval is not False:
        what = f"tool approval (needs_approval) on {name!r}"
    elif callable(sdk_tool.is_enabled):
        what = f"a function as is_enabled of {name!r}"
    elif name == DONE:
        what = f"a tool named {name!r} (agentspec's speculators end a task with it)"
    else:
        return
    raise ConfigError(f"agent {agent.name!r}: {what} not supported by agentspec's Agents SDK adapter")


def _name(value: Any) -> str:
    return getattr(value, "__name__", type(value).__name__)


# --------------------------------------------------------------------------------------------- the model


def endpoint(agent: Agent[Any], base_url: str | None = None, api_key: str | None = None) -> ModelConfig:
    """The authority's endpoint: the agent's model name at ``base_url`` (else its chat-completions model's client,
    else the SDK's default client, else ``OPENAI_BASE_URL`` or OpenAI), with the agent's ``temperature``, ``top_p``,
    ``max_tokens`` and ``parallel_tool_calls`` (its other model settings are not sent)."""
    model = agent.model
    client = None
    if isinstance(model, OpenAIChatCompletionsModel):
        name, client = str(model.model), model._client  # the SDK keeps the client it was given here only
    elif model is None or isinstance(model, str):
        name, client = model or get_default_model(), get_default_openai_client()
    else:
        raise ConfigError(f"agent {agent.name!r}: model {type(model).__name__} not supported by agentspec's Agents "
                          "SDK adapter (give a model name or an OpenAIChatCompletionsModel)")
    # Without a client, what the SDK's own default client reads: OPENAI_BASE_URL and OPENAI_API_KEY.
    url = base_url or (str(client.base_url) if client is not None else os.environ.get("OPENAI_BASE_URL",
                                                                                     OPENAI_BASE_URL))
    key = api_key or (client.api_key if client is not None else os.environ.get("OPENAI_API_KEY")) or "EMPTY"
    settings = agent.model_settings
    extra = {setting: value for setting, value in (("top_p", settings.top_p),
                                             ("parallel_tool_calls", settings.parallel_tool_calls)) if value is not None}
    # The SDK sends no temperature unless set; neither do we (None), nor parse calls written as text, as it does not.
    return ModelConfig(base_url=url.rstrip("/"), model=name, api_key=key, temperature=settings.temperature,
                       max_tokens=settings.max_tokens, extra_body=extra, parse_text_tool_calls=False)


@dataclass
class AgentAuthority(LLMPolicy):
    """The agent's model deciding as in the SDK's loop: the instructions as the system message, the input as the
    user's, the agent's tools only (no ``done``), and a text answer is the final output."""

    task: str = ""
    instructions: str | None = None

    def _messages(self, history: History) -> list[Message]:
        messages = [Message(role="system", content=self.instructions)] if self.instructions else []
        messages.append(Message(role="user", content=self.task))
        for step, (call, observation) in enumerate(history):
            messages += step_messages(step, call, observation)
        return messages

    def _decision(self, result: ChatResult) -> Decision:
        decision = super()._decision(result)
        if decision.call is None and decision.final is None and decision.invalid is None:
            # The SDK's loop ends on an answer without tool calls: its text is the final output.
            decision.final, decision.text = {"answer": decision.text or ""}, None
        return decision


# --------------------------------------------------------------------------------------------- the tools


class SdkToolsEnvironment(FunctionEnvironment):
    """An agent's function tools as an environment, with :class:`~agentspec.api.FunctionEnvironment`'s rules:
    ``read_only`` tools may run in forks, every other one is ``external``.  Snapshots are empty and forks share
    this object, which is safe because only read-only tools ever run in a fork.  Under the executor its calls run
    through :class:`SdkToolsBackend`, awaited on the run's own event loop as the SDK's ``Runner`` awaits them."""

    def __init__(self, agent: Agent[Any], effects: Mapping[str, Effect | str] | None = None,
                 context: Any = None) -> None:
        self.agent, self.context = agent, context
        self.effects = dict(effects or {})
        self.functions = {}  # FunctionEnvironment's plain functions: none, execute runs the SDK's tools
        self._use([t for t in agent.tools if isinstance(t, FunctionTool) and t.is_enabled is not False],
                  final=not agent.mcp_servers)

    async def load(self) -> None:
        """The agent's tools as the SDK's loop sees them for a run: its function tools and its MCP servers' tools
        (listed now, converted by the SDK), each checked as the adapter checks a function tool."""
        if not self.agent.mcp_servers:
            return
        listed = await self.agent.get_all_tools(RunContextWrapper(self.context))
        for sdk_tool in listed:
            _check_tool(self.agent, sdk_tool)
        self._use([t for t in listed if isinstance(t, FunctionTool)], final=True)

    def _use(self, tools: Sequence[FunctionTool], *, final: bool) -> None:
        """Offer ``tools``; ``final``: every tool is known now, so an effect naming none of them is refused."""
        self.tools = {t.name: t for t in tools}
        unknown = sorted(set(self.effects) - set(self.tools))
        if unknown and final:
            raise ConfigError(f"effects name tools agent {self.agent.name!r} does not have: {', '.join(unknown)}")
        self.specs = {name: ToolSpec(name=name, description=t.description, parameters=t.params_json_schema,
                                     effect=_declared(t, self.effects.get(name)))
                      for name, t in self.tools.items()}

    def execute(self, call: ToolCall, requestor: Requestor = "assistant") -> Observation:
        """:meth:`aexecute` for a caller outside an event loop (the executor awaits :meth:`aexecute` itself)."""
        return asyncio.run(self.aexecute(call, requestor))

    async def aexecute(self, call: ToolCall, requestor: Requestor = "assistant") -> Observation:
        """Run one call through the SDK; a tool that raises past the SDK's error function is an error observation."""
        sdk_tool = self.tools.get(call.name)
        if sdk_tool is None:
            return Observation(call_id=call.id, name=call.name, content=f"Error: Tool '{call.name}' not found.",
                               error=True, requestor=requestor)
        try:
            content = await self._invoke(sdk_tool, call)
        except Exception as exc:  # noqa: BLE001 - a tool that raises past the SDK's error function
            return Observation(call_id=call.id, name=call.name, content=f"Error: {exc}", error=True,
                               requestor=requestor)
        return Observation(call_id=call.id, name=call.name, content=content, requestor=requestor)

    async def _invoke(self, sdk_tool: FunctionTool, call: ToolCall) -> str:
        """The SDK's own invocation of one call, and the text its chat-completions model would send back."""
        arguments = json.dumps(call.arguments)
        context = ToolContext(self.context, tool_name=sdk_tool.name, tool_call_id=call.id, tool_arguments=arguments,
                              agent=self.agent)
        output = await invoke_function_tool(function_tool=sdk_tool, context=context, arguments=arguments)
        raw = ResponseFunctionToolCall(arguments=arguments, call_id=call.id, name=sdk_tool.name, type="function_call")
        item = ItemHelpers.tool_call_output_item(raw, output, output_json_schema=sdk_tool.output_json_schema,
                                                 output_type_adapter=sdk_tool._output_type_adapter)
        return _as_text(item["output"])


def _as_text(output: Any) -> str:
    """A tool output as the text a model reads.  The SDK sends a list of content parts (an MCP tool's result) as
    the tool message's parts; text parts read as their texts, one per line, as an OpenAI-compatible server renders
    a message's parts.  Other parts (images, files) are kept as their JSON."""
    if isinstance(output, str):
        return output
    if isinstance(output, list) and all(isinstance(part, dict) and part.get("type") == "input_text" for part in output):
        return "\n".join(str(part.get("text", "")) for part in output)
    return json.dumps(output)


class SdkToolsBackend(InProcessBackend):
    """:class:`~agentspec.snapshot.InProcessBackend` over a :class:`SdkToolsEnvironment` whose calls are awaited
    on the executor's loop (an environment's ``execute`` is synchronous, and would block that loop while a tool
    runs, hiding nothing of its latency), in the live branch and in every fork."""

    def __init__(self, env: SdkToolsEnvironment) -> None:
        super().__init__(env)

    def _branch(self, state: Environment, lineage: tuple[str, ...], token: str) -> InProcessSandbox:
        return InProcessSandbox(state, lineage, token, calls=self)

    async def _run(self, state: Environment, step: Any, call: ToolCall, requestor: Requestor) -> Observation:
        assert isinstance(state, SdkToolsEnvironment)  # forks are this environment itself (restore returns it)
        return await state.aexecute(call, requestor)


def _declared(sdk_tool: FunctionTool, given: Effect | str | None) -> Effect:
    """A tool's effect: the mapping's, else the decorator's on the tool or its function, else external."""
    if given is not None:
        return getattr(tool(given)(lambda: None), TOOL_ATTR)  # checked as the decorator checks its spelling
    marked = getattr(sdk_tool, TOOL_ATTR, None)
    if marked is None:
        try:
            marked = getattr(sdk_tool.__wrapped__, TOOL_ATTR, None)
        except AttributeError:  # a FunctionTool built by hand wraps no function
            marked = None
    return marked if isinstance(marked, Effect) else Effect.EXTERNAL


# --------------------------------------------------------------------------------------------- the executor


class AgentExecutor(Executor):
    """An Agents SDK ``Agent`` run under agentspec's :class:`~agentspec.api.Executor`.

    ``base_url``/``api_key``: the agent's model's endpoint (default: its model's client, see :func:`endpoint`).
    ``speculator``, ``mode`` and every other keyword: as :class:`~agentspec.api.Executor` takes them.
    ``effects``: a tool name to its effect, over what :func:`effect` declared.  ``context``: the SDK run context
    object handed to the tools (``ToolContext.context``), as ``Runner.run(..., context=...)``.  One task at a time.
    """

    def __init__(self, agent: Agent[Any], *, speculator: Speculator | Sequence[Speculator] | None = None,
                 mode: str = "sa", effects: Mapping[str, Effect | str] | None = None, base_url: str | None = None,
                 api_key: str | None = None, context: Any = None, **options: Any) -> None:
        check_supported(agent)
        self.agent, self.context = agent, context
        self.environment = SdkToolsEnvironment(agent, effects, context)
        self.tools_backend = SdkToolsBackend(self.environment)
        self._task = ""
        self._instructions: str | None = None
        super().__init__(self.tools_backend, authority=PolicyMaker(endpoint(agent, base_url, api_key), self._authority),
                         speculator=speculator, mode=mode, system_prompt="", **options)

    async def run(self, task: str, *, task_id: str | None = None) -> AgentRunResult:
        """Run the agent on ``task`` (the SDK's ``input``) until its model answers with text.

        Returns an :class:`AgentRunResult`: the committed ``steps`` (each call, its observation, and ``source``:
        ``authority`` where it ran live, otherwise committed from a fork), ``answer`` and ``final_output`` (both the
        model's final text), the executor's ``result`` and ``metrics``."""
        self._instructions = await self.agent.get_system_prompt(RunContextWrapper(self.context))
        await self.environment.load()
        self._task = task
        self.bench.system_prompt_text = self._instructions or ""  # what a model speculator reads, before the task
        ran = await super().run(task, task_id=task_id)
        return AgentRunResult(ran.steps, ran.answer, ran.result, ran.governor, ran.episode, final_output=ran.answer)

    def run_sync(self, task: str, *, task_id: str | None = None) -> AgentRunResult:
        """:meth:`run` for code that is not async."""
        return anyio.run(functools.partial(self.run, task, task_id=task_id))

    def _authority(self, client: ModelClient, task: Any) -> Policy:
        """The agent's model deciding this task as the SDK's loop would (the authority, made per task)."""
        source = client.config
        return AgentAuthority(client, system_prompt=self._instructions or "", tools=self.environment.tool_specs(),
                              done_tool="", temperature=source.temperature, max_tokens=source.max_tokens,
                              tool_choice="auto", task=self._task, instructions=self._instructions)


async def run_agent(agent: Agent[Any], task: str, **options: Any) -> AgentRunResult:
    """Run ``agent`` on ``task`` once: :class:`AgentExecutor` with ``options``, then :meth:`AgentExecutor.run`."""
    return await AgentExecutor(agent, **options).run(task)

