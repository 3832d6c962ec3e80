"""Where a partial JSON text stands: inside which object, after which key, in which string.

The schema drafter needs to know, at a choice point of the grammar, what the
legal continuations *mean* (a parameter name, an enum value, a boolean), so
it reads the call text written so far::

    >>> ctx = analyze('{"name": "get_weather", "arguments": {"city": "Paris", "un')
    >>> ctx.kind, ctx.path, ctx.partial, sorted(ctx.seen)
    ('in_key', ('arguments',), 'un', ['city'])
    >>> ctx.call_name
    'get_weather'
    >>> analyze('{"name": "get_weather", "arguments": {"unit": ').path
    ('arguments', 'unit')

Kinds: ``key`` (a key or the end of the object comes next), ``in_key``,
``value`` (a value comes next), ``in_string`` (inside a string value),
``in_scalar`` (inside a number or literal), ``after_value`` (a comma or the
end comes next), ``colon`` (after a key), ``done`` (the top value is complete), ``invalid``.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import Any

__all__ = ["JsonContext", "analyze", "find_call_start", "schema_at"]


@dataclass(frozen=True, slots=True)
class JsonContext:
    kind: str
    path: tuple[str | int, ...] = ()
    """Keys and indices from the top value to the value being written (or the container, for key/after_value)."""
    partial: str = ""
    """The current key, string or scalar so far (strings unescaped)."""
    seen: frozenset[str] = frozenset()
    """Keys already written in the innermost object."""
    container: str | None = None
    """``"object"`` or ``"array"``: the innermost open container."""
    call_name: str | None = None
    """The top object's ``"name"`` once written (the called tool)."""


@dataclass
class _Frame:
    kind: str  # "object" | "array"
    state: str  # object: key|colon|value|after; array: value|after
    key: str | None = None
    index: int = 0
    keys: set[str] = field(default_factory=set)


def analyze(text: str) -> JsonContext:
    """Read the JSON prefix ``text`` (module docstring); a malformed prefix gives kind ``invalid``."""
    stack: list[_Frame] = []
    top: dict[str, Any] = {}
    in_string = escape = False
    string_is_key = False
    buf: list[str] = []
    scalar: list[str] = []
    started = False

    def path() -> tuple[str | int, ...]:
        out: list[str | int] = []
        for frame in stack:
            if frame.kind == "object" and frame.key is not None and frame.state in ("value", "colon"):
                out.append(frame.key)
            elif frame.kind == "array":
                out.append(frame.index)
        return tuple(out)

    def value_done(value: Any) -> None:
        if not stack:
            return
        frame = stack[-1]
        if frame.kind == "object":
            if len(stack) == 1 and frame.key is not None:
                top[frame.key] = value
            frame.state = "after"
        else:
            frame.state = "after"

    def fail() -> JsonContext:
        return JsonContext("invalid")

    i = 0
    while i < len(text):
        ch = text[i]
        i += 1
        if in_string:
            if escape:
                escape = False
                buf.append(ch)
                continue
            if ch == "\\":
                escape = True
                buf.append(ch)
                continue
            if ch == '"':
                in_string = False
                raw = "".join(buf)
                try:
                    value = json.loads(f'"{raw}"')
                except json.JSONDecodeError:
                    return fail()
                buf = []
                if string_is_key:
                    frame = stack[-1]
                    frame.key = value
                    frame.keys.add(value)
                    frame.state = "colon"
                else:
                    value_done(value)
                continue
            buf.append(ch)
            continue
        if scalar:
            if ch in ",}] \n\t\r":
                token = "".join(scalar)
                scalar = []
                try:
                    value_done(json.loads(token))
                except json.JSONDecodeError:
                    return fail()
            else:
                scalar.append(ch)
                continue
        if ch in " \n\t\r":
            continue
        if not stack:
            if started:
                return fail()
            if ch == "{":
                stack.append(_Frame("object", "key"))
                started = True
                continue
            if ch == "[":
                stack.append(_Frame("array", "value"))
                started = True
                continue
            return fail()
        frame = stack[-1]
        if frame.kind == "object":
            if frame.state == "key":
                if ch == '"':
                    in_string, string_is_key = True, True
                elif ch == "}":
                    stack.pop()
                    value_done(None)
                else:
                    return fail()
            elif frame.state == "colon":
                if ch != ":":
                    return fail()
                frame.state = "value"
            elif frame.state == "after":
                if ch == ",":
                    frame.state, frame.key = "key", None
                elif ch == "}":
                    stack.pop()
                    value_done(None)
                else:
                    return fail()
            else:  # value
                if not _start_value(ch, stack):
                    if ch == '"':
                        in_string, string_is_key = True, False
                    elif ch in "-0123456789tfn":
                        scalar.append(ch)
                    else:
                        return fail()
        else:
            if frame.state == "after":
                if ch == ",":
                    frame.state = "value"
                    frame.index += 1
                elif ch == "]":
                    stack.pop()
                    value_done(None)
                else:
                    return fail()
            elif ch == "]":
                stack.pop()
                value_done(None)
            elif not _start_value(ch, stack):
                if ch == '"':
                    in_string, string_is_key = True, False
                elif ch in "-0123456789tfn":
                    scalar.append(ch)
                else:
                    return fail()
    name = top.get("name") if isinstance(top.get("name"), str) else None
    if not stack:
        return JsonContext("done" if started else "value", call_name=name)
    frame = stack[-1]
    common = functools.partial(JsonContext, seen=frozenset(frame.keys) if frame.kind == "object" else frozenset(),
                               container=frame.kind, call_name=name)
    if in_string:
        if string_is_key:
            return common("in_key", path(), "".join(buf))
        return common("in_string", path(), "".join(buf))
    if scalar:
        return common("in_scalar", path(), "".join(scalar))
    if frame.kind == "object":
        kind = {"key": "key", "colon": "colon", "value": "value", "after": "after_value"}[frame.state]
        return common(kind, path())
    return common("value" if frame.state == "value" else "after_value", path())


