"""Tools as typed Python methods: the ``@tool`` decorator, schemas from signatures, toolkits.

A toolkit is a class whose tool methods are marked ``@tool(effect=...)``.  The
schema a model sees is generated from the signature (type hints) and the
docstring (first paragraph = description, ``Args:`` section = parameter
descriptions)::

    class Counter(Toolkit):
        def __init__(self) -> None:
            self.n = 0

        @tool(Effect.MUTATING)
        def add(self, k: int) -> str:
            \"\"\"Add k to the counter.

            Args:
                k: How much to add.
            \"\"\"
            self.n += k
            return f"now {self.n}"

    Counter().run(ToolCall(name="add", arguments={"k": 2})).content == "now 2"

Arguments reach the method exactly as the model wrote them: nothing is
coerced.  A missing or unexpected keyword, or any exception raised by the
body, becomes an error observation ``"Error: <text>"``; it never escapes.
"""

from __future__ import annotations

import inspect
import json
import re
import types
import typing
from collections.abc import Callable
from datetime import date, datetime
from typing import Any

from pydantic import BaseModel

from agentspec.errors import ConfigError, ToolNotFound
from agentspec.types import Effect, Observation, Requestor, ToolCall, ToolSpec

TOOL_ATTR = "__agentspec_effect__"
"""The attribute :func:`tool` sets on a function it marks: the function's :class:`~agentspec.types.Effect`."""


def tool(effect: Effect | str = Effect.MUTATING) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a method (or plain function) as a tool with the given effect class: an :class:`Effect`, or one of their
    exact names (``"read_only"``, ``"idempotent"``, ``"mutating"``, ``"external"``).  Anything else is a
    :class:`ConfigError` where the tool is defined: a misspelt ``"readonly"`` would otherwise make the tool mutating
    without a word (an effect read from data, an MCP annotation, still fails closed: :meth:`Effect.parse`)."""
    if isinstance(effect, Effect):
        parsed = effect
    else:
        names = [e.value for e in Effect]
        if effect not in names:
            raise ConfigError(f"@tool({effect!r}): not an effect; give an Effect or one of {', '.join(names)}")
        parsed = Effect(effect)

    def mark(fn: Callable[..., Any]) -> Callable[..., Any]:
        setattr(fn, TOOL_ATTR, parsed)
        return fn

    return mark


_JSON_TYPES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean", dict: "object", list: "array"}


def _schema_for(annotation: Any) -> dict[str, Any]:
    """JSON schema for one parameter's type hint (the subset tools use)."""
    if annotation is inspect.Parameter.empty or annotation is Any:
        return {}
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        schemas = [_schema_for(a) for a in members]
        if len(schemas) == 1:
            return schemas[0]
        return {"anyOf": schemas}
    if origin is typing.Literal:
        values = list(typing.get_args(annotation))
        return {"type": _JSON_TYPES.get(type(values[0]), "string"), "enum": values}
    if origin in (list, tuple):
        args = typing.get_args(annotation)
        return {"type": "array", "items": _schema_for(args[0]) if args else {}}
    if origin is dict:
        return {"type": "object"}
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return annotation.model_json_schema()
    if annotation in _JSON_TYPES:
        return {"type": _JSON_TYPES[annotation]}
    return {}


_ARG_LINE = re.compile(r"^(\w+)\s*(?:\([^)]*\))?:\s*(.*)$")


def _parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into (description, {param: text})."""
    if not doc:
        return "", {}
    head, _, rest = inspect.cleandoc(doc).partition("\nArgs:")
    params: dict[str, str] = {}
    base: int | None = None
    current: str | None = None
    for line in rest.splitlines():
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if indent == 0:
            break  # the next section (Returns:, Raises:)
        base = indent if base is None else base
        match = _ARG_LINE.match(line.strip()) if indent == base else None
        if match:
            current = match.group(1)
            params[current] = match.group(2).strip()
        elif current:
            params[current] += " " + line.strip()
    return head.strip(), params


def spec_from_function(fn: Callable[..., Any], effect: Effect | str | None = None, name: str | None = None) -> ToolSpec:
    """Build a :class:`ToolSpec` from a typed, docstringed function or bound method."""
    description, arg_docs = _parse_docstring(fn.__doc__)
    hints = typing.get_type_hints(fn)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for pname, param in inspect.signature(fn).parameters.items():
        if pname == "self" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        schema = dict(_schema_for(hints.get(pname, param.annotation)))
        if pname in arg_docs:
            schema["description"] = arg_docs[pname]
        if param.default is inspect.Parameter.empty:
            required.append(pname)
        elif param.default is not None:
            schema["default"] = param.default
        properties[pname] = schema
    parameters: dict[str, Any] = {"type": "object", "properties": properties, "required": required}
    chosen = effect if effect is not None else getattr(fn, TOOL_ATTR, Effect.MUTATING)
    return ToolSpec(name=name or fn.__name__, description=description, parameters=parameters, effect=Effect.parse(chosen))


def _json_default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, (date, datetime)):
        return value.isoformat()
    if isinstance(value, set):
        return sorted(value)
    raise TypeError(f"cannot serialise {type(value).__name__}")


def render_result(value: Any) -> str:
    """A tool's return value as the text an agent sees: strings as they are, the rest as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, default=_json_default)


class Toolkit:
    """A set of ``@tool`` methods over some state.

    Subclasses hold their state as attributes.  Non-tool public methods (task
    initialisation helpers, assertion functions) can be called by name with
    :meth:`call_function`, but models only ever see and reach the tools.
    """

    def tool_names(self) -> list[str]:
        return [name for name, _ in self._tool_methods()]

    def has_tool(self, name: str) -> bool:
        return callable(getattr(type(self), name, None)) and hasattr(getattr(type(self), name), TOOL_ATTR)

    def specs(self) -> list[ToolSpec]:
        return [spec_from_function(method) for _, method in self._tool_methods()]

    def effect(self, name: str) -> Effect:
        if not self.has_tool(name):
            raise ToolNotFound(f"Tool '{name}' not found.")
        return getattr(type(self), name).__agentspec_effect__

    def call(self, name: str, arguments: dict[str, Any]) -> Any:
        """Call a tool; exceptions from the body propagate (see :meth:`run` for the safe form)."""
        if not self.has_tool(name):
            raise ToolNotFound(f"Tool '{name}' not found.")
        return getattr(self, name)(**arguments)

    def call_function(self, name: str, arguments: dict[str, Any]) -> Any:
        """Call any public method by name (initialisation and assertion helpers included)."""
        method = getattr(self, name, None)
        if name.startswith("_") or not callable(method):
            raise ToolNotFound(f"Function '{name}' not found on {type(self).__name__}.")
        return method(**arguments)

    def run(self, call: ToolCall, requestor: Requestor = "assistant") -> Observation:
        """Execute a call and always return an observation; errors become ``"Error: ..."``."""
        try:
            content = render_result(self.call(call.name, call.arguments))
        except Exception as exc:  # noqa: BLE001 - any tool failure is data for the agent
            return Observation(call_id=call.id, name=call.name, content=f"Error: {exc}", error=True, requestor=requestor)
        return Observation(call_id=call.id, name=call.name, content=content, requestor=requestor)

    def _tool_methods(self) -> list[tuple[str, Callable[..., Any]]]:
        found = []
        for name in dir(type(self)):
            if name.startswith("_"):
                continue
            attr = getattr(type(self), name, None)
            if callable(attr) and hasattr(attr, TOOL_ATTR):
                found.append((name, getattr(self, name)))
        return found
