"""Tool-call grammars with llguidance: decoding that can only produce a valid call.

When a request requires a call (``tool_choice`` "required" or a named
function), the output is constrained to hermes tool-call blocks whose JSON
follows the tools' schemas, with fixed separators so the forced text is
canonical::

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

:func:`tool_grammar` builds the grammar (one block, or several when the
request sets ``parallel_tool_calls``); :class:`GrammarConstraint` drives one
generation: the allowed-token mask, the tokens the grammar forces, and
whether it is finished.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from agentspec.models.local import require
from agentspec.serve.protocol import APIError, ToolDef

__all__ = ["GrammarConstraint", "check_tools", "rebased", "tool_grammar"]

# Canonical JSON: what the tokenizer would produce for json.dumps output.
_JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": ", "lenient": True}


_ARGUMENTS = "#/properties/arguments"
"""Where a tool's ``parameters`` sit inside the call schema built around them."""

# Keywords whose values are maps from names to subschemas (a name such as "default" is not a keyword there).
_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
# Keywords whose values are data, where a "$ref" key is not a reference.
_DATA = frozenset({"const", "enum", "default", "examples"})


def rebased(schema: Any, base: str = _ARGUMENTS) -> Any:
    """``schema`` with every local ``$ref`` moved under ``base``, so it can be embedded in a larger schema.

    A pydantic-generated schema refers to its ``$defs`` from its root; once
    it is the ``arguments`` of a call schema, the root is the call's::

        >>> rebased({"$defs": {"C": {"type": "string"}}, "properties": {"c": {"$ref": "#/$defs/C"}}})
        {'$defs': {'C': {'type': 'string'}}, 'properties': {'c': {'$ref': '#/properties/arguments/$defs/C'}}}
    """
    if isinstance(schema, list):
        return [rebased(item, base) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "$ref" and isinstance(value, str) and value.startswith("#"):
            out[key] = base + value[1:]
        elif key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: rebased(sub, base) for name, sub in value.items()}
        elif key in _DATA:
            out[key] = value
        else:
            out[key] = rebased(value, base)
    return out


def _call_schema(tool: ToolDef) -> dict[str, Any]:
    arguments = rebased(tool.function.parameters)
    return {
        "type": "object",
        "properties": {"name": {"const": tool.function.name}, "arguments": arguments},
        "required": ["name", "arguments"],
        "additionalProperties": False,
        "x-guidance": _JSON_OPTIONS,
    }


def tool_grammar(
    tools: list[ToolDef], *, only: str | None = None, parallel: bool = False, ll_tokenizer: Any = None
) -> str:
    """An llguidance (Lark) grammar for one, or with ``parallel`` one or more, ``<tool_call>`` blocks.

    ``only`` restricts the call to that function (a named ``tool_choice``).
    Give ``ll_tokenizer`` when the vocabulary may hold ``<tool_call>`` as a
    special token (Qwen2.5): a quoted literal would then force that token,
    which the matcher itself rejects, so the tags become token references.
    """
    chosen = [tool for tool in tools if only is None or tool.function.name == only]
    rules = [f"call_{i}: %json {json.dumps(_call_schema(tool))}" for i, tool in enumerate(chosen)]
    block = '"<tool_call>\\n" call "\\n</tool_call>"'
    if ll_tokenizer is not None and all(_is_special(ll_tokenizer, tag) for tag in ("<tool_call>", "</tool_call>")):
        block = '<tool_call> "\\n" call "\\n" </tool_call>'
    start = f"start: block (\"\\n\" block)*\nblock: {block}" if parallel else f"start: {block}"
    calls = "call: " + " | ".join(f"call_{i}" for i in range(len(chosen)))
    return require("llguidance").LLMatcher.grammar_from_lark("\n".join([start, calls, *rules]))


def _is_special(ll_tokenizer: Any, text: str) -> bool:
    tokens = ll_tokenizer.tokenize_str(text)
    return len(tokens) == 1 and bool(ll_tokenizer.is_special_token(tokens[0]))


def check_tools(tools: list[ToolDef], ll_tokenizer: Any) -> None:
    """Raise a 400 :class:`APIError` (code ``invalid_schema``) for a tool whose parameters are not a usable schema."""
    llguidance = require("llguidance")
    for index, tool in enumerate(tools):
        param = f"tools[{index}].function.parameters"
        if tool.function.parameters.get("type", "object") != "object":
            raise APIError(400, f"{param} must be a JSON schema of type object", code="invalid_schema", param=param)
        grammar = llguidance.LLMatcher.grammar_from_lark(f"start: %json {json.dumps(_call_schema(tool))}")
        error = llguidance.LLMatcher.validate_grammar(grammar, ll_tokenizer)
        if error:
            first = error.strip().splitlines()[0]
            raise APIError(400, f"{param} is not a valid JSON schema: {first}", code="invalid_schema", param=param)


class GrammarConstraint:
    """One generation's position in a grammar; not thread-safe (one request owns it)."""

    def __init__(self, grammar: str, ll_tokenizer: Any, vocab_size: int) -> None:
        self._matcher = require("llguidance").LLMatcher(ll_tokenizer, grammar)
        if self._matcher.is_error():
            raise APIError(400, f"cannot build the tool grammar: {self._matcher.get_error()}", code="invalid_schema")
        self._vocab = vocab_size

    @property
    def matcher(self) -> Any:
        """The llguidance matcher (the ToolSpec decoder drives it itself; drafters only read copies)."""
        return self._matcher

    def forced(self) -> list[int]:
        """Tokens the grammar allows no alternative to, from here (may be empty)."""
        return list(self._matcher.compute_ff_tokens())

    def allowed(self) -> np.ndarray:
        """A boolean array over the vocabulary: the tokens the grammar allows next."""
        bits = np.frombuffer(self._matcher.compute_bitmask(), dtype=np.uint8)
        return np.unpackbits(bits, bitorder="little")[: self._vocab].astype(bool)

    def consume(self, tokens: list[int]) -> None:
        if not self._matcher.consume_tokens(tokens):
            raise RuntimeError(f"the grammar rejected tokens {tokens}: {self._matcher.get_error()}")

    @property
    def done(self) -> bool:
        """The grammar is complete and allows nothing but the end."""
        return bool(self._matcher.is_stopped())