def _start_value(ch: str, stack: list[_Frame]) -> bool:
    """Open a container for ``ch`` (``{`` or ``[``) as the current value; False when ``ch`` opens none."""
    if ch == "{":
        stack.append(_Frame("object", "key"))
        return True
    if ch == "[":
        stack.append(_Frame("array", "value"))
        return True
    return False


def find_call_start(text: str) -> int | None:
    """Offset of the JSON of the last tool call being written in ``text``, or None.

    A call starts at the first ``{`` after the last ``<tool_call>`` tag or
    code fence, or at the start when the text itself starts with ``{``.
    """
    best = -1
    for marker in ("<tool_call>", "```json", "```"):
        at = text.rfind(marker)
        if at >= 0:
            best = max(best, at + len(marker))
            break
    if best < 0:
        stripped = len(text) - len(text.lstrip())
        return stripped if text[stripped:stripped + 1] == "{" else None
    brace = text.find("{", best)
    if brace < 0 or text[best:brace].strip():
        return None
    return brace


def schema_at(tools: dict[str, dict[str, Any]], ctx: JsonContext, path: tuple[str | int, ...]) -> dict[str, Any] | None:
    """The JSON schema of the value at ``path`` inside a call ``{"name", "arguments"}`` (None if unknown).

    ``tools`` maps tool names to their parameter schemas; the call's own
    ``name`` (``ctx.call_name``) picks the schema for ``arguments``.
    """
    if not path:
        return {"type": "object", "properties": {"name": {"type": "string"}, "arguments": {"type": "object"}},
                "required": ["name", "arguments"]}
    if path[0] == "name":
        return {"type": "string", "enum": sorted(tools)} if len(path) == 1 else None
    if path[0] != "arguments" or ctx.call_name not in tools:
        return None
    schema: dict[str, Any] | None = tools[ctx.call_name]
    for step in path[1:]:
        if schema is None:
            return None
        if isinstance(step, int):
            items = schema.get("items")
            schema = items if isinstance(items, dict) else None
        else:
            properties = schema.get("properties")
            schema = properties.get(step) if isinstance(properties, dict) else None
    return schema
