"""Chat messages and tools to prompt text, through the model's own chat template.

Templates that render ``tools`` themselves (Qwen2.5) get them as given.  For
templates that do not (SmolLM2), the tools are described in the system
message in the hermes convention (``<tools>`` JSON, answers in
``<tool_call>`` tags), earlier calls are written back as ``<tool_call>``
text and tool results as ``<tool_response>`` user turns, so any chat model
can be asked for tool calls and :func:`agentspec.models.extract_tool_calls`
can read them.
"""

from __future__ import annotations

import json
from typing import Any

import jinja2

from agentspec.engine.model import LocalModel
from agentspec.serve.protocol import APIError, ChatMessage, ChatRequest

__all__ = ["render_prompt"]

_TOOLS_PREAMBLE = (
    "You may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{tools}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within <tool_call></tool_call> "
    'XML tags:\n<tool_call>\n{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>'
)


def render_prompt(model: LocalModel, request: ChatRequest) -> str:
    """The prompt text for ``request``; a 400 :class:`APIError` if it cannot render.

    With ``continue_final_message`` the prompt is the conversation before the
    last message with a generation prompt, then that message's text verbatim:
    exactly what the model saw while it was writing that text itself, so a
    probe forked from a running request shares its tokens (and KV cache).
    """
    source = request.messages[:-1] if request.continue_final_message else request.messages
    opened = request.add_generation_prompt or request.continue_final_message
    tools = [tool.model_dump(exclude_none=True) for tool in request.tools or []] if request.tools_active else []
    try:
        if model.supports_tools:
            text = _apply(model, [_native(message) for message in source], tools or None, opened)
        else:
            messages = [_hermes(message) for message in source]
            if tools:
                messages = _with_tool_preamble(messages, tools)
            text = _apply(model, messages, None, opened)
        return text + request.messages[-1].text() if request.continue_final_message else text
    except ValueError as exc:
        raise APIError(400, f"invalid messages: {exc}", param="messages") from None


def _apply(model: LocalModel, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, opened: bool) -> str:
    try:
        text = model.tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=opened, tokenize=False)
    except jinja2.TemplateError as exc:
        # Templates raise on conversations they cannot render (roles out of order, ...).
        raise ValueError(f"the chat template rejected them: {exc}") from None
    return str(text)


def _role(message: ChatMessage) -> str:
    return "system" if message.role == "developer" else message.role


def _native(message: ChatMessage) -> dict[str, Any]:
    out: dict[str, Any] = {"role": _role(message), "content": message.text()}
    if message.tool_calls:
        out["tool_calls"] = [
            {"type": "function", "id": call.id,
             "function": {"name": call.function.name, "arguments": _arguments(call.function.arguments)}}
            for call in message.tool_calls
        ]
    if message.role == "tool":
        out["tool_call_id"] = message.tool_call_id or ""
    return out


def _hermes(message: ChatMessage) -> dict[str, Any]:
    if message.role == "tool":
        return {"role": "user", "content": f"<tool_response>\n{message.text()}\n</tool_response>"}
    text = message.text()
    for call in message.tool_calls or []:
        body = {"name": call.function.name, "arguments": _arguments(call.function.arguments)}
        text += f"\n<tool_call>\n{json.dumps(body, ensure_ascii=False)}\n</tool_call>"
    return {"role": _role(message), "content": text.strip()}


def _arguments(arguments: str | dict[str, Any]) -> Any:
    """Call arguments as a value (templates dump them as JSON); text that is not JSON stays text."""
    if isinstance(arguments, dict):
        return arguments
    try:
        return json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError:
        return arguments


def _with_tool_preamble(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    described = "\n".join(json.dumps(tool, ensure_ascii=False) for tool in tools)
    preamble = _TOOLS_PREAMBLE.format(tools=described)
    if messages and messages[0]["role"] == "system":
        first = {**messages[0], "content": f"{messages[0]['content']}\n\n{preamble}".strip()}
        return [first, *messages[1:]]
    return [{"role": "system", "content": preamble}, *messages]
