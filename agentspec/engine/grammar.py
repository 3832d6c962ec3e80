"""Tool-call grammars with llguidance: the tool definition type, the call grammar and one generation's place in it.

This module owns everything the token level knows about tools: the OpenAI
tool definition (:class:`ToolDef`, :class:`FunctionDef`, validated with
pydantic), the llguidance grammar of a call (:func:`tool_grammar`), whether
a tool's parameters compile at all (:func:`schema_error`) and the
per-request grammar state (:class:`GrammarConstraint`).  The server builds
its constraints here, and the schema drafter follows the same grammar.

A constrained output is hermes tool-call blocks whose JSON follows the tools'
schemas, with fixed separators so the forced text is canonical::

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

:func:`tool_grammar` builds the grammar (one block, or several with
``parallel``); :class:`GrammarConstraint` drives one generation: the
allowed-token mask, the tokens the grammar forces, and whether it is
finished.  A grammar that cannot be built is a :class:`~agentspec.errors.ConfigError`
(the server answers it with a 400).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from agentspec.engine.model import require
from agentspec.errors import ConfigError

__all__ = ["FunctionDef", "GrammarConstraint", "ToolDef", "rebased", "schema_error", "tool_defs", "tool_grammar"]

# Canonical JSON: what the tokenizer would produce for json.dumps output.
_JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": ", "lenient": True}


class FunctionDef(BaseModel):
    """One function of a tool list: its name, description and JSON-schema ``parameters`` (unknown fields ignored)."""

    model_config = ConfigDict(extra="ignore")

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")
    description: str | None = None
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class ToolDef(BaseModel):
    """An OpenAI tool definition: ``{"type": "function", "function": {...}}``."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["function"] = "function"
    function: FunctionDef


def tool_defs(functions: Sequence[dict[str, Any]]) -> list[ToolDef]:
    """Tool definitions from bare function dicts (``{"name", "parameters", ...}``), as drafters hold them."""
    return [ToolDef.model_validate({"type": "function", "function": function}) for function in functions]


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
    tools: Sequence[ToolDef], *, only: str | None = None, parallel: bool = False, ll_tokenizer: Any = None
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


def schema_error(tool: ToolDef, ll_tokenizer: Any) -> str | None:
    """Why ``tool``'s parameters cannot constrain a call (one line), or None when they can."""
    if tool.function.parameters.get("type", "object") != "object":
        return "must be a JSON schema of type object"
    llguidance = require("llguidance")
    grammar = llguidance.LLMatcher.grammar_from_lark(f"start: %json {json.dumps(_call_schema(tool))}")
    error = llguidance.LLMatcher.validate_grammar(grammar, ll_tokenizer)
    if error:
        return f"is not a valid JSON schema: {error.strip().splitlines()[0]}"
    return None


class GrammarConstraint:
    """One generation's position in a grammar; not thread-safe (one request owns it).

    Raises :class:`~agentspec.errors.ConfigError` when the grammar cannot be built.
    """

    def __init__(self, grammar: str, ll_tokenizer: Any, vocab_size: int) -> None:
        self._matcher = require("llguidance").LLMatcher(ll_tokenizer, grammar)
        if self._matcher.is_error():
            raise ConfigError(f"cannot build the tool grammar: {self._matcher.get_error()}")
        self._vocab = vocab_size

    @property
    def matcher(self) -> Any:
        """The llguidance matcher (the greedy chooser reads its mask; drafters only read copies)."""
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


def render_call(name: str, arguments: dict[str, Any]) -> str:
    """A call as the tool grammar writes it.

    >>> render_call("f", {"x": 1})
    '<tool_call>\\n{"name": "f", "arguments": {"x": 1}}\\n</tool_call>'
    """
    body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"<tool_call>\n{body}\n</tool_call>"
